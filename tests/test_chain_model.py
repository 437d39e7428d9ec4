"""The chain's model as its workflow uses it (no server): one hand-off per event and the sends it
decides, in order; when the chain is done; the carry across continue-as-new. Its parts are
tested on their own in test_chain_intake, test_chain_matching, test_chain_runs_model and
test_chain_pacing."""

from coord.models.chain.boundary import Forward, Parking, StatusChanged
from coord.models.chain.intake import TIMELINE_WINDOW, TaskShare
from coord.models.chain.model import ChainModel
from coord.models.chain.pacing import LISTENERS_GRACE
from coord.models.chain.spec import ChainInput, ChainStatus, RecordedEvents
from coord.models.events.envelope import Priority
from coord.models.events.rewind import RewindOrigin
from coord.models.wire.versions import (
    CHAIN_WAITS_FOR_ITS_LISTENERS_PATCH,
    COPY_ENDS_AFTER_ITS_HAND_OVER_PATCH,
    FLOOD_PATCH,
    LIFECYCLE_NOTICES_PATCH,
)
from tests.chain_models import (
    WORKFLOW_ID,
    FixedRun,
    accounted,
    event,
    new_model,
    take,
)


def test_each_event_is_handed_over_once_and_its_sends_come_out_in_decided_order() -> None:
    """A rejected event is parked, a recorded one forwarded, an alert sends the status: each
    waits in the outbox, in the order decided, for the workflow to send after the hand-off."""
    run = FixedRun()
    model = new_model(run)
    model.attach("agg-1")
    foreign = event("Approved", correlation_id="other")
    alert = event("Alert", topic="project.alerts", severity="high")
    for envelope in (foreign, alert):
        model.intake.receive(envelope.model_dump_json())
    share = TaskShare()
    assert model.take_next(share)
    [parked] = model.outbox.take()
    assert isinstance(parked, Parking) and parked.failure_type == "foreign_correlation"
    assert run.asked == [], "no patch asked for a rejection that is no notice"
    assert model.take_next(share)
    forward, status = model.outbox.take()
    assert isinstance(forward, Forward) and forward.listeners == ("agg-1",)
    assert isinstance(status, StatusChanged) and "paused" in status.attributes.values()
    assert run.asked == [LIFECYCLE_NOTICES_PATCH]
    assert not model.take_next(share) and not share.more
    assert FLOOD_PATCH not in run.asked, "nothing due: the flood guard's patch is not asked"
    assert accounted(model)


def test_a_rewound_copy_ends_only_once_its_hand_over_is_complete() -> None:
    """Its past may hold its terminal event: the rewind's later signals (re-delivered events,
    the mark that the hand-over is complete) must still find it running."""
    origin = RewindOrigin(original="c0", at="evt-1")
    for run, ends_early in (
        (FixedRun(), False),
        (FixedRun(before={COPY_ENDS_AFTER_ITS_HAND_OVER_PATCH}), True),
    ):
        chain_input = ChainInput(spec=new_model().spec, correlation_id="c1", rewind_of=origin)
        model = ChainModel(chain_input, WORKFLOW_ID, run)
        model.receive_recorded(RecordedEvents(events=[event("Approved"), event("Done")]))
        while model.take_next(TaskShare()):
            pass
        assert model.record.state.terminal_seen
        assert model.finished(outbound=0) is ends_early, "a run recorded before ended at once"
        model.receive_recorded(RecordedEvents(events=[], complete=True))
        assert model.finished(outbound=0)


def test_the_chain_finishes_after_its_terminal_event_once_idle() -> None:
    model = new_model()
    take(model, event("Approved"))
    assert not model.finished(outbound=0)
    seq, _ = model.runs.start_next()
    take(model, event("Done"))
    assert model.record.state.terminal_seen
    assert not model.finished(outbound=0), "a run is still running"
    model.runs.finish(seq)
    assert not model.finished(outbound=1), "a send is still under way"
    assert model.finished(outbound=0)
    model.end()
    assert model.record.state.status == ChainStatus.COMPLETED


def test_an_ended_chain_waits_for_its_listeners_to_leave_at_most_the_grace() -> None:
    """An aggregator publishes its result, then leaves: the chain that met its terminal event
    meanwhile must still be running to record it (runs recorded before ended at once)."""
    run = FixedRun()
    model = new_model(run)
    model.attach("agg-1")
    take(model, event("Done"))
    assert model.record.state.terminal_seen
    assert not model.finished(outbound=0), "its listener has not left"
    assert model.has_work(outbound=0), "a turn arms the grace's timer"
    assert model.pacing.wake_in() == LISTENERS_GRACE
    assert not model.has_work(outbound=0)
    model.detach("agg-1")
    assert model.finished(outbound=0), "its listener left"
    model.attach("agg-1")
    assert not model.finished(outbound=0)
    run.at += LISTENERS_GRACE
    assert model.finished(outbound=0), "a listener that never leaves holds it at most the grace"
    earlier = FixedRun(before={CHAIN_WAITS_FOR_ITS_LISTENERS_PATCH})
    model = new_model(earlier)
    model.attach("agg-1")
    take(model, event("Done"))
    assert model.finished(outbound=0)
    assert model.pacing.wake_in() is None


def test_a_closing_chain_finishes_with_runs_left_only_when_paused() -> None:
    model = new_model()
    take(model, event("Approved"))
    model.record.closing = True
    assert not model.finished(outbound=0)
    model.record.state.status = ChainStatus.PAUSED
    assert model.finished(outbound=0)
    model.end()
    assert model.record.state.status == ChainStatus.CLOSED


def test_the_idle_timeout_closes_a_chain_with_nothing_running() -> None:
    model = new_model()
    take(model, event("Approved"))
    seq, _ = model.runs.start_next()
    assert not model.close_idle()
    model.runs.finish(seq)
    assert model.close_idle() and model.finished(outbound=1)
    assert model.record.state.status == ChainStatus.IDLE_CLOSED


def test_the_carry_round_trips_and_is_trimmed() -> None:
    model = new_model()
    for _ in range(TIMELINE_WINDOW + 50):
        take(model, event("Unrelated"))
    approved = event("Approved", priority=Priority.HIGH)
    take(model, approved)
    take(model, event("Approved", priority=Priority.LOW))
    model.attach("agg-1")
    model.intake.publish(event("Planned"), [])
    model.intake.receive(event("Planned").model_dump_json())
    carried = model.carry()
    assert carried.carried is not None and len(carried.carried.timeline) == TIMELINE_WINDOW
    assert carried.carried.state.queued == 2 and carried.carried.state.listeners == ["agg-1"]
    again = ChainInput.model_validate_json(carried.model_dump_json())
    resumed = ChainModel(again, WORKFLOW_ID, FixedRun())
    assert resumed.record.seq == model.record.seq and resumed.record.listeners == ["agg-1"]
    assert [e.event.type for e in resumed.record.inbox] == ["Planned"]
    assert len(resumed.record.arrivals) == 1, "signals still to decode are carried as text"
    resumed.record.inbox.clear()
    resumed.record.arrivals.clear()
    assert take(resumed, approved) == "duplicate"
    assert resumed.runs.start_next()[1].trigger.event.id == approved.event.id
    assert resumed.record.state.received == model.record.state.received + 1


def test_the_details_say_what_the_chain_is_doing() -> None:
    model = new_model()
    take(model, event("Approved"))
    take(model, event("Approved"))
    model.runs.start_next()
    take(model, event("Alert", topic="project.alerts", severity="high"))
    lines = model.details().split("\n\n")
    assert lines[0] == "**Status:** paused · **events seen:** 3"
    assert lines[2:4] == ["**Running:** planner ← Approved", "**Waiting:** none"]
    assert "**Queued runs:** 1" in lines
    assert model.snapshot().queued == 1
