"""The TaskGraph workflow on the real dev server: the worker cap read from the history, the
dependency order, failure isolation, retries in the record, results passed to dependents,
cancellation and fail_fast. The agents are the test's own (PlanAgents)."""

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import PythonAgent
from coord.models.mesh.retry import agent_time_limit
from coord.models.plan.requests import TaskRequests
from coord.models.plan.spec import (
    PlanProgress,
    PlanSpec,
    PlanState,
    PlanStatus,
    PlanTask,
    TaskState,
)
from coord.models.wire.contract import PLAN_RECORD_MEMO, PLAN_WORKFLOW
from coord.starter import api
from coord.starter.api.common import kept_record
from coord.worker import build_worker
from coord.workflows.plan.graph import TaskGraph
from tests.helpers import eventually, task_failures

BLOB = "large-result-" * 1000
REMOTE = PythonAgent(kind="python", callable="tests:agent", execution="remote")
"""A test agent run as an activity task (its own queue, or the plan's), never locally."""
FAST_RETRY = {"max_retries": 2, "initial_delay": "50ms", "max_delay": "50ms"}


@dataclass
class PlanAgents:
    """`work` answers with its task and inputs after `delay` seconds; `fail` always fails;
    `hold` heartbeats until the test releases it (or its run is cancelled)."""

    delay: float = 0.0
    inputs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    holding: set[str] = field(default_factory=set)

    local: bool = False
    """Whether the agents run as local activities of the plan (python agents' default); these
    tests read their activity tasks and heartbeats, so they run them `execution: remote`."""

    def registry(self) -> AgentRegistry:
        registry = AgentRegistry()
        declared = None if self.local else REMOTE
        registry.register("work", "python", declared)(self.work)
        registry.register("fail", "python", declared)(self.fail)
        registry.register("hold", "python", declared)(self.hold)
        registry.register("big", "python", declared)(self.big)
        return registry

    async def work(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        task = event.event.type.removesuffix("Requested")
        self.inputs[task] = dict(context.inputs)
        await asyncio.sleep(self.delay)
        return {"task": task, **event.payload}

    async def fail(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        raise ApplicationError(f"broken on attempt {context.attempt}", type="temporary_failure")

    async def hold(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        """Says what it does (its task's `say` input, when given) and waits for the test."""
        self.holding.add(event.event.type.removesuffix("Requested"))
        if "say" in event.payload:
            context.progress(event.payload["say"])
        while not self.released.is_set():
            context.heartbeat()
            await asyncio.sleep(0.1)
        return {}

    async def big(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {"blob": BLOB}


def plan(*tasks: dict[str, Any], **fields: Any) -> PlanSpec:
    for task in tasks:
        task.setdefault("agent", "work")
        task.setdefault("retry", FAST_RETRY)
    return PlanSpec.model_validate(
        {"plan_id": f"p-{uuid.uuid4().hex[:8]}", "tasks": list(tasks), **fields}
    )


async def start(client: Client, task_queue: str, spec: PlanSpec) -> WorkflowHandle[Any, PlanState]:
    return await client.start_workflow(
        TaskGraph.run, spec.model_dump(mode="json"), id=spec.workflow_id, task_queue=task_queue
    )


async def run_plan(
    client: Client, task_queue: str, spec: PlanSpec, agents: PlanAgents
) -> tuple[PlanState, WorkflowHandle[Any, PlanState]]:
    async with build_worker(client, task_queue, agents.registry()):
        handle = await start(client, task_queue, spec)
        return await asyncio.wait_for(handle.result(), 60), handle


async def run_agent_spans(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, int, int]]:
    """Each run_agent activity as (activity id, scheduled event id, closed event id)."""
    scheduled: dict[int, str] = {}
    spans = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == "run_agent":
                scheduled[event.event_id] = attributes.activity_id
        for closed in (
            event.activity_task_completed_event_attributes,
            event.activity_task_failed_event_attributes,
            event.activity_task_timed_out_event_attributes,
            event.activity_task_canceled_event_attributes,
        ):
            if closed.scheduled_event_id in scheduled and event.event_type in CLOSED:
                sid = closed.scheduled_event_id
                spans.append((scheduled[sid], sid, event.event_id))
                break
    return spans


CLOSED = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
}


def most_at_once(spans: list[tuple[str, int, int]]) -> int:
    """The most activities scheduled and not yet closed at any point of the history."""
    changes = sorted([(s, 1) for _, s, _ in spans] + [(c, -1) for _, _, c in spans])
    level = peak = 0
    for _, change in changes:
        level += change
        peak = max(peak, level)
    return peak


async def test_the_cap_holds_from_the_history(client: Client, task_queue: str) -> None:
    spec = plan(*({"id": f"t{i:02}"} for i in range(20)), max_workers=5)
    state, handle = await run_plan(client, task_queue, spec, PlanAgents(delay=0.2))
    assert state.status == PlanStatus.COMPLETED
    assert state.summary == "20 of 20 succeeded"
    spans = await run_agent_spans(handle)
    assert sorted(activity_id for activity_id, _, _ in spans) == [
        f"t{i:02}/run/1" for i in range(20)
    ]
    assert most_at_once(spans) == 5


async def run_agent_queues(handle: WorkflowHandle[Any, Any]) -> set[str]:
    return {
        event.activity_task_scheduled_event_attributes.task_queue.name
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == "run_agent"
    }


@pytest.mark.parametrize(
    ("dispatch", "queue"), [("agent_queues", "{home}/agent-work"), ("coordinator", "{home}")]
)
async def test_dispatch_sends_the_agent_runs_to_the_agents_queue_or_the_plans_own(
    client: Client, task_queue: str, dispatch: str, queue: str
) -> None:
    spec = plan({"id": "a"}, {"id": "b", "depends_on": ["a"]}, dispatch=dispatch)
    state, handle = await run_plan(client, task_queue, spec, PlanAgents())
    assert state.summary == "2 of 2 succeeded"
    assert await run_agent_queues(handle) == {queue.format(home=task_queue)}


async def test_a_coordinator_dispatched_run_of_an_agent_its_worker_lacks_fails_unknown_agent(
    client: Client, task_queue: str
) -> None:
    spec = plan({"id": "a", "agent": "absent"}, {"id": "b"}, dispatch="coordinator")
    state, _ = await run_plan(client, task_queue, spec, PlanAgents())
    record = {task.id: task for task in state.tasks}
    error = record["a"].error
    assert error is not None and error.type == "unknown_agent"
    assert "unknown agent 'absent'" in error.message
    assert record["b"].state == TaskState.SUCCEEDED


async def test_a_diamond_runs_in_dependency_order_and_passes_results_by_id(
    client: Client, task_queue: str
) -> None:
    spec = plan(
        {"id": "a", "input": {"n": 1}},
        {"id": "b", "depends_on": ["a"], "input": {"n": 2}},
        {"id": "c", "depends_on": ["a"], "input": {"n": 3}},
        {"id": "d", "depends_on": ["b", "c"]},
    )
    agents = PlanAgents()
    state, handle = await run_plan(client, task_queue, spec, agents)
    assert state.status == PlanStatus.COMPLETED
    spans = {activity_id: (s, c) for activity_id, s, c in await run_agent_spans(handle)}
    assert spans["a/run/1"][1] < min(spans["b/run/1"][0], spans["c/run/1"][0])
    assert max(spans["b/run/1"][1], spans["c/run/1"][1]) < spans["d/run/1"][0]
    assert agents.inputs["d"] == {"b": {"task": "b", "n": 2}, "c": {"task": "c", "n": 3}}
    assert agents.inputs["a"] == {}
    record = {task.id: task for task in state.tasks}
    assert [t.state for t in record["d"].transitions] == [
        TaskState.PENDING,
        TaskState.READY,
        TaskState.RUNNING,
        TaskState.SUCCEEDED,
    ]
    assert record["b"].result == {"task": "b", "n": 2}


async def test_a_failing_task_skips_exactly_its_dependents(client: Client, task_queue: str) -> None:
    spec = plan(
        {"id": "a", "agent": "fail"},
        {"id": "b", "depends_on": ["a"]},
        {"id": "c", "depends_on": ["b"]},
        {"id": "d"},
        {"id": "e", "depends_on": ["d"]},
        {"id": "f", "depends_on": ["d", "a"]},
    )
    state, _ = await run_plan(client, task_queue, spec, PlanAgents())
    states = {task.id: (task.state, task.skipped_because) for task in state.tasks}
    assert states == {
        "a": (TaskState.ERROR, None),
        "b": (TaskState.SKIPPED, "a"),
        "c": (TaskState.SKIPPED, "a"),
        "d": (TaskState.SUCCEEDED, None),
        "e": (TaskState.SUCCEEDED, None),
        "f": (TaskState.SKIPPED, "a"),
    }
    assert state.status == PlanStatus.PARTIAL
    assert state.summary == "2 of 6 succeeded, 1 error, 3 skipped"


async def test_retries_then_error_are_in_the_record(client: Client, task_queue: str) -> None:
    spec = plan({"id": "a", "agent": "fail"})
    state, _ = await run_plan(client, task_queue, spec, PlanAgents())
    (task,) = state.tasks
    assert [(t.state, t.attempt) for t in task.transitions] == [
        (TaskState.PENDING, None),
        (TaskState.READY, None),
        (TaskState.RUNNING, 1),
        (TaskState.FAILED, 1),
        (TaskState.RUNNING, 2),
        (TaskState.FAILED, 2),
        (TaskState.RUNNING, 3),
        (TaskState.FAILED, 3),
        (TaskState.ERROR, None),
    ]
    assert task.attempts == 3
    assert task.error is not None and task.error.type == "temporary_failure"
    assert task.error.message == "broken on attempt 3"
    assert state.status == PlanStatus.FAILED


async def test_a_cycle_sent_as_plain_json_fails_the_run_naming_its_path(
    client: Client, task_queue: str
) -> None:
    raw = {
        "plan_id": f"p-{uuid.uuid4().hex[:8]}",
        "tasks": [
            {"id": "a", "agent": "work", "depends_on": ["c"]},
            {"id": "b", "agent": "work", "depends_on": ["a"]},
            {"id": "c", "agent": "work", "depends_on": ["b"]},
        ],
    }
    with pytest.raises(ValueError, match="dependency cycle a -> b -> c -> a"):
        PlanSpec.model_validate(raw)
    async with build_worker(client, task_queue, PlanAgents().registry()):
        handle = await client.start_workflow(
            PLAN_WORKFLOW, raw, id=f"plan-{raw['plan_id']}", task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "invalid_spec"
    assert cause.message == (
        "plan spec: tasks: dependency cycle a -> b -> c -> a; a plan must be acyclic"
    )


async def test_cancelling_a_plan_cancels_its_running_and_waiting_tasks(
    client: Client, task_queue: str
) -> None:
    spec = plan(
        {"id": "a", "agent": "hold", "heartbeat_timeout": "5s"},
        {"id": "b", "agent": "hold", "heartbeat_timeout": "5s"},
        {"id": "c", "depends_on": ["a"]},
        {"id": "d"},
        max_workers=2,
    )
    agents = PlanAgents()
    async with build_worker(client, task_queue, agents.registry()):
        handle = await start(client, task_queue, spec)

        async def holding() -> bool:
            return agents.holding == {"a", "b"}

        await eventually(holding)
        progress = await handle.query(TaskGraph.progress)
        assert sorted(r.task for r in progress.running) == ["a", "b"]
        assert progress.waiting_for == ["a worker slot (1 waiting, max_workers 2)"]
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 30)
        state = await kept_record(handle, PLAN_RECORD_MEMO, PlanState)
    assert state is not None
    assert state.status == PlanStatus.CANCELLED
    assert {t.id: t.state for t in state.tasks} == dict.fromkeys("abcd", TaskState.CANCELLED)
    assert all(t.result is None and t.transitions == [] for t in state.tasks)
    kinds = [row.event for row in state.events]
    assert kinds[0] == "PlanStarted" and kinds[-1] == "PlanCompleted", "the memo keeps its events"
    assert kinds.count("TaskCancelled") == 4
    spans = await run_agent_spans(handle)
    assert sorted(activity_id for activity_id, _, _ in spans) == ["a/run/1", "b/run/1"]


async def test_fail_fast_cancels_the_rest_and_fails_the_plan_with_its_report(
    client: Client, task_queue: str
) -> None:
    spec = plan(
        {"id": "slow", "agent": "hold", "heartbeat_timeout": "5s"},
        {"id": "broken", "agent": "fail", "retry": {"max_retries": 0}},
        {"id": "later", "depends_on": ["slow"]},
        fail_fast=True,
    )
    agents = PlanAgents()
    async with build_worker(client, task_queue, agents.registry()):
        handle = await start(client, task_queue, spec)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "plan_failed"
    report = PlanState.model_validate(cause.details[0])
    assert report.status == PlanStatus.FAILED
    states = {t.id: t.state for t in report.tasks}
    assert states == {
        "slow": TaskState.CANCELLED,
        "broken": TaskState.ERROR,
        "later": TaskState.CANCELLED,
    }
    assert cause.message == report.summary
    assert report.summary == (
        "0 of 3 succeeded, 1 error, 2 cancelled (fail_fast: task broken ended error)"
    )


async def test_a_task_past_its_timeout_ends_error_and_skips_its_dependents(
    client: Client, task_queue: str
) -> None:
    spec = plan(
        {"id": "stuck", "agent": "hold", "timeout": "1s", "retry": {"max_retries": 0}},
        {"id": "after", "depends_on": ["stuck"]},
        {"id": "other"},
    )
    agents = PlanAgents()
    try:
        state, _ = await run_plan(client, task_queue, spec, agents)
    finally:
        agents.released.set()
    record = {task.id: task for task in state.tasks}
    error = record["stuck"].error
    assert error is not None and error.type == "timeout"
    duration = record["stuck"].duration  # the worker ends the agent a little before the server
    assert duration is not None and duration >= agent_time_limit(timedelta(seconds=1))
    assert (record["after"].state, record["after"].skipped_because) == (TaskState.SKIPPED, "stuck")
    assert state.summary == "1 of 3 succeeded, 1 error, 1 skipped"


async def test_a_large_result_goes_by_reference_and_its_dependent_gets_the_data(
    client: Client, task_queue: str
) -> None:
    spec = plan({"id": "a", "agent": "big"}, {"id": "b", "depends_on": ["a"]}, result_limit=1024)
    agents = PlanAgents()
    state, handle = await run_plan(client, task_queue, spec, agents)
    assert state.status == PlanStatus.COMPLETED
    record = {task.id: task for task in state.tasks}
    assert record["a"].result is None and record["a"].result_ref is not None
    assert record["a"].result_ref.bytes > 1024
    assert agents.inputs["b"] == {"a": {"blob": BLOB}}
    events = [event.SerializeToString() async for event in handle.fetch_history_events()]
    assert not any(BLOB[:100].encode() in event for event in events)
    assert any(record["a"].result_ref.sha256.encode() in event for event in events)


async def test_progress_summaries_from_heartbeats_show_to_whoever_asks(
    client: Client, task_queue: str
) -> None:
    """The agents' words are read from the server's pending activities when someone asks
    (`plan state`, the progress API); the plan's record, query and details never poll them."""
    spec = plan(
        {"id": "read", "agent": "hold", "input": {"say": "Reading runAgent.ts"}},
        {"id": "fix", "agent": "hold", "input": {"say": "Fixing null check"}},
        {"id": "after", "depends_on": ["read"]},
    )
    agents = PlanAgents()
    async with build_worker(client, task_queue, agents.registry()):
        handle = await start(client, task_queue, spec)
        seen: list[PlanProgress] = []

        async def summaries_shown() -> bool:
            seen.append(await api.plan_progress(client, spec.plan_id))
            return all(task.summary for task in seen[-1].running) and len(seen[-1].running) == 2

        await eventually(summaries_shown)
        assert {(t.task, t.state, t.summary) for t in seen[-1].running} == {
            ("read", TaskState.RUNNING, "Reading runAgent.ts"),
            ("fix", TaskState.RUNNING, "Fixing null check"),
        }
        assert seen[-1].counts == {TaskState.PENDING: 1, TaskState.RUNNING: 2}
        live = {task.id: task for task in (await api.plan_state(client, spec.plan_id)).tasks}
        assert (live["read"].progress, live["fix"].progress) == (
            "Reading runAgent.ts",
            "Fixing null check",
        )
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        agents.released.set()
        state = await asyncio.wait_for(handle.result(), 30)
    assert state.status == PlanStatus.COMPLETED
    assert metadata.current_details.startswith("**Status:** running (1 pending, 2 running)")
    assert "- **read** running" in metadata.current_details
    record = {task.id: task for task in state.tasks}
    assert record["read"].progress is None and record["read"].state == TaskState.SUCCEEDED


async def test_a_plans_history_does_not_grow_while_its_agent_runs(
    client: Client, task_queue: str
) -> None:
    """A long task adds nothing to its plan's history while it runs, however long that is (the
    plan reading its agents' progress every `progress_interval` added a timer and a local
    activity each time, about five events a second at 1s: a plan reached the server's 51,200
    events in under three hours). The wait below is the elapsed time under test: fifteen
    progress intervals, in which nothing may be added."""
    spec = plan(
        {"id": "long", "agent": "hold", "input": {"say": "Reading"}}, progress_interval="200ms"
    )
    agents = PlanAgents()
    async with build_worker(client, task_queue, agents.registry()):
        handle = await start(client, task_queue, spec)

        async def reading() -> bool:
            live = await api.plan_state(client, spec.plan_id)
            return live.tasks[0].progress == "Reading"

        await eventually(reading)
        before = (await handle.describe()).raw_description.workflow_execution_info.history_length
        await asyncio.sleep(3)
        after = (await handle.describe()).raw_description.workflow_execution_info.history_length
        agents.released.set()
        state = await asyncio.wait_for(handle.result(), 30)
    assert after == before
    assert state.status == PlanStatus.COMPLETED


async def test_waiting_tasks_are_served_by_priority_then_declaration_order(
    client: Client, task_queue: str
) -> None:
    """With one slot, the roots all ask for it in the plan's first step: the critical one gets
    it first, though it is declared last; a dependent that becomes ready later waits its turn."""
    spec = plan(
        {"id": "low", "priority": "low"},
        {"id": "normal1"},
        {"id": "normal2", "depends_on": ["normal1"], "priority": "critical"},
        {"id": "high", "priority": "high"},
        {"id": "critical", "priority": "critical"},
        max_workers=1,
    )
    state, handle = await run_plan(client, task_queue, spec, PlanAgents())
    assert state.status == PlanStatus.COMPLETED
    order = [
        activity_id
        for activity_id, _, _ in sorted(await run_agent_spans(handle), key=lambda s: s[1])
    ]
    assert order == [
        "critical/run/1",
        "high/run/1",
        "normal1/run/1",
        "normal2/run/1",
        "low/run/1",
    ]


async def test_a_bug_in_a_task_fails_the_workflow_task_instead_of_hanging_the_plan(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception in one task's lifecycle (a bug, not an agent's failure) must not
    leave the plan waiting forever for a task that will never end: it fails the workflow task,
    visible in the UI and retried once a fixed worker runs it."""
    original = TaskRequests.agent_request

    def broken(self: TaskRequests, task: PlanTask, *args: Any, **kwargs: Any) -> Any:
        if task.id == "b":
            raise RuntimeError("bug building b's request")
        return original(self, task, *args, **kwargs)

    monkeypatch.setattr(TaskRequests, "agent_request", broken)
    spec = plan({"id": "a"}, {"id": "b"})
    async with build_worker(client, task_queue, PlanAgents().registry()):
        handle = await start(client, task_queue, spec)

        async def task_failed() -> bool:
            return any("bug building b's request" in f for f in await task_failures(handle))

        try:
            await eventually(task_failed, timeout=20)
        finally:
            await handle.terminate("test over")
