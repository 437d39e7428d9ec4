"""The chain's pacing on its own (no server): when a run continues as new, holds new events back
for the next run, counts as held up by a slow agent and hands its runs over; and that it asks
for the flood patch only where a decision depends on it (where its marker was recorded)."""

from datetime import timedelta

from coord.models.chain.intake import TaskShare
from coord.models.chain.model import ChainModel
from coord.models.chain.pacing import HELD_UP_AFTER, HOLDING_BUDGETS, MIN_WAKE, RUN_HISTORY_BUDGET
from coord.models.chain.spec import ChainInput
from coord.models.wire.versions import CHAIN_RECORDS_RUNS_BY_ITS_TIMER_PATCH, FLOOD_PATCH
from tests.chain_models import NOW, WORKFLOW_ID, FixedRun, event, spec, take


def paced(run: FixedRun, signals_per_run: int = 10_000) -> ChainModel:
    chain_input = ChainInput(
        spec=spec(max_concurrency=10), correlation_id="c1", signals_per_run=signals_per_run
    )
    model = ChainModel(chain_input, WORKFLOW_ID, run)
    model.pacing.hands_over = True
    return model


def test_a_run_continues_as_new_at_its_history_budget_or_when_the_server_suggests() -> None:
    run = FixedRun(length=RUN_HISTORY_BUDGET - 1)
    model = paced(run)
    assert not model.pacing.continue_as_new_due()
    assert FLOOD_PATCH not in run.asked, "asked only where the answer matters"
    run.length = RUN_HISTORY_BUDGET
    assert model.pacing.continue_as_new_due() and run.asked == [FLOOD_PATCH]
    small = FixedRun(length=250)
    assert paced(small, signals_per_run=1000).pacing.continue_as_new_due(), "a quarter of it"
    suggested = FixedRun(suggested=True)
    assert paced(suggested).pacing.continue_as_new_due() and suggested.asked == []
    assert not paced(FixedRun(length=10_000, before={FLOOD_PATCH})).pacing.continue_as_new_due()


def test_it_continues_as_new_once_no_run_it_holds_and_no_send_is_under_way() -> None:
    model = paced(FixedRun(length=RUN_HISTORY_BUDGET))
    take(model, event("Approved"))
    seq, _ = model.runs.start_next()
    assert not model.pacing.continue_as_new_now(outbound=0), "a run held here"
    model.runs.finish(seq)
    assert not model.pacing.continue_as_new_now(outbound=1), "a parking under way"
    assert model.pacing.continue_as_new_now(outbound=0)
    assert model.has_work(outbound=0)


def test_past_twice_its_budget_a_run_holds_new_events_for_the_next() -> None:
    run = FixedRun(length=2 * RUN_HISTORY_BUDGET)
    model = paced(run)
    model.intake.receive(event("Approved"))
    assert model.pacing.holding_events()
    assert not model.take_next(TaskShare())
    assert model.record.inbox, "the event waits, carried to the next run"
    assert model.pacing.continue_as_new_now(outbound=0)
    run.length -= 1
    assert not model.pacing.holding_events()


def test_a_run_held_up_by_a_slow_agent_hands_its_runs_over_and_takes_events_on() -> None:
    run = FixedRun()
    model = paced(run)
    for _ in range(2):
        take(model, event("Approved"))
    model.runs.start_next()
    run.length = 2 * RUN_HISTORY_BUDGET
    model.pacing.note_time()
    subscription = model.spec.subscriptions[0]
    assert not model.pacing.held_up() and not model.pacing.hands_over_run(subscription)
    assert model.pacing.wake_in() == HELD_UP_AFTER, "look again when it would be held up"
    run.at = NOW + HELD_UP_AFTER
    assert model.pacing.held_up() and model.pacing.hands_over_run(subscription)
    assert model.pacing.wake_in() == MIN_WAKE
    assert not model.pacing.holding_events(), f"takes events on up to {HOLDING_BUDGETS} budgets"
    assert model.pacing.dispatchable(), "its queued run starts, handed over"
    run.length = HOLDING_BUDGETS * RUN_HISTORY_BUDGET
    assert model.pacing.holding_events() and not model.pacing.dispatchable()


def test_a_run_due_to_continue_dispatches_meanwhile_only_past_the_keep_dispatching_patch() -> None:
    model = paced(FixedRun(length=RUN_HISTORY_BUDGET))
    take(model, event("Approved"))
    assert not model.pacing.dispatchable(), "runs recorded before waited"
    model.pacing.keep_dispatching = True
    assert model.pacing.dispatchable()


def test_a_chain_that_may_not_hand_over_is_never_held_up() -> None:
    run = FixedRun(length=RUN_HISTORY_BUDGET)
    model = paced(run)
    model.pacing.hands_over = False
    take(model, event("Approved"))
    model.runs.start_next()
    model.pacing.note_time()
    run.at = NOW + timedelta(hours=1)
    assert not model.pacing.held_up() and model.pacing.wake_in() is None


def test_a_run_of_local_agents_continues_only_after_a_timer_started_once_its_runs_ended() -> None:
    """A local run's outcome is recorded with the workflow task it ended in: continue-as-new
    waits for a timer started after the runs ended, whatever the history's length (a replay may
    hand an outcome over in another activation, at another length)."""
    run = FixedRun(length=RUN_HISTORY_BUDGET)
    model = paced(run)
    model.pacing.ran_here()
    assert not model.pacing.outcomes_unrecorded(), "runs recorded before: no local runs"
    model.pacing.runs_locally = True
    assert not model.pacing.outcomes_unrecorded(), "no run ended yet"
    model.pacing.ran_here()
    model.pacing.ran_here()
    run.length += 3
    assert model.pacing.outcomes_unrecorded() == 2, "in an earlier task, yet no timer since"
    model.pacing.recorded(2)
    assert not model.pacing.outcomes_unrecorded(), "the timer started after both fired"
    model.pacing.ran_here()
    assert model.pacing.outcomes_unrecorded() == 1, "a run ended after the timer"


def test_runs_recorded_before_the_timer_rule_wait_only_for_a_run_ended_in_this_task() -> None:
    run = FixedRun(length=RUN_HISTORY_BUDGET, before={CHAIN_RECORDS_RUNS_BY_ITS_TIMER_PATCH})
    model = paced(run)
    model.pacing.runs_locally = True
    model.pacing.ran_here()
    assert model.pacing.outcomes_unrecorded() == 1, "a run ended in this task"
    run.length += 3
    assert not model.pacing.outcomes_unrecorded(), "the task it ended in was recorded"
    model.pacing.ran_here()
    assert model.pacing.outcomes_unrecorded() == 2
    model.pacing.recorded(2)
    assert not model.pacing.outcomes_unrecorded()
