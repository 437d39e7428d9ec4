"""The Saga workflow on the real dev server: the compensation table and the saga options.
On the project's pytest plugin (coord/testing.py): its `coord` helpers and `coord_worker`."""

import asyncio
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from coord.models.saga.spec import SagaStatus
from coord.starter import api
from coord.testing import Coordination, assert_saga
from coord.workflows.saga import Saga
from tests.agents import GatedAgents
from tests.conftest import feature_deployment
from tests.helpers import (
    FAST_RETRY,
    STEPS,
    demo_agents_remote,
    failing_at,
    unserved_agents_found_at_once,
)

WITH_WORKER = pytest.mark.usefixtures("coord_worker")


@WITH_WORKER
async def test_success_completes_every_step_with_its_event(coord: Coordination) -> None:
    state = await coord.run_saga(feature_deployment())
    assert_saga(state, SagaStatus.COMPLETED, completed=STEPS)
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
@WITH_WORKER
async def test_failure_unwinds_the_seed_compensation_table(
    coord: Coordination, step: str, compensations: list[str], failure_event: str
) -> None:
    state = await coord.run_saga(failing_at(step))
    assert_saga(state, SagaStatus.COMPENSATED, compensated=compensations)
    assert all(c.status == "compensated" for c in state.compensations)
    assert state.compensation_stack == []
    assert state.current_step == STEPS.index(step) + 1
    assert state.failed_event == failure_event
    assert step in (state.failure_reason or "")


@WITH_WORKER
async def test_failed_saga_ends_as_a_typed_failure_carrying_its_record(
    coord: Coordination,
) -> None:
    spec = failing_at("DeployToProduction")
    handle = await coord.start_saga(spec)
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.type == "saga_compensated"
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.FAILED
    assert description.search_attributes["CoordStatus"] == ["compensated"]
    assert description.search_attributes["CoordPattern"] == ["saga"]
    assert description.search_attributes["CorrelationId"] == [spec.correlation_id]


@WITH_WORKER
@pytest.mark.parametrize("coord_agents", [demo_agents_remote()], ids=["activity-tasks"])
async def test_parallel_compensation_starts_every_compensation_at_once(
    coord: Coordination,
) -> None:
    spec = failing_at(
        "DeployToProduction", slow={"RollbackProduction": 0.3, "RemoveFromStaging": 0.3}
    )
    spec.parallel_compensation = True
    state = await coord.run_saga(spec)
    assert state.status == SagaStatus.COMPENSATED
    assert sorted(c.compensate for c in state.compensations) == [
        "RemoveFromStaging",
        "RollbackProduction",
    ]
    history = await coord.client.get_workflow_handle(spec.workflow_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    last_scheduled = max(
        i for i, k in enumerate(kinds) if k == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )
    first_compensation = last_scheduled - 1
    assert kinds[first_compensation] == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED


@WITH_WORKER
@pytest.mark.parametrize("continue_on_error", [False, True])
async def test_failing_compensation_leaves_a_visible_compensation_failed_state(
    coord: Coordination, continue_on_error: bool
) -> None:
    spec = failing_at("DeployToProduction")
    spec.input["inject"]["fail"].append("RollbackProduction")
    spec.continue_on_compensation_error = continue_on_error
    state = await coord.run_saga(spec)
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
    description = await coord.client.get_workflow_handle(spec.workflow_id).describe()
    assert description.search_attributes["CoordStatus"] == ["compensation_failed"]


async def test_state_query_at_each_stage_and_cancellation_unwinds_the_stack(
    coord: Coordination,
) -> None:
    gates = GatedAgents()
    spec = feature_deployment()
    for step in spec.steps:
        step.heartbeat_timeout = step.timeout.__class__(seconds=5)
    async with coord.worker(gates.registry()):
        handle = await coord.start_saga(spec)
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


@WITH_WORKER
async def test_pivot_turns_later_failures_into_forward_retries(coord: Coordination) -> None:
    spec = feature_deployment(input={"inject": {"flaky": {"DeployToProduction": 3}}})
    spec.steps[3].pivot = True
    spec.steps[4].retry = spec.steps[4].retry.model_validate({**FAST_RETRY, "max_retries": 0})
    state = await coord.run_saga(spec)
    assert state.status == SagaStatus.COMPLETED
    assert state.recovery == "forward"
    assert [c.event for c in state.completed_steps][-1] == "ProductionDeployed"


async def test_worker_stopped_mid_saga_is_finished_by_a_new_worker(coord: Coordination) -> None:
    gates = GatedAgents()
    spec = feature_deployment()
    spec.steps[2].heartbeat_timeout = spec.steps[2].timeout.__class__(seconds=2)
    spec.steps[2].retry = spec.steps[2].retry.model_validate(FAST_RETRY)
    first = coord.worker(gates.registry())
    for name in STEPS[:2]:
        gates.released[name].set()
    runner = asyncio.create_task(first.run())
    handle = await coord.start_saga(spec)
    await gates.wait_started("DeployToStaging")
    await first.shutdown()
    await runner
    async with coord.worker():
        state = await asyncio.wait_for(api.saga_outcome(handle), timeout=60)
    assert state.status == SagaStatus.COMPLETED
    assert len(state.completed_steps) == 5


@WITH_WORKER
async def test_invalid_spec_sent_as_raw_json_fails_the_saga_naming_the_field(
    coord: Coordination,
) -> None:
    raw = {"saga_id": "broken", "steps": [{"name": "BuildArtifact", "timeout": "soon"}]}
    handle = await coord.client.start_workflow(
        "Saga", raw, id=f"saga-broken-{coord.task_queue}", task_queue=coord.task_queue
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), timeout=30)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "invalid_spec"
    assert "steps[0].timeout" in cause.message


@WITH_WORKER
async def test_an_agent_no_worker_serves_fails_the_step_without_retrying(
    coord: Coordination, monkeypatch: pytest.MonkeyPatch
) -> None:
    unserved_agents_found_at_once(monkeypatch)
    spec = feature_deployment()
    spec.steps[3].agent = "NoSuchAgent"
    spec.steps[3].schedule_to_start_timeout = timedelta(seconds=2)
    # Started past the helpers' agent check, which would refuse the spec at once.
    handle = await api.start_saga(coord.client, spec, queue=coord.task_queue)
    state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPENSATED
    assert "agent unavailable: no worker took agent 'NoSuchAgent' on its queue " in (
        state.failure_reason or ""
    )
