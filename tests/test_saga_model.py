"""The saga's state and rules on their own (no server): the Feature Deployment table end to
end, the compensation order for a failure at each step, the pivot, a cancel mid-run, failed
compensations, and the record and timeline they leave."""

from datetime import UTC, datetime

import pytest

from coord.models.mesh.runs import RunDetour
from coord.models.saga.model import CANCELLED_STEP, SagaEnd, SagaModel, render_details
from coord.models.saga.spec import SagaSpec, SagaStatus, StackEntry
from coord.models.wire.contract import FailureType
from tests.conftest import feature_deployment

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SEED_EVENTS = ["ArtifactBuilt", "TestsPassed", "StagingDeployed", "E2EPassed", "ProductionDeployed"]
UNDONE_AT = {
    1: [],
    2: [],
    3: ["RemoveFromStaging"],
    4: ["RemoveFromStaging"],
    5: ["RollbackProduction", "RemoveFromStaging"],
}
"""The compensation table: a failure at each step, and what is undone, in order."""


def begun(spec: SagaSpec | None = None) -> SagaModel:
    spec = spec or feature_deployment()
    model = SagaModel(spec.saga_id)
    model.begin(spec, workflow_id=spec.workflow_id, first_run_id="run-1")
    return model


def run_until(model: SagaModel, fail_at: int | None = None) -> list[str]:
    """Runs the steps as the workflow does (every agent answers at once), failing the step
    numbered `fail_at`; returns the event types the saga announced."""
    announced = []
    for index, step in model.steps():
        retry = model.step_started(index, step)
        model.step_request(step, model.step_agent(step, None), retry)
        if index == fail_at:
            announced.append(model.step_failed(index, step, "agent_error", "boom", None).event.type)
            return announced
        announced.append(model.step_succeeded(index, step, {"done": step.name}, None).event.type)
    model.completed()
    return announced


def unwind(
    model: SagaModel, *, cancelled: bool = False, failing: frozenset[str] = frozenset()
) -> tuple[list[tuple[str, str]], SagaEnd | None]:
    """Unwinds the stack in order as the workflow does; the compensations in `failing` fail.
    Returns what ran (with the events announced) and the end."""
    ran: list[tuple[str, str]] = []
    for entry in model.compensating(cancelled=cancelled):
        if entry.compensate in failing:
            model.undo_failed(entry, f"{entry.compensate} is down")
            ran.append((entry.compensate, "failed"))
            if not model.goes_on(False):
                break
            continue
        ran.append((entry.compensate, model.undone(entry, {"undone": True}, None).event.type))
    return ran, model.compensation_ended()


def test_the_seed_saga_completes_with_its_events_in_order() -> None:
    model = begun()
    assert model.state.status == SagaStatus.IN_PROGRESS
    assert run_until(model) == SEED_EVENTS
    state = model.state
    assert state.status == SagaStatus.COMPLETED
    assert [(c.step, c.event) for c in state.completed_steps] == list(
        enumerate(SEED_EVENTS, start=1)
    )
    assert state.compensation_stack == []
    assert [row.event for row in state.events] == SEED_EVENTS
    assert [row.seq for row in state.events] == [1, 2, 3, 4, 5]
    causes = [row.causation_id for row in state.events]
    assert causes == [None, *[row.event_id for row in state.events[:-1]]]
    assert {row.correlation_id for row in state.events} == {state.correlation_id}
    assert state.events[0].agent == "/BuildArtifact"


def test_the_stack_holds_each_step_compensation_before_the_step_runs() -> None:
    """The coordinator record at step 3: RemoveFromStaging is on the stack while it runs."""
    model = begun()
    steps = list(model.steps())
    for index, step in steps[:2]:
        model.step_started(index, step)
        model.step_succeeded(index, step, {}, None)
    model.step_started(*steps[2])
    assert model.state.current_step == 3
    assert model.state.compensation_stack == [StackEntry(step=3, compensate="RemoveFromStaging")]
    assert [c.event for c in model.state.completed_steps] == ["ArtifactBuilt", "TestsPassed"]


@pytest.mark.parametrize("fail_at", sorted(UNDONE_AT))
def test_a_failure_at_each_step_undoes_the_seed_table_in_reverse(fail_at: int) -> None:
    model = begun()
    step_events = run_until(model, fail_at)
    assert step_events[-1] == model.spec.steps[fail_at - 1].on_failure
    assert model.after_failure() is None  # before any pivot: unwind
    ran, end = unwind(model)
    assert [name for name, _ in ran] == UNDONE_AT[fail_at]
    compensated = {"RemoveFromStaging": "RemoveStaging", "RollbackProduction": "RollbackAll"}
    assert [event for _, event in ran] == [compensated[name] for name in UNDONE_AT[fail_at]]
    assert end is None
    state = model.state
    assert state.status == SagaStatus.COMPENSATED
    assert state.compensation_stack == []
    assert state.failed_event == step_events[-1]
    step = model.spec.steps[fail_at - 1]
    assert state.failure_reason == f"step {fail_at} {step.name} failed: boom"
    undone = ", ".join(UNDONE_AT[fail_at]) or "nothing to undo"
    assert model.compensated_end() == SagaEnd(
        FailureType.SAGA_COMPENSATED,
        f"step {fail_at} {step.name} failed: boom; compensated: {undone}",
    )


def test_runs_are_handed_earlier_results_and_compensations_what_they_undo() -> None:
    model = begun()
    run_until(model, fail_at=5)
    _, step = list(model.steps())[3]
    request = model.step_request(step, step.agent, step.retry)
    assert request.inputs == {
        "steps": {name: {"done": name} for name in [s.name for s in model.spec.steps[:4]]}
    }
    assert request.idempotency_key == f"{model.spec.workflow_id}/run-1/RunE2ETests"
    assert request.event.event.type == "RunE2ETestsCommand"
    assert request.event.payload == {"feature": "xyz"}
    failed, staging = model.compensating(cancelled=False)
    production_step, rollback = model.undo_request(failed)
    assert production_step.name == "DeployToProduction"
    assert rollback.agent == "RollbackProduction"
    assert rollback.inputs == {
        "undoes": {
            "step": "DeployToProduction",
            "failure": {"type": "agent_error", "message": "boom"},
        }
    }
    assert rollback.idempotency_key == f"{model.spec.workflow_id}/run-1/DeployToProduction/undo"
    assert rollback.retry_on == production_step.compensation_retry.retry_on
    _, remove = model.undo_request(staging)
    assert remove.inputs["undoes"] == {
        "step": "DeployToStaging",
        "result": {"done": "DeployToStaging"},
    }


def test_retries_are_the_steps_own_until_the_pivot_then_until_success() -> None:
    spec = feature_deployment()
    spec.steps[2].pivot = True
    model = begun(spec)
    retries = []
    for index, step in model.steps():
        retries.append(model.step_started(index, step))
        model.step_succeeded(index, step, {}, None)
    assert retries[4] == spec.steps[4].retry.until_success()
    assert retries[4].max_retries is None
    assert retries[:3] == [s.retry for s in spec.steps[:3]]


def test_after_the_pivot_a_failure_compensates_nothing() -> None:
    spec = feature_deployment()
    spec.steps[2].pivot = True  # DeployToStaging
    model = begun(spec)
    run_until(model, fail_at=5)
    assert model.forward
    # DeployToProduction ran after the pivot: its compensation never went on the stack
    assert model.state.compensation_stack == [StackEntry(step=3, compensate="RemoveFromStaging")]
    end = model.after_failure()
    assert end == SagaEnd(
        FailureType.SAGA_FAILED,
        "step 5 DeployToProduction failed: boom; after the pivot, so nothing is compensated",
    )
    assert model.state.status == SagaStatus.FAILED
    assert model.state.compensations == []


def test_a_cancel_mid_run_lets_the_step_finish_then_unwinds() -> None:
    model = begun()
    steps = list(model.steps())
    for index, step in steps[:2]:
        model.step_started(index, step)
        model.step_succeeded(index, step, {}, None)
    model.step_started(*steps[2])  # DeployToStaging is running
    assert model.cancel_effect() == "unwind"
    assert model.cancel_requested("unwind", NOW)
    assert not model.cancel_requested("ended", NOW)  # only the first is recorded
    model.step_succeeded(*steps[2], {"url": "staging"}, None)  # its result is kept
    assert model.unwinding
    ran, end = unwind(model, cancelled=True)
    assert (ran, end) == ([("RemoveFromStaging", "RemoveStaging")], None)
    state = model.state
    assert state.cancel is not None
    assert (state.cancel.during_step, state.cancel.effect) == (3, "unwind")
    assert (state.status, state.failure_reason) == (SagaStatus.COMPENSATED, "saga cancelled")


def test_a_step_cancelled_before_it_ended_is_undone_as_unknown() -> None:
    model = begun()
    steps = list(model.steps())
    model.step_started(*steps[0])
    model.step_succeeded(*steps[0], {}, None)
    model.step_started(*steps[1])
    model.step_succeeded(*steps[1], {}, None)
    model.step_started(*steps[2])
    model.cancel_requested(model.cancel_effect(), NOW)
    model.step_cancelled(steps[2][1])
    [entry] = model.compensating(cancelled=True)
    _, request = model.undo_request(entry)
    assert request.inputs == {"undoes": {"step": "DeployToStaging", **CANCELLED_STEP}}


def test_a_cancel_during_the_pivot_step_lets_the_saga_run_forward() -> None:
    spec = feature_deployment()
    spec.steps[2].pivot = True
    model = begun(spec)
    steps = list(model.steps())
    for index, step in steps[:2]:
        model.step_started(index, step)
        model.step_succeeded(index, step, {}, None)
    model.step_started(*steps[2])
    model.cancel_requested(model.cancel_effect(), NOW)
    model.step_succeeded(*steps[2], {}, None)
    assert not model.unwinding
    assert model.state.cancel is not None and model.state.cancel.effect == "forward"
    assert model.cancel_effect() == "forward"  # a later cancel would not unwind either


def test_a_failed_compensation_stops_the_unwinding_and_stays_on_the_stack() -> None:
    model = begun()
    run_until(model, fail_at=5)
    ran, end = unwind(model, failing=frozenset({"RollbackProduction"}))
    assert ran == [("RollbackProduction", "failed")]
    assert end == SagaEnd(
        FailureType.COMPENSATION_FAILED,
        "step 5 DeployToProduction failed: boom; compensation failed: "
        "RollbackProduction: RollbackProduction is down",
    )
    state = model.state
    assert state.status == SagaStatus.COMPENSATION_FAILED
    assert [e.compensate for e in state.compensation_stack] == [
        "RemoveFromStaging",
        "RollbackProduction",
    ]
    assert [(c.compensate, c.status) for c in state.compensations] == [
        ("RollbackProduction", "failed")
    ]


def test_continue_on_compensation_error_runs_the_rest() -> None:
    model = begun(feature_deployment(continue_on_compensation_error=True))
    run_until(model, fail_at=5)
    ran, end = unwind(model, failing=frozenset({"RollbackProduction"}))
    assert ran == [("RollbackProduction", "failed"), ("RemoveFromStaging", "RemoveStaging")]
    assert end is not None and end.failure_type == FailureType.COMPENSATION_FAILED
    assert [e.compensate for e in model.state.compensation_stack] == ["RollbackProduction"]


def test_a_failed_compensation_is_dead_lettered_and_announced() -> None:
    model = begun()
    run_until(model, fail_at=3)
    [entry] = model.compensating(cancelled=False)
    message = model.undo_failed(entry, "timeout")
    assert message == "compensation RemoveFromStaging of step 3 failed: timeout"
    rows = len(model.state.events)
    notice = model.undo_failed_notice(entry, message, recorded=True)
    assert (notice.event.type, notice.event.source) == (
        "CompensationFailed",
        f"/saga/{model.state.saga_id}",
    )
    assert notice.payload == {"step": 3, "error": message}
    assert notice.event.causation_id == model.state.events[rows - 1].event_id
    assert len(model.state.events) == rows + 1
    model.undo_failed_notice(entry, message, recorded=False)
    assert len(model.state.events) == rows + 1


def test_an_invalid_spec_fails_the_saga_at_once() -> None:
    model = SagaModel("broken")
    end = model.refuse("saga spec: steps: field required")
    assert end == SagaEnd(FailureType.INVALID_SPEC, "saga spec: steps: field required")
    assert (model.state.status, model.state.saga_id) == (SagaStatus.FAILED, "broken")
    assert "saga spec: steps" in model.details()


def test_a_run_that_fell_back_is_announced_by_the_agent_that_ran_it() -> None:
    model = begun()
    index, step = next(model.steps())
    model.step_started(index, step)
    detour = RunDetour(
        at=NOW, agent=step.agent, reason="circuit_open", action="fell_back", to_agent="builder-2"
    )
    model.detoured(step.name, detour, None)
    event = model.step_succeeded(index, step, {}, None)
    assert event.event.source == "/builder-2"
    assert [d.run for d in model.state.detours] == ["BuildArtifact"]


def test_the_details_show_the_stack_top_first() -> None:
    model = begun()
    run_until(model, fail_at=5)
    model.compensating(cancelled=False)
    details = render_details(model.state, model.spec)
    assert "**Step 5/5:** DeployToProduction" in details
    assert "**Compensation stack (top first):** RollbackProduction, RemoveFromStaging" in details
    assert "**Status:** compensating" in details


def rewound_copy(original: SagaModel, steps: int) -> SagaModel:
    """A copy of `original` that reuses its first `steps` steps, as `coord saga rewind` asks."""
    recorded = [
        {
            "name": done.name,
            "result": {"done": done.name},
            "event": next(e for e in original.state.events if e.event_id == done.event_id),
        }
        for done in original.state.completed_steps[:steps]
    ]
    rewind = {"of": {"original": original.spec.saga_id, "at": "step 4"}, "steps": recorded}
    return begun(feature_deployment(rewind=rewind))


def test_a_rewound_copy_reuses_its_first_steps_and_runs_the_rest() -> None:
    original = begun()
    run_until(original, fail_at=5)
    copy = rewound_copy(original, 3)
    assert [index for index, _ in copy.steps()] == [4, 5], "steps 1-3 are not run again"
    assert [e.step for e in copy.state.compensation_stack] == [3], "the stack as it stood"
    reused = [done.event_id for done in copy.state.completed_steps]
    assert reused == [done.event_id for done in original.state.completed_steps[:3]]
    step = copy.spec.steps[3]
    request = copy.step_request(step, step.agent, step.retry)
    first_three = [s.name for s in copy.spec.steps[:3]]
    assert request.inputs == {"steps": {name: {"done": name} for name in first_three}}
    assert run_until(copy, fail_at=5) == ["E2EPassed", "ProductionFailed"]
    undone, _ = unwind(copy)
    assert [name for name, _ in undone] == ["RollbackProduction", "RemoveFromStaging"]


def test_a_copy_must_reuse_the_first_steps_in_order_and_leave_one_to_run() -> None:
    original = begun()
    run_until(original)
    with pytest.raises(ValueError, match=r"rewind.steps\[0\].name: 'RunTests' is not step 1"):
        rewound = rewound_copy(original, 2).spec.model_dump()
        rewound["rewind"]["steps"].pop(0)
        SagaSpec.model_validate(rewound)
    with pytest.raises(ValueError, match="must leave at least one step to run"):
        rewound_copy(original, 5)
