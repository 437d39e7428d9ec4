"""Cancelling a saga: always recorded, the stack always unwound before the pivot, never after,
whatever the running agent does; and the races of a cancel arriving in the same workflow task as
a step's or a compensation's completion, made deterministic by holding the workflow worker back
while both events are written to the history."""

import asyncio
from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.worker import Replayer, Worker

from coord.infra.payload_store import data_converter
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext
from coord.models.mesh.demo import FEATURE_DEPLOYMENT_AGENTS
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.starter import api
from coord.worker import WORKFLOWS, WorkerSet, build_worker
from coord.workflows.saga import Saga
from tests.agents import Execution, GatedAgents, RecordingAgents
from tests.conftest import feature_deployment
from tests.helpers import STEPS, wait_until

Order = Literal["cancel first", "completion first"]


@pytest.mark.parametrize("execution", ["local", "remote"])
async def test_cancel_unwinds_after_an_agent_that_ignores_it_and_the_record_outlives_the_worker(
    client: Client, task_queue: str, execution: Execution
) -> None:
    """DeployToProduction never heartbeats, so it never hears of the cancel and completes: the
    cancel is recorded at once, the deployment is kept, and RollbackProduction is told what it
    rolls back. The cancelled run's record is then read with no worker running, and its history
    replays.

    Run as a local activity, the agent is not even told: a local run is never cancelled. The
    workflow hears the cancel only when the worker ends the task the local run holds (after
    80% of the task's timeout, 8 s), and answers queries only then; its steps run ahead in one
    batch, so it records the cancel when the batch ends, as landing while its last step ran."""
    deploying, deployed = asyncio.Event(), asyncio.Event()
    agents = RecordingAgents()

    async def deploy(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        deploying.set()
        await deployed.wait()
        return {"version": "v42"}

    spec = feature_deployment()
    registry = agents.registry({"DeployToProduction": deploy}, execution)
    async with build_worker(client, task_queue, registry):
        handle = await api.start_saga(client, spec, queue=task_queue)
        await asyncio.wait_for(deploying.wait(), 30)
        await handle.cancel()

        async def cancel_recorded() -> bool:
            return (await handle.query(Saga.state)).cancel is not None

        if execution == "local":
            await wait_until(partial(cancel_heard, handle), timeout=60)
        else:
            await wait_until(cancel_recorded, timeout=60)
            pending = await handle.query(Saga.state)
            assert pending.status == SagaStatus.IN_PROGRESS and pending.current_step == 5
        deployed.set()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 30)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    state = await api.saga_state(client, spec.saga_id)
    assert state.status == SagaStatus.COMPENSATED
    assert state.cancel is not None and state.cancel.effect == "unwind"
    assert state.cancel.during_step == 5
    assert state.completed_steps[-1].event == "ProductionDeployed"
    assert [c.compensate for c in state.compensations] == [
        "RollbackProduction",
        "RemoveFromStaging",
    ]
    assert agents.last("RollbackProduction").context.inputs == {
        "undoes": {"step": "DeployToProduction", "result": {"version": "v42"}}
    }
    assert [e.event for e in state.events][-3:] == [
        "ProductionDeployed",
        "RollbackAll",
        "RemoveStaging",
    ]
    await Replayer(workflows=list(WORKFLOWS), data_converter=data_converter()).replay_workflow(
        await handle.fetch_history()
    )


async def cancel_heard(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether a workflow task began after the cancel request: the workflow heard it."""
    types = [event.event_type async for event in handle.fetch_history_events()]
    requested = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
    if requested not in types:
        return False
    return EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED in types[types.index(requested) :]


async def test_cancel_after_the_pivot_is_recorded_and_the_saga_goes_forward(
    client: Client, task_queue: str
) -> None:
    gates = GatedAgents()
    spec = feature_deployment()
    spec.steps[2].pivot = True
    for name in STEPS[:3]:
        gates.released[name].set()
    async with build_worker(client, task_queue, gates.registry()):
        handle = await api.start_saga(client, spec, queue=task_queue)
        await gates.wait_started("RunE2ETests")
        await handle.cancel()

        async def cancel_recorded() -> bool:
            return (await handle.query(Saga.state)).cancel is not None

        await wait_until(cancel_recorded)
        gates.released["RunE2ETests"].set()
        gates.released["DeployToProduction"].set()
        state = await asyncio.wait_for(handle.result(), 30)
    assert state.status == SagaStatus.COMPLETED and state.recovery == "forward"
    assert len(state.completed_steps) == 5 and state.compensations == []
    assert state.cancel is not None and state.cancel.effect == "forward"
    assert state.cancel.during_step == 4


def split_workers(client: Client, task_queue: str, gates: GatedAgents) -> tuple[WorkerSet, Worker]:
    """Agents on their workers, workflows on another (uncached, so nothing sticks to it), so a
    test can stop the workflow side while events pile up in the history."""
    agents = build_worker(client, task_queue, gates.registry(), workflows=False)
    return agents, workflow_worker(client, task_queue)


def workflow_worker(client: Client, task_queue: str, identity: str | None = None) -> Worker:
    """An uncached workflow worker; `identity` (the client's by default) is what the server
    records in the history of each workflow task it starts."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        max_cached_workflows=0,
        identity=identity,
    )


async def history_has(
    handle: WorkflowHandle[Any, Any], kind: EventType.ValueType, count: int
) -> bool:
    history = await handle.fetch_history()
    return sum(event.event_type == kind for event in history.events) >= count


async def cancel_with_completion_in_one_task(
    client: Client,
    task_queue: str,
    spec: SagaSpec,
    gates: GatedAgents,
    held: str,
    order: Order,
) -> tuple[WorkflowHandle[Any, SagaState], SagaState]:
    """Run the saga until agent `held` is running, stop the workflow worker, then write the
    cancel request and `held`'s completion into the history in the given order, so the next
    workflow task carries both; then let a new workflow worker finish the saga."""
    agents, first = split_workers(client, task_queue, gates)
    agents_running = asyncio.create_task(agents.run())
    first_running = asyncio.create_task(first.run())
    handle = await api.start_saga(client, spec, queue=task_queue)
    await gates.wait_started(held)
    await first.shutdown()
    await first_running
    completed = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    done_before = sum(e.event_type == completed for e in (await handle.fetch_history()).events)
    if order == "cancel first":
        await handle.cancel()
        await release(gates, held, handle, done_before + 1)
    else:
        await release(gates, held, handle, done_before + 1)
        await handle.cancel()
    async with workflow_worker(client, task_queue):
        for name in gates.released:
            if name != held:
                gates.released[name].set()
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    await agents.shutdown()
    await agents_running
    return handle, state


async def release(
    gates: GatedAgents, name: str, handle: WorkflowHandle[Any, Any], completions: int
) -> None:
    gates.released[name].set()
    await wait_until(
        lambda: history_has(handle, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, completions)
    )


async def assert_one_task_held_both(handle: WorkflowHandle[Any, Any]) -> None:
    """No workflow task started between the cancel request and the nearest completion."""
    kinds = [e.event_type for e in (await handle.fetch_history()).events]
    cancel = kinds.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
    completions = [
        i for i, kind in enumerate(kinds) if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ]
    nearest = min(completions, key=lambda i: abs(i - cancel))
    low, high = sorted((cancel, nearest))
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED not in kinds[low:high]


@pytest.mark.parametrize("order", ["cancel first", "completion first"])
async def test_pivot_completing_with_the_cancel_is_not_unwound(
    client: Client, task_queue: str, order: Order
) -> None:
    gates = GatedAgents()
    spec = feature_deployment()
    spec.steps[3].pivot = True
    for name in STEPS[:3]:
        gates.released[name].set()
    handle, state = await cancel_with_completion_in_one_task(
        client, task_queue, spec, gates, "RunE2ETests", order
    )
    await assert_one_task_held_both(handle)
    assert state.status == SagaStatus.COMPLETED and state.recovery == "forward"
    assert state.compensations == []
    assert [c.event for c in state.completed_steps][3:] == ["E2EPassed", "ProductionDeployed"]
    assert state.cancel is not None and state.cancel.effect == "forward"


@pytest.mark.parametrize("order", ["cancel first", "completion first"])
async def test_step_completing_with_the_cancel_keeps_its_result_and_is_undone(
    client: Client, task_queue: str, order: Order
) -> None:
    gates = GatedAgents()
    spec = feature_deployment()
    for name in STEPS[:2]:
        gates.released[name].set()
    gates.released["RemoveFromStaging"].set()
    handle, state = await cancel_with_completion_in_one_task(
        client, task_queue, spec, gates, "DeployToStaging", order
    )
    await assert_one_task_held_both(handle)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert state.status == SagaStatus.COMPENSATED
    assert state.cancel is not None and state.cancel.effect == "unwind"
    assert [c.event for c in state.completed_steps] == [
        "ArtifactBuilt",
        "TestsPassed",
        "StagingDeployed",
    ]
    assert [c.compensate for c in state.compensations] == ["RemoveFromStaging"]
    assert [e.event for e in state.events][-2:] == ["StagingDeployed", "RemoveStaging"]


@pytest.mark.parametrize("order", ["cancel first", "completion first"])
async def test_compensation_completing_with_the_cancel_ends_as_its_failure_says(
    client: Client, task_queue: str, order: Order
) -> None:
    gates = GatedAgents(names=[n for n in FEATURE_DEPLOYMENT_AGENTS if n != "RunE2ETests"])
    spec = feature_deployment(input={"inject": {"fail": ["RunE2ETests"]}})
    spec.steps[3].retry = spec.steps[3].retry.model_validate({"max_retries": 0})
    for name in STEPS[:3]:
        gates.released[name].set()
    handle, state = await cancel_with_completion_in_one_task(
        client, task_queue, spec, gates, "RemoveFromStaging", order
    )
    await assert_one_task_held_both(handle)
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    assert state.status == SagaStatus.COMPENSATED
    assert state.failure_reason is not None and "RunE2ETests" in state.failure_reason
    assert [c.compensate for c in state.compensations] == ["RemoveFromStaging"]
    assert state.cancel is not None and state.cancel.effect == "compensating"
