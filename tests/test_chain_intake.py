"""The chain's intake on its own (no server): the one queue every event enters once, the share
of it a workflow task takes, admission, rejection and parking, the timeline's windows."""

from typing import Any

from coord.models.chain.boundary import ParkDetails, Parking, Rejection
from coord.models.chain.intake import EVENTS_PER_TASK, SEEN_WINDOW, TIMELINE_WINDOW, TaskShare
from coord.models.chain.model import ChainModel
from coord.models.events.envelope import EventEnvelope
from coord.models.wire.sizes import BYTES_PER_WORKFLOW_TASK
from coord.models.wire.versions import (
    CHAIN_TAKES_ANNOUNCEMENTS_PATCH,
    FLOOD_PATCH,
    LIFECYCLE_NOTICES_PATCH,
)
from tests.chain_models import (
    WORKFLOW_ID,
    FixedRun,
    accounted,
    event,
    new_model,
    parkings,
    take,
)


def test_the_chains_own_events_are_taken_before_signals_still_to_decode() -> None:
    """One queue, two lanes: what is decoded already (an agent run's publication, an event
    signalled in another encoding) is taken first, then the texts, each decoded only when a
    workflow task takes it."""
    run = FixedRun()
    model = new_model(run, terminal_event=None)
    texts = [event("Unrelated", n=n).model_dump_json() for n in range(2)]
    for text in texts:
        model.receive(text)
    model.intake.publish(event("Approved"), [])
    share = TaskShare()
    assert model.take_next(share) and run.decoded == []
    assert [row.event for row in model.record.timeline] == ["Approved"]
    while model.take_next(share):
        pass
    assert run.decoded == texts and not model.intake.waiting()
    assert [row.payload.get("n") for row in model.record.timeline[1:]] == [0, 1]


def test_a_workflow_task_takes_a_bounded_share_and_leaves_the_rest_waiting() -> None:
    model = new_model(terminal_event=None)
    for _ in range(EVENTS_PER_TASK + 5):
        model.intake.receive(event("Unrelated").model_dump_json())
    share = TaskShare()
    while model.take_next(share):
        pass
    assert share.more and share.taken == EVENTS_PER_TASK
    assert len(model.record.arrivals) == 5
    big = "x" * (BYTES_PER_WORKFLOW_TASK // 2)
    for _ in range(4):
        model.intake.publish(event("Unrelated", blob=big), [])
    share = TaskShare()
    while model.take_next(share):
        pass
    assert share.more and share.taken == 2, "two halves of the byte budget fill it"


def test_a_run_recorded_before_the_flood_guard_takes_everything_at_once() -> None:
    run = FixedRun(before={FLOOD_PATCH})
    model = new_model(run, terminal_event=None)
    for _ in range(EVENTS_PER_TASK + 5):
        model.intake.receive(event("Unrelated").model_dump_json())
    share = TaskShare()
    while model.take_next(share):
        pass
    assert not share.more and not model.intake.waiting()
    assert run.asked.count(FLOOD_PATCH) == 5, "asked only once the share is spent, as before"


def test_a_signal_that_does_not_decode_is_rejected_and_parked_with_what_it_carried() -> None:
    model = new_model()
    model.intake.receive("{not json")
    assert model.take_next(TaskShare())
    [letter] = parkings(model.outbox.take())
    assert letter.failure_type == "invalid_envelope"
    assert letter.details == ParkDetails(event=None, raw="{not json", causation_depth=None)
    assert model.record.state.rejected_count == 1 and accounted(model)


def test_an_event_decoded_while_the_chain_is_closing_is_parked_at_once() -> None:
    model = new_model()
    approved = event("Approved")
    take(model, approved)
    model.outbox.take()
    model.record.closing = True
    late = event("Planned", cause=approved.event.id)
    model.intake.receive(late)
    [letter] = parkings(model.outbox.take())
    assert letter.failure_type == "chain_closing"
    assert letter.details.get("causation_depth") == 1
    assert not model.intake.waiting()


def test_events_waiting_when_the_chain_ends_are_all_parked_in_order() -> None:
    model = new_model()
    first, second = event("Approved"), event("Approved")
    model.intake.receive(second.model_dump_json())
    model.intake.receive("{not json")
    model.intake.publish(first, [])
    model.intake.refuse_waiting()
    letters = parkings(model.outbox.take())
    assert [letter.failure_type for letter in letters] == [
        "invalid_envelope",
        "chain_ended",
        "chain_ended",
    ]
    assert [letter.details.get("event") for letter in letters[1:]] == [first, second]
    assert not model.intake.waiting() and accounted(model)


def test_an_event_without_correlation_takes_the_chains_and_a_foreign_one_is_rejected() -> None:
    model = new_model()
    unscoped = event("Approved", correlation_id=None)
    assert take(model, unscoped) == "recorded"
    assert unscoped.event.correlation_id == "c1"
    foreign = event("Approved", correlation_id="other")
    rejection = model.intake.admit(foreign)
    assert isinstance(rejection, Rejection) and rejection.kind == "foreign_correlation"
    assert "correlation_id 'other' is not this chain's ('c1')" in rejection.reason


def test_a_causation_loop_is_rejected_naming_its_path() -> None:
    model = new_model(max_causation_depth=2)
    first = event("Approved")
    second = event("Planned", cause=first.event.id)
    third = event("Designed", cause=second.event.id)
    for envelope in (first, second, third):
        assert take(model, envelope) == "recorded"
    fourth = event("Done", cause=third.event.id)
    rejection = model.intake.admit(fourth)
    assert isinstance(rejection, Rejection)
    assert (rejection.kind, rejection.depth) == ("causation_loop", 3)
    assert rejection.reason.endswith("path: Done ← Designed ← Planned ← Approved")


def test_a_lifecycle_notice_carries_the_depth_of_an_event_the_chain_forgot() -> None:
    model = new_model()
    notice = event("EventDeadLettered", cause="evt-forgotten", causation_depth=5)
    assert model.intake.depth(notice) == 6
    forgotten = event("Planned", cause="evt-forgotten", causation_depth=5)
    assert model.intake.depth(forgotten) == 0


def test_a_rejection_is_counted_kept_in_a_window_and_parked() -> None:
    model = new_model()
    envelope = event("Approved", cause="evt-x")
    model.intake.reject(Rejection("chain_closing", "closing", 4), envelope=envelope)
    details = ParkDetails(event=envelope, raw=None, causation_depth=4)
    assert model.outbox.take() == [Parking("chain_closing", "closing", details)]
    assert model.record.depths[envelope.event.id] == 4
    for n in range(30):
        model.intake.reject(Rejection("invalid_envelope", f"bad {n}"), raw={"n": n})
    state = model.record.state
    assert state.rejected_count == 31 and state.dead_lettered == 31
    assert len(state.rejected) == 20 and state.rejected[-1].reason == "bad 29"
    assert accounted(model)


def test_a_rejected_lifecycle_notice_is_recorded_but_parked_only_by_runs_recorded_before() -> None:
    """Parking a notice would announce another."""
    notice = event("EventDeadLettered", correlation_id="other")
    for before, parked in ((set(), 0), ({LIFECYCLE_NOTICES_PATCH}, 1)):
        model = new_model(FixedRun(before=before))
        assert take(model, notice) == "rejected"
        assert len(parkings(model.outbox.take())) == parked
        assert model.record.state.rejected_count == 1


def test_the_timeline_and_the_seen_ids_stay_within_their_windows() -> None:
    model = new_model()
    for _ in range(2 * SEEN_WINDOW + 1):
        take(model, event("Unrelated"))
    assert len(model.record.timeline) <= 2 * TIMELINE_WINDOW
    assert len(model.record.depths) <= 2 * SEEN_WINDOW
    assert model.record.timeline[-1].seq == model.record.seq
    assert accounted(model)


def announced(type: str, cause: str | None = None) -> EventEnvelope:
    envelope = event(type, cause=cause)
    envelope.event.source = "/plan/p1"
    return envelope


def test_a_plans_announcements_add_no_depth_among_themselves_and_a_vote_opened_adds_one() -> None:
    """A plan's hundredth event is as deep as its first, so a long plan never looks like a
    loop; an agent's event caused by one counts one more, and so does a vote an event opened."""
    model = new_model(max_causation_depth=2)
    envelope = announced("PlanStarted")
    assert take(model, envelope) == "recorded"
    for n in range(10):
        envelope = announced("TaskCompleted" if n % 2 else "TaskStarted", envelope.event.id)
        assert take(model, envelope) == "recorded"
        assert model.record.depths[envelope.event.id] == 0
    reaction = event("ApprovalPrepared", cause=envelope.event.id)
    assert model.intake.depth(reaction) == 1
    assert model.intake.depth(announced("VoteOpened", envelope.event.id)) == 1
    spoofed = event("TaskStarted", cause=envelope.event.id)
    assert model.intake.depth(spoofed) == 1, "an agent's event of the same type counts"


def test_an_announcement_refused_by_a_closing_chain_is_recorded_never_parked() -> None:
    model = new_model()
    model.record.closing = True
    model.intake.receive(announced("PlanCompleted"))
    assert parkings(model.outbox.take()) == []
    state = model.record.state
    assert (state.rejected_count, state.dead_lettered) == (1, 0)
    before = new_model(FixedRun(before={CHAIN_TAKES_ANNOUNCEMENTS_PATCH}))
    before.record.closing = True
    before.intake.receive(announced("PlanCompleted"))
    assert len(parkings(before.outbox.take())) == 1, "runs recorded before parked it"


def looping(**overrides: Any) -> ChainModel:
    """Two subscriptions on X publishing Y and two on Y publishing X, each filtered (so the
    spec's cycle check lets them through): every hop doubles the runs."""
    pair = [
        {
            "name": f"{source}{n}",
            "agent": "a",
            "events": source,
            "filter": "true",
            "publishes": {"on_success": target},
        }
        for source, target in (("X", "Y"), ("Y", "X"))
        for n in (1, 2)
    ]
    model = new_model(triggers=["X"], subscriptions=pair, terminal_event=None, **overrides)
    model.intake.budget.enabled = True
    return model


def test_an_event_whose_first_cause_queued_its_budget_of_runs_is_rejected_as_a_loop() -> None:
    model = looping(max_runs_per_event=5)
    seed = event("X")
    assert take(model, seed) == "recorded"
    hop = event("Y", cause=seed.event.id)
    assert take(model, hop) == "recorded"
    again = event("X", cause=hop.event.id)
    assert take(model, again) == "recorded"
    assert model.record.runs_caused == {seed.event.id: 6}
    late = event("Y", cause=again.event.id)
    rejection = model.intake.admit(late)
    assert isinstance(rejection, Rejection) and rejection.kind == "causation_loop"
    assert rejection.reason == (
        f"event {late.event.id} (Y): the events {seed.event.id} caused have queued 6 runs, "
        "the chain's max_runs_per_event, a probable loop"
    )
    other = event("X")
    assert take(model, other) == "recorded", "another first cause has its own budget"


def test_a_run_recorded_before_the_budget_counts_nothing() -> None:
    model = looping(max_runs_per_event=1)
    model.intake.budget.enabled = False
    seed = event("X")
    take(model, seed)
    assert take(model, event("Y", cause=seed.event.id)) == "recorded"
    assert model.record.runs_caused == {} and model.record.first_causes == {}


def test_the_budget_spans_continue_as_new() -> None:
    model = looping(max_runs_per_event=3)
    seed = event("X")
    take(model, seed)
    carried = model.carry()
    following = ChainModel(carried, WORKFLOW_ID, FixedRun())
    following.intake.budget.enabled = True
    hop = event("Y", cause=seed.event.id)
    assert take(following, hop) == "recorded"
    assert isinstance(following.intake.admit(event("X", cause=hop.event.id)), Rejection)
