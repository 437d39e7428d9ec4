"""A dead-letter entry's states and rules on their own (no server): parking, what may be replayed
and how (with a fix, by which agent, how many times), archiving, the notice and the carry."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coord.models.dlq.letter import DeadLetter, dead_letter_id, failure_times
from coord.models.dlq.model import CarriedEntry, DeadLetterEntryModel
from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.mesh.attempts import AttemptTime
from coord.models.mesh.config import PythonAgent
from coord.models.wire import contract
from coord.models.wire.contract import FailureType

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ENTRY_ID = "dlq-0123456789abcdef0123"


def parked_event(event_type: str = "UserStoryApproved", **header: Any) -> EventEnvelope:
    return EventEnvelope.new(
        event_type,
        "/product-owner",
        payload={"story": 42},
        correlation_id=header.get("correlation_id", "story-42"),
        topic="stories",
        priority=Priority.HIGH,
    )


def entry(**letter: Any) -> DeadLetterEntryModel:
    fields: dict[str, Any] = {
        "event": parked_event(),
        "target_workflow": "chain-story-42",
        "failure_type": FailureType.TARGET_ENDED,
        "message": "planner failed: boom",
        "first_failed_at": NOW,
        "last_failed_at": NOW,
        **letter,
    }
    return DeadLetterEntryModel.parked(
        DeadLetter(**fields), entry_id=ENTRY_ID, parked_at=NOW + timedelta(seconds=1)
    )


def compensation(**letter: Any) -> DeadLetterEntryModel:
    """A saga's failed compensation, as the saga parks it."""
    return entry(
        event=parked_event("RemoveFromStagingCommand"),
        target_workflow="saga-deploy-1",
        target_agent="RemoveFromStaging",
        failure_type=FailureType.COMPENSATION_FAILED,
        replay="run_agent",
        idempotency_key="saga-deploy-1/run-1/DeployToStaging/undo",
        inputs={"undoes": {"step": "DeployToStaging", "result": {"url": "s"}}},
        **letter,
    )


def test_a_parked_entry_waits_for_a_person() -> None:
    model = entry()
    assert model.status == "parked" and not model.closed
    assert model.entry.entry_id == ENTRY_ID and model.entry.parked_at == NOW + timedelta(seconds=1)
    assert model.not_parked() is None and model.replay_refusal() is None
    details = model.details()
    assert "**Status:** parked · **failure:** target_ended" in details
    assert "**Target:** chain-story-42 · **attempts:** 1" in details


def test_each_park_of_an_unreadable_rejection_has_its_own_id_and_a_retry_the_same() -> None:
    """Two rejections carrying the same thing (here no input at all) are two parks, named by the
    parking run and activity: two ids; a retry of one park is named the same: one id. Without
    a park's name the id is what is parked, as before. An event's id names its arrival, so a
    letter with an event keeps the id its event gives it, whichever park made it."""
    unread = DeadLetter(
        raw=None,
        target_workflow="chain-story-42",
        failure_type=FailureType.INVALID_ENVELOPE,
        message="event: no input given",
        first_failed_at=NOW,
        last_failed_at=NOW,
    )
    first, again = dead_letter_id(unread, "run-1/7"), dead_letter_id(unread, "run-1/7")
    second = dead_letter_id(unread, "run-1/8")
    assert first == again and first != second
    assert dead_letter_id(unread) not in (first, second)
    assert first.startswith("dlq-") and len(first) == len(dead_letter_id(unread))
    letter = unread.model_copy(update={"event": parked_event()})
    assert dead_letter_id(letter, "run-1/7") == dead_letter_id(letter, "run-1/8")
    assert dead_letter_id(letter, "run-1/7") == dead_letter_id(letter)


def test_an_unreadable_letter_is_kept_raw_and_can_only_be_archived() -> None:
    letter = DeadLetterEntryModel.unreadable("{not json", "dead letter: cannot be decoded", NOW)
    model = DeadLetterEntryModel.parked(letter, entry_id=ENTRY_ID, parked_at=NOW)
    assert model.entry.raw == "{not json"
    assert model.entry.failure_type == FailureType.INVALID_DEAD_LETTER
    assert model.replay_refusal() == (
        "it holds no event to deliver (what came could not be read as one); archive it"
    )
    assert model.not_parked() is None  # archiving is allowed
    assert "**Event:** (invalid, kept raw)" in model.details()


@pytest.mark.parametrize(
    ("target", "correlation_id"),
    [
        ("chain-story-42", "story-42"),
        ("aggregator-phase1~story-42", "story-42"),
        ("aggregator-phase1", None),
        ("saga-deploy-1", None),
        (None, None),
    ],
)
def test_a_raw_entry_is_listed_by_its_targets_correlation(
    target: str | None, correlation_id: str | None
) -> None:
    """A signal that did not validate has no event to name its correlation: a chain's or a
    scoped aggregator's id does."""
    model = entry(event=None, raw=None, target_workflow=target, failure_type="invalid_envelope")
    summary = model.entry.summary()
    assert summary.correlation_id == correlation_id
    assert summary.search_attributes().get(contract.CORRELATION_ID) == correlation_id


DIGEST = "ab" * 32


def unavailable(digest: str = DIGEST) -> dict[str, Any]:
    """What the payload store hands a workflow in place of an object it cannot read."""
    return {contract.PAYLOAD_UNAVAILABLE: {"sha256": digest, "reason": "not in the store /s"}}


def test_an_event_the_store_could_not_read_waits_for_its_object_and_replays_it() -> None:
    """The placeholder's SHA-256 is what the entry waits for: it may be replayed (the workflow
    reads the object again first), and the event replayed is the stored one's, with the fix."""
    model = entry(event=None, raw=unavailable(), failure_type=FailureType.INVALID_ENVELOPE)
    assert model.entry.stored_object == DIGEST
    assert model.replay_refusal() is None
    assert f"**Waits for:** stored object {DIGEST}" in model.details()
    model.replay_started()
    model.replay_refused()
    assert model.status == "parked" and model.entry.replays == []
    stored = parked_event()
    event = model.replayed_event({"story": 43}, stored)
    assert event.event.causation_id == stored.event.id
    assert (event.event.type, event.payload) == (stored.event.type, {"story": 43})


@pytest.mark.parametrize(
    "letter",
    [
        {"raw": unavailable("../x")},  # a forged name
        {"raw": {**unavailable(), "other": 1}},  # not the store's placeholder
        {"raw": unavailable(), "target_workflow": None},  # an unreadable dead letter's own
        {"raw": unavailable(), "failure_type": FailureType.INVALID_RERUN},  # no event's object
    ],
)
def test_only_an_unread_event_waits_for_a_stored_object(letter: dict[str, Any]) -> None:
    model = entry(**{"event": None, "failure_type": FailureType.INVALID_ENVELOPE, **letter})
    assert model.entry.stored_object is None
    assert model.replay_refusal() is not None


def test_an_entry_without_a_target_cannot_be_replayed() -> None:
    assert entry(target_workflow=None).replay_refusal() is not None


def test_a_replay_delivers_a_new_event_caused_by_the_parked_one() -> None:
    model = entry()
    parked = model.entry.event
    assert parked is not None
    model.replay_started()
    assert model.status == "replaying"
    event = model.replayed_event(None)
    assert event.event.id != parked.event.id
    assert event.event.causation_id == parked.event.id
    assert (event.event.type, event.event.source) == (parked.event.type, parked.event.source)
    assert event.event.correlation_id == "story-42"
    assert (event.routing.topic, event.routing.priority) == ("stories", Priority.HIGH)
    assert event.payload == {"story": 42}
    assert not model.runs_agent
    redelivery = model.redelivery(event)
    assert (redelivery.target_workflow, redelivery.target_agent) == ("chain-story-42", None)
    model.replay_ended(NOW, corrected=False, error=None, event_id=event.event.id)
    assert model.closed and model.entry.status == "replayed"
    [replay] = model.entry.replays
    assert (replay.outcome, replay.corrected) == (f"delivered as {event.event.id}", False)


def test_a_fixed_replay_carries_the_corrected_payload() -> None:
    model = entry()
    event = model.replayed_event({"story": 43, "fixed": True})
    assert event.payload == {"story": 43, "fixed": True}
    model.replay_ended(NOW, corrected=True, error=None, event_id=event.event.id)
    assert model.entry.replays[0].corrected


def test_one_replay_at_a_time_and_never_again_once_delivered() -> None:
    model = entry()
    model.replay_started()
    assert model.replay_refusal() == f"{ENTRY_ID} is replaying, not parked"
    assert model.not_parked() == f"{ENTRY_ID} is replaying, not parked"  # nor an archive
    model.replay_ended(NOW, corrected=False, error=None, event_id="evt-1")
    assert model.replay_refusal() == f"{ENTRY_ID} is replayed, not parked"


def test_a_failed_replay_parks_the_entry_again_as_often_as_it_fails() -> None:
    model = entry()
    for attempt in range(3):
        model.replay_started()
        model.replay_ended(NOW, corrected=False, error=f"target ended {attempt}", event_id="e")
        assert model.status == "parked" and model.replay_refusal() is None
    outcomes = [replay.outcome for replay in model.entry.replays]
    assert outcomes == [f"not delivered: target ended {n}" for n in range(3)]


def test_a_compensation_replay_runs_the_agent_as_its_saga_declares_it() -> None:
    model = compensation()
    assert model.runs_agent
    event = model.replayed_event(None)
    declared = PythonAgent(kind="python", callable="agents.staging:remove")
    request = model.agent_request(event, declared)
    assert (request.agent, request.config) == ("RemoveFromStaging", declared)
    assert request.idempotency_key == "saga-deploy-1/run-1/DeployToStaging/undo"
    assert request.inputs == model.entry.inputs
    assert model.agent_request(event, None).config is None  # the worker's registry decides
    model.replay_ended(NOW, corrected=False, error="still down", event_id=event.event.id)
    assert model.entry.replays[0].outcome == "not delivered: RemoveFromStaging: still down"


def test_a_chain_rerun_names_its_agent_and_run() -> None:
    model = entry(
        target_agent="planner", replay="rerun", idempotency_key="k-1", inputs={"slot": {"a": 1}}
    )
    assert not model.runs_agent
    redelivery = model.redelivery(model.replayed_event(None))
    assert redelivery.target_agent == "planner"
    assert (redelivery.idempotency_key, redelivery.inputs) == ("k-1", {"slot": {"a": 1}})


def test_a_run_agent_entry_without_an_agent_is_delivered_as_a_signal() -> None:
    assert not entry(replay="run_agent").runs_agent


def test_archiving_closes_the_entry_with_its_note() -> None:
    model = entry()
    model.archive("duplicate of a handled story")
    assert model.status == "archived" and model.closed
    assert model.entry.archive_note == "duplicate of a handled story"
    assert model.not_parked() == f"{ENTRY_ID} is archived, not parked"
    assert "**Archived:** duplicate of a handled story" in model.details()


def test_the_notice_joins_the_parked_event_correlation() -> None:
    model = entry(causation_depth=3)
    notice = model.notice()
    assert notice is not None
    parked = model.entry.event
    assert parked is not None
    assert (notice.event.type, notice.event.source) == ("EventDeadLettered", "/dead-letter-queue")
    assert notice.event.correlation_id == "story-42"
    assert notice.event.causation_id == parked.event.id
    assert notice.payload["entry_id"] == ENTRY_ID
    assert notice.payload["parked_event_id"] == parked.event.id
    assert notice.payload["causation_depth"] == 3


@pytest.mark.parametrize(
    "letter",
    [
        {"event": parked_event(correlation_id=None)},
        {"event": parked_event("EventDeadLettered")},
        {"event": parked_event("CompensationFailed")},
        {"event": None, "raw": {"x": 1}},
    ],
)
def test_no_notice_without_a_correlation_or_about_a_notice(letter: dict[str, Any]) -> None:
    assert entry(**letter).notice() is None


def test_the_carry_keeps_the_whole_record() -> None:
    model = entry()
    model.replay_started()
    model.replay_ended(NOW, corrected=True, error="boom", event_id="e")
    carried = CarriedEntry.model_validate(model.carry().model_dump(mode="json"))
    assert carried.carried == model.entry


def failed_attempt(attempt: int, ended_s: float) -> AttemptTime:
    ended = NOW + timedelta(seconds=ended_s)
    return AttemptTime(
        attempt=attempt, started_at=ended - timedelta(seconds=1), ended_at=ended, type="boom"
    )


def test_a_failed_runs_letter_is_dated_by_its_reported_attempts_else_by_its_parking() -> None:
    """The earliest and latest reported failures (each attempt's end, whatever the order they
    are given in), even past the parking (a local run ending after its workflow task began);
    none reported: both when it was parked."""
    parking = NOW + timedelta(seconds=5)
    reported = {n: failed_attempt(n, ended) for n, ended in ((3, 6.0), (1, 1.0), (2, 3.5))}
    assert failure_times(reported, parking) == (
        NOW + timedelta(seconds=1),
        NOW + timedelta(seconds=6),
    )
    assert failure_times({}, parking) == (parking, parking)
