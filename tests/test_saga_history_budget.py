"""A saga's history budget: a spec whose runs would carry more than a saga's history may take is
refused at the edge, naming the field; a run whose history has passed its budget runs no further
step, fails the next `history_budget` unrun and compensates the steps before it, where the
server would have terminated it past its limit with nothing compensated; and a run terminated
all the same (by an operator) reads as terminated, not as the status it was left in."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from coord.models.saga.budget import (
    FORWARD_BYTES,
    FORWARD_EVENTS,
    HISTORY_LIMIT_BYTES,
    SPEC_CARRIED_BUDGET,
    TAKEN_BEFORE,
    HistoryBudget,
)
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire import contract
from coord.models.wire.specs import SpecError, parse_model
from coord.models.wire.versions import SAGA_VERSION
from coord.starter import api
from coord.starter.exits import ExitCode
from coord.testing import Coordination, unique
from coord.workflows.saga import Saga
from tests.helpers import demo_agents_remote, wait_until
from tests.workers import COORD, run


def many(steps: int, blob: int = 0, **overrides: Any) -> dict[str, Any]:
    """The outside user's saga: `steps` builds, each undone by removing it from staging."""
    return {
        "saga_id": unique("many"),
        "input": {"blob": "z" * blob} if blob else {},
        "steps": [
            {"name": f"Build{n}", "agent": "BuildArtifact", "compensation": "RemoveFromStaging"}
            for n in range(1, steps + 1)
        ],
        **overrides,
    }


def test_the_budget_keeps_a_fifth_of_each_server_limit_for_compensating() -> None:
    budget = HistoryBudget()
    assert (budget.size, budget.length) == (FORWARD_BYTES, FORWARD_EVENTS)
    assert HISTORY_LIMIT_BYTES - FORWARD_BYTES == HISTORY_LIMIT_BYTES // 5
    assert not budget.passed(FORWARD_BYTES - 1, FORWARD_EVENTS - 1)
    assert budget.passed(FORWARD_BYTES, 10)
    assert budget.passed(1_000, FORWARD_EVENTS)
    assert "passed its budget" in budget.reason(FORWARD_BYTES, 12)


def test_a_start_may_lower_the_budget_never_raise_it() -> None:
    assert HistoryBudget.lowered(5_000).size == 5_000
    for ignored in (None, 0, -1, FORWARD_BYTES, 10 * FORWARD_BYTES, "5000", 5_000.0, True):
        assert HistoryBudget.lowered(ignored) == HistoryBudget()


def test_a_spec_whose_runs_would_carry_too_much_is_refused_naming_the_input() -> None:
    with pytest.raises(SpecError) as refused:
        parse_model(SagaSpec, many(1000, blob=60_000), "many.yaml")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("many.yaml: input: carried by each of the saga's 2,000 runs")
    assert f"more than the {SPEC_CARRIED_BUDGET:,} it may take" in message


def test_an_inline_agent_carried_by_every_run_is_named_when_it_carries_most() -> None:
    system = "p" * 20_000
    declared = {"base_url": "http://llm", "model": "m", "api_key_env": "KEY", "system": system}
    agents = {"BuildArtifact": {"kind": "llm", **declared}}
    with pytest.raises(SpecError, match=r"^s: agents\.BuildArtifact: carried by each"):
        parse_model(SagaSpec, many(1000, agents=agents), "s")


def test_a_spec_a_run_took_before_the_check_is_still_taken_for_that_run() -> None:
    """Its replay (a run recorded before SAGA_HISTORY_BUDGET_PATCH) and a dead letter of its
    compensation read the spec it ran with."""
    SagaSpec.model_validate(many(1000, blob=60_000), context=TAKEN_BEFORE)


def test_the_largest_valid_sagas_pass() -> None:
    SagaSpec.model_validate(many(1000))
    SagaSpec.model_validate(many(1000, blob=4_000))
    SagaSpec.model_validate(many(10, blob=400_000))


async def test_coord_validate_and_saga_start_refuse_it_in_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "many.yaml"
    spec.write_text(yaml.safe_dump(many(1000, blob=60_000)))
    refused = f"{spec}: input: carried by each of the saga's 2,000 runs"
    code, out, err = await run(COORD, "validate", str(spec))
    assert (code, err) == (ExitCode.REFUSED, "0 of 1 files valid\n")
    assert out.startswith(refused) and out.count("\n") == 1
    code, _, err = await run(COORD, "saga", "start", str(spec))
    assert code == ExitCode.REFUSED
    assert err.startswith(f"error: {refused}") and err.count("\n") == 1


@pytest.mark.parametrize("coord_agents", [demo_agents_remote()], ids=["activity-tasks"])
@pytest.mark.parametrize("versioned", [True, False], ids=["by-its-version", "by-its-bundle"])
@pytest.mark.usefixtures("coord_worker")
async def test_a_saga_past_its_history_budget_stops_and_compensates_every_step_done(
    coord: Coordination, versioned: bool
) -> None:
    """Served agents (a workflow task per step, so the history grows between steps); a budget
    lowered by the start (a test's, SAGA_HISTORY_BUDGET_MEMO) that a few steps pass. The run
    takes the patch by the version its start carries, or, started without one (Temporal CLI,
    UI), by its bundle."""
    spec = SagaSpec.model_validate(many(12, blob=1_000))
    memo: dict[str, Any] = {contract.SAGA_HISTORY_BUDGET_MEMO: 20_000}
    if versioned:
        memo[contract.SAGA_VERSION_MEMO] = SAGA_VERSION
    handle = await coord.client.start_workflow(
        Saga.run, spec, id=spec.workflow_id, task_queue=coord.task_queue, memo=memo
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.type == contract.FailureType.SAGA_COMPENSATED
    state = await api.saga_outcome(handle)
    assert state.status == SagaStatus.COMPENSATED
    done = len(state.completed_steps)
    assert 1 < done < 12
    stopped = done + 1
    assert state.current_step == stopped
    assert [c.step for c in state.compensations] == list(range(done, 0, -1))
    assert all(c.status == "compensated" for c in state.compensations)
    assert state.compensation_stack == []
    assert state.failed_event == f"Build{stopped}Failed"
    reason = state.failure_reason or ""
    assert reason.startswith(f"step {stopped} Build{stopped} failed: not run: the saga's history")
    assert "passed its budget (20,000 bytes" in reason
    failed_row = next(e for e in state.events if e.event == f"Build{stopped}Failed")
    assert failed_row.payload["error"]["type"] == contract.FailureType.HISTORY_BUDGET


@pytest.mark.parametrize("coord_agents", [demo_agents_remote()], ids=["activity-tasks"])
@pytest.mark.usefixtures("coord_worker")
async def test_a_terminated_saga_reads_as_terminated_not_in_progress(coord: Coordination) -> None:
    """Terminated by an operator (or by the server, past a limit), a run keeps no record of its
    own: the one its `state` query replays says it was terminated and compensated nothing."""
    spec = SagaSpec.model_validate(many(3, input={"inject": {"slow": {"BuildArtifact": 30}}}))
    handle = await coord.start_saga(spec)
    await wait_until(lambda: current_step(handle))
    await handle.terminate(reason="history size exceeds limit")
    state = await api.saga_outcome(handle)
    assert state.status == SagaStatus.FAILED
    assert state.failure_reason == (
        "terminated: history size exceeds limit; nothing was compensated"
    )
    assert state.compensation_stack and state.compensations == []
    read = await api.saga_state(coord.client, spec.saga_id)
    assert read.failure_reason == state.failure_reason, "`coord saga state` reads it so too"


async def current_step(handle: WorkflowHandle[Any, SagaState]) -> bool:
    return (await handle.query(Saga.state)).current_step == 1
