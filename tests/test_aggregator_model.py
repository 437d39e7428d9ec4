"""The aggregator's state and rules on their own (no server): the phase1 join, quorums, the
deadline, the lookback, duplicates, other correlations, late events, the emitted event, the
record, and the carry across continue-as-new."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coord.models.aggregator.model import (
    INVALID_SPEC_STANDIN,
    REJECTED_WINDOW,
    SEEN_WINDOW,
    AggregatorModel,
)
from coord.models.aggregator.spec import AggregatorStatus
from coord.models.events.envelope import EventEnvelope, EventHeader
from coord.models.wire.specs import SpecError, read_document
from tests.conftest import ROOT

START = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
PHASE1 = ROOT / "examples" / "phase1-aggregator.yaml"
SLOTS = {
    "APIDesignCompleted": "/backend-architect",
    "WireframeCompleted": "/ux-designer",
    "TestPlanCompleted": "/test-engineer",
}


def phase1(**overrides: Any) -> AggregatorModel:
    spec = {**read_document(PHASE1), "correlation_id": "story-42", **overrides}
    return AggregatorModel.begin(spec, START)


def event(
    event_type: str,
    *,
    at: datetime = START,
    correlation_id: str | None = "story-42",
    event_id: str | None = None,
) -> EventEnvelope:
    header = {"id": event_id} if event_id else {}
    return EventEnvelope(
        event=EventHeader(
            type=event_type,
            source=SLOTS.get(event_type, "/someone"),
            timestamp=at,
            correlation_id=correlation_id,
            **header,
        ),
        payload={"from": event_type},
    )


def counted(model: AggregatorModel) -> bool:
    """Every event received is counted once, in exactly one of the outcomes."""
    s = model.state
    outcomes = s.matched + s.unmatched + s.duplicates + s.rejected_count + s.ignored_after_finish
    return s.received == outcomes


def arrive(model: AggregatorModel, envelope: EventEnvelope, now: datetime = START) -> None:
    model.arrived()
    model.offer(envelope, lambda: now)


def test_a_new_aggregator_waits_with_its_deadline_from_the_start() -> None:
    model = phase1()
    assert model.deadline == START + timedelta(hours=2)
    assert model.waiting and not model.satisfied and not model.chain_joined
    record = model.record()
    assert [row.status for row in record.slots] == ["waiting"] * 3
    assert record.deadline == model.deadline and record.seconds_left is None
    assert record.progress.startswith("0/3 events received, waiting for APIDesignCompleted")
    assert model.time_left(START + timedelta(hours=1)) == timedelta(hours=1)
    assert model.time_left(START + timedelta(hours=3)) == timedelta()
    assert "after start)" in model.deadline_summary()
    assert model.deadline_summary(dated=False) == "deadline: 2h after start"


def test_the_seed_join_completes_and_emits_what_it_joined() -> None:
    model = phase1()
    arrivals = [event(kind, at=START + timedelta(minutes=i)) for i, kind in enumerate(SLOTS)]
    for minute, envelope in enumerate(arrivals):
        arrive(model, envelope, START + timedelta(minutes=minute))
    assert model.satisfied
    assert model.outcome(cancelled=False) == AggregatorStatus.COMPLETED
    emitted = model.finish(AggregatorStatus.COMPLETED)
    assert emitted is not None and emitted == model.state.emitted
    assert (emitted.event.type, emitted.event.source) == (
        "Phase1CompletedEvent",
        "/aggregator/phase1-complete",
    )
    assert emitted.event.causation_id == arrivals[-1].event.id
    assert emitted.event.correlation_id == "story-42"
    assert sorted(emitted.payload["inputs"]) == sorted(SLOTS)
    assert emitted.payload["missing"] == []
    record = model.record()
    assert record.status == AggregatorStatus.COMPLETED
    assert [row.event_id for row in record.slots] == [a.event.id for a in arrivals]
    assert record.progress == "3/3 events received; completed"
    assert model.state.matched == 3 and counted(model)


@pytest.mark.parametrize(("quorum", "needed"), [({"at_least": 2}, 2), ({"threshold": 0.67}, 2)])
def test_a_quorum_completes_before_every_slot_is_filled(
    quorum: dict[str, Any], needed: int
) -> None:
    model = phase1(**quorum)
    arrive(model, event("APIDesignCompleted"))
    assert not model.satisfied
    assert "(2 needed)" in model.progress()
    arrive(model, event("TestPlanCompleted"))
    assert model.satisfied and model.join.needed == needed
    emitted = model.finish(model.outcome(cancelled=False))
    assert emitted is not None and emitted.event.type == "Phase1CompletedEvent"
    assert [slot["type"] for slot in emitted.payload["missing"]] == ["WireframeCompleted"]


def test_the_deadline_times_the_join_out_with_what_is_missing() -> None:
    model = phase1()
    arrive(model, event("APIDesignCompleted"))
    assert model.outcome(cancelled=False) == AggregatorStatus.TIMED_OUT
    emitted = model.finish(AggregatorStatus.TIMED_OUT)
    assert emitted is not None and emitted.event.type == "Phase1TimeoutEvent"
    missing = [slot["type"] for slot in emitted.payload["missing"]]
    assert missing == ["WireframeCompleted", "TestPlanCompleted"]
    assert list(emitted.payload["inputs"]) == ["APIDesignCompleted"]


def test_a_complete_join_wins_over_a_cancel_landing_with_its_last_event() -> None:
    model = phase1(mode="any")
    arrive(model, event("WireframeCompleted"))
    assert model.outcome(cancelled=True) == AggregatorStatus.COMPLETED


def test_a_cancel_before_the_join_holds_emits_nothing() -> None:
    model = phase1()
    assert model.outcome(cancelled=True) == AggregatorStatus.CANCELLED
    assert model.finish(AggregatorStatus.CANCELLED) is None
    assert model.state.emitted is None and model.state.status == AggregatorStatus.CANCELLED


def test_duplicates_other_correlations_and_strangers_are_counted_not_joined() -> None:
    model = phase1()
    design = event("APIDesignCompleted")
    arrive(model, design)
    arrive(model, design)
    arrive(model, event("WireframeCompleted", correlation_id="story-7"))
    arrive(model, event("TestPlanCompleted", correlation_id=None))  # no correlation: joined
    arrive(model, event("SomethingElse"))
    state = model.state
    assert (state.matched, state.duplicates, state.unmatched) == (2, 1, 2)
    assert len(model.join.received) == 2 and counted(model)


def test_the_lookback_offers_earlier_events_oldest_first_without_notices() -> None:
    model = phase1()
    live = event("APIDesignCompleted", at=START + timedelta(minutes=30))
    arrive(model, live)
    older = event("APIDesignCompleted", at=START + timedelta(minutes=5))
    notice = event("EventDeadLettered")
    recorded = [event("TestPlanCompleted", at=START + timedelta(minutes=10)), older, notice, live]
    model.looked_back(recorded, START + timedelta(minutes=31))
    state = model.state
    assert state.received == 4  # the live event, then three recorded: the notice is not counted
    assert (state.matched, state.duplicates) == (3, 1)
    # `keep: first` holds the earliest design by event time, though it arrived later
    assert model.join.received[0].event_id == older.event.id
    assert counted(model)


def test_a_failed_lookback_is_recorded_and_the_join_goes_on() -> None:
    model = phase1()
    model.lookback_failed("chain-story-42 not found")
    assert model.state.lookback_failure == "chain-story-42 not found"
    assert "**Lookback failed:** chain-story-42 not found" in model.details()
    assert model.waiting


def test_late_events_are_parked_only_when_addressed_to_it() -> None:
    model = phase1()
    seen = event("APIDesignCompleted")
    arrive(model, seen)
    model.finish(model.outcome(cancelled=False))
    late = [
        (seen, True),
        (event("WireframeCompleted"), False),
        (event("CompensationFailed"), True),
        (event("TestPlanCompleted"), True),
    ]
    reasons = []
    for envelope, addressed in late:
        model.arrived()
        reasons.append(model.after_end(envelope, addressed=addressed, settled=True))
    assert reasons[:3] == [None, None, None]
    assert reasons[3] == f"event {late[3][0].event.id} (TestPlanCompleted): the aggregator ended"
    state = model.state
    assert (state.duplicates, state.ignored_after_finish, state.rejected_count) == (1, 2, 1)
    assert state.rejected == [reasons[3]]
    assert counted(model)


def test_runs_recorded_before_deadline_first_park_every_late_event() -> None:
    model = phase1()
    model.finish(AggregatorStatus.TIMED_OUT)
    assert model.after_end(event("WireframeCompleted"), addressed=False, settled=False)


def test_rejections_keep_the_latest_and_count_all() -> None:
    model = phase1()
    for n in range(REJECTED_WINDOW + 5):
        model.arrived()
        model.reject(f"bad {n}")
    assert model.state.rejected_count == REJECTED_WINDOW + 5
    assert model.state.rejected == [f"bad {n}" for n in range(5, REJECTED_WINDOW + 5)]
    assert counted(model)


def test_the_carry_keeps_the_join_the_deadline_and_the_latest_ids() -> None:
    model = phase1()
    first = event("SomethingElse", event_id="evt-first")
    arrive(model, first)
    for n in range(2 * SEEN_WINDOW):
        arrive(model, event("SomethingElse", event_id=f"evt-{n}"))
    arrive(model, event("APIDesignCompleted"))
    assert not model.continue_as_new_due(True)  # not yet attached to its chain
    model.chain_joined = True
    assert model.continue_as_new_due(True) and not model.continue_as_new_due(False)
    carried = model.carry()
    assert len(carried.carried.seen) == SEEN_WINDOW
    later = START + timedelta(hours=1)
    continued = AggregatorModel.begin(carried.model_dump(mode="json"), later)
    assert continued.deadline == model.deadline  # the deadline is not restarted
    assert continued.chain_joined
    assert continued.record() == model.record()
    arrive(continued, event("SomethingElse", event_id=f"evt-{2 * SEEN_WINDOW - 1}"))
    assert continued.state.duplicates == 1  # a recent id is still known
    arrive(continued, first)
    assert continued.state.duplicates == 1  # the oldest fell out of the window
    assert counted(continued)


def test_an_invalid_spec_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError, match="timeout"):
        AggregatorModel.begin({**read_document(PHASE1), "timeout": "soon"}, START)
    with pytest.raises(SpecError, match="lookback"):
        AggregatorModel.begin(read_document(PHASE1), START)  # lookback needs a correlation
    model = AggregatorModel.invalid("aggregator spec: timeout: invalid", START)
    assert model.spec is INVALID_SPEC_STANDIN and model.spec_error
    assert model.deadline == START and model.state.aggregator_id == "invalid"
    arrive(model, event("none"))  # the handlers still record what arrives
    assert model.state.matched == 1


@pytest.mark.parametrize("mode", [{"at_least": 2}, {"threshold": 0.67}, "most"])
def test_a_quorum_given_as_the_mode_is_refused_pointing_to_its_own_fields(mode: object) -> None:
    """`mode: {at_least: 2}` was refused `Input should be 'all' or 'any'`, which did not say
    where a quorum goes."""
    with pytest.raises(SpecError) as refused:
        AggregatorModel.begin({**read_document(PHASE1), "mode": mode, "lookback": False}, START)
    assert str(refused.value) == (
        "aggregator spec: mode: should be 'all' or 'any'; a quorum is no mode but a top-level "
        "field beside it: at_least: 2 or threshold: 0.67"
    )
    quorum = AggregatorModel.begin(
        {**read_document(PHASE1), "at_least": 2, "lookback": False}, START
    )
    assert quorum.spec.at_least == 2 and quorum.spec.mode == "all"
