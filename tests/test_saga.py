"""The Saga workflow on the real dev server: the compensation table and the saga options."""

import asyncio
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.starter import api
from coord.worker import build_worker
from coord.workflows.saga import Saga
from tests.agents import GatedAgents
from tests.conftest import feature_deployment
from tests.helpers import FAST_RETRY, STEPS, failing_at


async def run_saga(client: Client, task_queue: str, spec: SagaSpec) -> SagaState:
    async with build_worker(client, task_queue):
        handle = await api.start_saga(client, spec, queue=task_queue)
        return await asyncio.wait_for(api.saga_outcome(handle), timeout=60)


async def test_success_completes_every_step_with_its_event(client: Client, task_queue: str) -> None:
    state = await run_saga(client, task_queue, feature_deployment())
    assert state.status == SagaStatus.COMPLETED
    assert [(c.step, c.event) for c in state.completed_steps] == [
        (1, "ArtifactBuilt"),
        (2, "TestsPassed"),
        (3, "StagingDeployed"),
        (4, "E2EPassed"),
        (5, "ProductionDeployed"),
    ]
    assert state.compensations == [] and state.compensation_stack == []


@pytest.mark.parametrize(
    ("step", "compensations", "failure_event"),
    [
        ("BuildArtifact", [], "BuildFailed"),
        ("RunTests", [], "TestsFailed"),
        ("DeployToStaging", ["RemoveFromStaging"], "StagingFailed"),
        ("RunE2ETests", ["RemoveFromStaging"], "E2EFailed"),
        ("DeployToProduction", ["RollbackProduction", "RemoveFromStaging"], "ProductionFailed"),
    ],
)
async def test_failure_unwinds_the_seed_compensation_table(
    client: Client, task_queue: str, step: str, compensations: list[str], failure_event: str
) -> None:
    state = await run_saga(client, task_queue, failing_at(step))
    assert state.status == SagaStatus.COMPENSATED
    assert [c.compensate for c in state.compensations] == compensations
    assert all(c.status == "compensated" for c in state.compensations)
    assert state.compensation_stack == []
    assert state.current_step == STEPS.index(step) + 1
    assert state.failed_event == failure_event
    assert step in (state.failure_reason or "")


async def test_failed_saga_ends_as_a_typed_failure_carrying_its_record(
    client: Client, task_queue: str
) -> None:
    spec = failing_at("DeployToProduction")
    async with build_worker(client, task_queue):
        handle = await api.start_saga(client, spec, queue=task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.type == "saga_compensated"
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.FAILED
    assert description.search_attributes["CoordStatus"] == ["compensated"]
    assert description.search_attributes["CoordPattern"] == ["saga"]
    assert description.search_attributes["CorrelationId"] == [spec.correlation_id]


async def test_parallel_compensation_starts_every_compensation_at_once(
    client: Client, task_queue: str
) -> None:
    spec = failing_at(
        "DeployToProduction", slow={"RollbackProduction": 0.3, "RemoveFromStaging": 0.3}
    )
    spec.parallel_compensation = True
    state = await run_saga(client, task_queue, spec)
    assert state.status == SagaStatus.COMPENSATED
    assert sorted(c.compensate for c in state.compensations) == [
        "RemoveFromStaging",
        "RollbackProduction",
    ]
    history = await client.get_workflow_handle(spec.workflow_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    last_scheduled = max(
        i for i, k in enumerate(kinds) if k == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )
    first_compensation = last_scheduled - 1
    assert kinds[first_compensation] == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED


@pytest.mark.parametrize("continue_on_error", [False, True])
async def test_failing_compensation_leaves_a_visible_compensation_failed_state(
    client: Client, task_queue: str, continue_on_error: bool
) -> None:
    spec = failing_at("DeployToProduction")
    spec.input["inject"]["fail"].append("RollbackProduction")
    spec.continue_on_compensation_error = continue_on_error
    state = await run_saga(client, task_queue, spec)
    assert state.status == SagaStatus.COMPENSATION_FAILED
    outcomes = [(c.compensate, c.status) for c in state.compensations]
    if continue_on_error:
        assert outcomes == [("RollbackProduction", "failed"), ("RemoveFromStaging", "compensated")]
        assert [e.compensate for e in state.compensation_stack] == ["RollbackProduction"]
    else:
        assert outcomes == [("RollbackProduction", "failed")]
        assert [e.compensate for e in state.compensation_stack] == [
            "RemoveFromStaging",
            "RollbackProduction",
        ]
    assert "RollbackProduction" in (state.failure_reason or "")
    description = await client.get_workflow_handle(spec.workflow_id).describe()
    assert description.search_attributes["CoordStatus"] == ["compensation_failed"]


async def test_state_query_at_each_stage_and_cancellation_unwinds_the_stack(
    client: Client, task_queue: str
) -> None:
    gates = GatedAgents()
    spec = feature_deployment()
    for step in spec.steps:
        step.heartbeat_timeout = step.timeout.__class__(seconds=5)
    async with build_worker(client, task_queue, gates.registry()):
        handle = await api.start_saga(client, spec, queue=task_queue)
        for index, name in enumerate(STEPS[:4], start=1):
            await gates.wait_started(name)
            state = await handle.query(Saga.state)
            assert state.status == SagaStatus.IN_PROGRESS
            assert state.current_step == index
            assert [c.step for c in state.completed_steps] == list(range(1, index))
            expected_stack = [3] if index >= 3 else []
            assert [e.step for e in state.compensation_stack] == expected_stack
            if name != "RunE2ETests":
                gates.released[name].set()
        gates.released["RemoveFromStaging"].set()
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=30)
        state = await handle.query(Saga.state)
    assert state.status == SagaStatus.COMPENSATED
    assert state.failure_reason == "saga cancelled"
    assert [c.compensate for c in state.compensations] == ["RemoveFromStaging"]
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


async def test_pivot_turns_later_failures_into_forward_retries(
    client: Client, task_queue: str
) -> None:
    spec = feature_deployment(input={"inject": {"flaky": {"DeployToProduction": 3}}})
    spec.steps[3].pivot = True
    spec.steps[4].retry = spec.steps[4].retry.model_validate({**FAST_RETRY, "max_retries": 0})
    state = await run_saga(client, task_queue, spec)
    assert state.status == SagaStatus.COMPLETED
    assert state.recovery == "forward"
    assert [c.event for c in state.completed_steps][-1] == "ProductionDeployed"


async def test_worker_stopped_mid_saga_is_finished_by_a_new_worker(
    client: Client, task_queue: str
) -> None:
    gates = GatedAgents()
    spec = feature_deployment()
    spec.steps[2].heartbeat_timeout = spec.steps[2].timeout.__class__(seconds=2)
    spec.steps[2].retry = spec.steps[2].retry.model_validate(FAST_RETRY)
    first = build_worker(client, task_queue, gates.registry())
    for name in STEPS[:2]:
        gates.released[name].set()
    runner = asyncio.create_task(first.run())
    handle = await api.start_saga(client, spec, queue=task_queue)
    await gates.wait_started("DeployToStaging")
    await first.shutdown()
    await runner
    async with build_worker(client, task_queue):
        state = await asyncio.wait_for(api.saga_outcome(handle), timeout=60)
    assert state.status == SagaStatus.COMPLETED
    assert len(state.completed_steps) == 5


async def test_invalid_spec_sent_as_raw_json_fails_the_saga_naming_the_field(
    client: Client, task_queue: str
) -> None:
    raw = {"saga_id": "broken", "steps": [{"name": "BuildArtifact", "timeout": "soon"}]}
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            "Saga", raw, id=f"saga-broken-{task_queue}", task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), timeout=30)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "invalid_spec"
    assert "steps[0].timeout" in cause.message


async def test_an_agent_no_worker_serves_fails_the_step_without_retrying(
    client: Client, task_queue: str
) -> None:
    spec = feature_deployment()
    spec.steps[3].agent = "NoSuchAgent"
    spec.steps[3].schedule_to_start_timeout = timedelta(seconds=2)
    state = await run_saga(client, task_queue, spec)
    assert state.status == SagaStatus.COMPENSATED
    assert "agent unavailable: no worker took the run" in (state.failure_reason or "")
