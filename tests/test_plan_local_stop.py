"""A plan stopped while a local run holds its workflow task: by a cancel, or by `fail_fast` when
another task fails. A local run is never cancelled (its agent is not told): the plan hears the
stop once it may, waits for the run's outcome, and ends with every task's state recorded; its
history replays from every workflow task."""

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from coord.models.calls import RUN_AGENT
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.plan.spec import PlanState, PlanStatus, TaskState
from coord.starter import api
from coord.starter.api.plans import plan_record
from coord.worker import build_worker
from tests.helpers import eventually
from tests.test_agent_placement import (
    _agent_tasks,
    _replays_from_every_task,
    local_activity_types,
)
from tests.test_plan_gates import plan, start

CANCEL_REQUESTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED


class Gate:
    """`gate`, a python agent (a local run) that waits for the test; `broken` fails at once."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.started, self.release = asyncio.Event(), asyncio.Event()

    def registry(self) -> AgentRegistry:
        registry = AgentRegistry()
        registry.register("gate")(self.gate)
        registry.register("broken")(self.broken)
        return registry

    async def gate(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        self.calls[context.idempotency_key] += 1
        self.started.set()
        await self.release.wait()
        return {"opened": True}

    async def broken(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        raise ApplicationError("broken", type="permanent_failure", non_retryable=True)


def _states(state: PlanState) -> dict[str, TaskState]:
    return {task.id: task.state for task in state.tasks}


async def _a_run_recorded(handle: WorkflowHandle[Any, Any]) -> bool:
    """A local agent run's marker is in the history: the worker ended the workflow task the
    gate's run holds (heartbeating it), recording the runs that ended meanwhile."""
    events = [e async for e in handle.fetch_history_events()]
    return RUN_AGENT.name in local_activity_types(events)


async def _cancel_recorded(handle: WorkflowHandle[Any, Any]) -> bool:
    return any([e.event_type == CANCEL_REQUESTED async for e in handle.fetch_history_events()])


async def test_a_plan_cancelled_while_a_local_run_holds_its_task_waits_for_the_run(
    client: Client, task_queue: str
) -> None:
    """The cancel is recorded once the worker heartbeats the task the run holds; the run ends
    afterwards, its task succeeded, and the task after it is cancelled, never started."""
    gate = Gate()
    spec = plan(
        "plan-cancel-local",
        {"id": "open", "agent": "gate"},
        {"id": "after", "agent": "gate", "depends_on": ["open"]},
    )
    async with build_worker(client, task_queue, gate.registry()):
        handle = await start(client, task_queue, spec)
        await asyncio.wait_for(gate.started.wait(), 30)
        await handle.cancel()
        await eventually(lambda: _cancel_recorded(handle), 60)
        gate.release.set()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
        record = await plan_record(handle)
        history = await handle.fetch_history()
    assert record.status == PlanStatus.CANCELLED
    assert _states(record) == {"open": TaskState.SUCCEEDED, "after": TaskState.CANCELLED}
    assert list(gate.calls.values()) == [1], "the gate ran once; nothing after it started"
    assert _agent_tasks(list(history.events)) == {}
    await _replays_from_every_task(history)


async def test_a_failing_task_stops_a_fail_fast_plan_while_a_local_run_holds_its_task(
    client: Client, task_queue: str
) -> None:
    """`break` fails at once, in the task `open`'s run holds: the plan stops (fail_fast), the
    run it cannot cancel ends succeeded, and the task after it is cancelled."""
    gate = Gate()
    spec = plan(
        "plan-fail-fast-local",
        {"id": "open", "agent": "gate"},
        {"id": "break", "agent": "broken"},
        {"id": "after", "agent": "gate", "depends_on": ["open"]},
        fail_fast=True,
    )
    async with build_worker(client, task_queue, gate.registry()):
        handle = await start(client, task_queue, spec)
        await asyncio.wait_for(gate.started.wait(), 30)
        await eventually(lambda: _a_run_recorded(handle), 60)  # the failure, with the task
        gate.release.set()
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
        history = await handle.fetch_history()
    assert state.status == PlanStatus.FAILED
    assert "fail_fast: task break ended error" in state.summary
    assert _states(state) == {
        "open": TaskState.SUCCEEDED,
        "break": TaskState.ERROR,
        "after": TaskState.CANCELLED,
    }
    assert list(gate.calls.values()) == [1]
    assert _agent_tasks(list(history.events)) == {}
    await _replays_from_every_task(history)
