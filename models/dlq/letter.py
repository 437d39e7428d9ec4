"""The dead-letter queue's entries: what could not be handled, where it was going, and why.

Each parked entry is one small `DeadLetterEntry` workflow; these models are its input, its record
and what listing, counting and replaying it exchange."""

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.attempts import AttemptTime
from coord.models.mesh.config import AgentConfig
from coord.models.wire import contract
from coord.models.wire.specs import MAX_NAME, JsonObject

EntryStatus = Literal["parked", "replaying", "replayed", "archived"]
ENTRY_STATUSES: tuple[EntryStatus, ...] = get_args(EntryStatus)
CLOSED_STATUSES: tuple[EntryStatus, ...] = ("replayed", "archived")

MESSAGE_SHOWN = 200
"""Characters of the failure message an entry's listing row carries (the entry has it whole)."""


class DeadLetter(BaseModel):
    """What a producer parks: the event (or the raw JSON that did not validate), its target
    (workflow and agent), and the failure."""

    model_config = ConfigDict(extra="forbid")

    event: EventEnvelope | None = None
    raw: Any = None
    target_workflow: str | None = None
    target_agent: str | None = None
    failure_type: str
    message: str
    attempts: int = Field(default=1, ge=0)
    first_failed_at: datetime
    """When the earliest attempt its worker reported failed (the attempt's end), for a failed
    agent run; else, and for a run whose worker reported none, when it was parked."""
    last_failed_at: datetime
    """When the latest attempt its worker reported failed (the attempt's end), for a failed
    agent run; else, and for a run whose worker reported none, when it was parked."""
    idempotency_key: str | None = None
    """The failed run's key, so a replay of it reaches the agent as the same run."""
    inputs: dict[str, Any] = Field(default_factory=dict)
    """The failed run's inputs besides its trigger (a compensation's result of the step it
    undoes), handed to the agent again by a `run_agent` replay."""
    causation_depth: int | None = Field(default=None, ge=0)
    """The parked event's causation depth in its chain, when the parker knows it; the
    `EventDeadLettered` notice carries it so the chain can bound notice chains."""
    correlation_id: str | None = Field(default=None, max_length=MAX_NAME)
    """The correlation of the workflow that parked a letter without an event (a saga's, a
    plan's, a vote's: what their ids do not say), so that the entry is listed by it; an event
    carries its own."""
    replay: Literal["signal", "rerun", "run_agent"] = "signal"
    """How a replay reaches the target: the event as a signal, a chain's `rerun` of the agent, or
    the agent run again directly (a saga's compensation). A `run_agent` replay takes the agent's
    declaration from the target saga's own spec, or the worker's registry: an entry never
    carries one, so nothing parked from outside can make a replay run an agent of its choosing."""


def failure_times(
    attempts: Mapping[int, AttemptTime], parking: datetime
) -> tuple[datetime, datetime]:
    """A letter's `first_failed_at` and `last_failed_at`: the ends of the earliest and latest
    failed attempts of an agent run, as its worker reported them with the run's failure
    (coord.models.mesh.attempts: every attempt a failure reports failed, or the run would not
    have failed). The worker reports the latest MAX_REPORTED attempts it knows of (another
    worker's retry of an activity task is not among them), so the first is the earliest it
    reported. None reported (a timeout is Temporal's, a letter of no run): both are `parking`,
    when it was parked. Not bounded by `parking`, the workflow's clock: a local run may end
    after the start of the workflow task it ends in."""
    ended = [attempt.ended_at for attempt in attempts.values()]
    return (min(ended), max(ended)) if ended else (parking, parking)


def dead_letter_id(letter: DeadLetter, parking: str | None = None) -> str:
    """Derived from what is parked (target, agent, failure type, and the event's id), so parking
    the same failure twice finds the same entry: an event's id names its arrival (a publisher's
    retry reuses it, as the chain's duplicates are told by it), so the same event failing the
    same way is one entry, whoever parks it and however often.

    A rejection with no readable event (`null`, no input, JSON that does not validate) has no
    id: what it carried cannot tell a retried park from a second arrival, so a workflow's park
    of one is also named by which park it is (`parking`: the parking run and the park
    activity's id, the same on every attempt of that park and different for each other park).
    Two alike rejections are then two entries, each found and counted, and a retried park still
    finds the entry its first attempt started. Without `parking` (a letter parked from outside a
    workflow) the id is what is parked, as it always was."""
    if letter.event is not None:
        subject: Any = letter.event.event.id
    else:
        subject = letter.raw if parking is None else [letter.raw, parking]
    identity = [letter.target_workflow, letter.target_agent, letter.failure_type, subject]
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
    return contract.dead_letter_workflow_id(digest.hexdigest()[:20])


def unavailable_object(raw: Any) -> str | None:
    """The SHA-256 named by what the payload store puts in place of an object it cannot read
    (`{"payload_unavailable": {"sha256": ..., "reason": ...}}`, infra/payload_store.py); None
    for anything else, and for a name that is no SHA-256 (a forged reference)."""
    if not isinstance(raw, dict) or len(raw) != 1:
        return None
    marker = raw.get(contract.PAYLOAD_UNAVAILABLE)
    digest = marker.get("sha256") if isinstance(marker, dict) else None
    return (
        digest
        if isinstance(digest, str) and contract.STORED_OBJECT_NAME.fullmatch(digest)
        else None
    )


class ReplayOutcome(BaseModel):
    at: datetime
    corrected: bool
    outcome: str


class DlqEntry(DeadLetter):
    """An entry's whole record: the dead letter, its status and what was done with it."""

    entry_id: str
    status: EntryStatus = "parked"
    parked_at: datetime
    replays: list[ReplayOutcome] = Field(default_factory=list)
    archive_note: str | None = None

    @property
    def stored_object(self) -> str | None:
        """The SHA-256 of the stored object this entry waits for: an event its parker received
        by reference to the payload store but could not read (a worker on another store, a
        wiped store), parked as the placeholder the store put in its place. A replay reads it
        again from the worker's store. Read from the placeholder the entry keeps, so entries
        parked by earlier versions wait for their object too."""
        if self.event is not None or not self.target_workflow:
            return None
        if self.failure_type != contract.FailureType.INVALID_ENVELOPE:
            return None
        return unavailable_object(self.raw)

    def summary(self) -> "EntrySummary":
        event = self.event
        return EntrySummary(
            entry_id=self.entry_id,
            status=self.status,
            failure_type=self.failure_type,
            message=self.message[:MESSAGE_SHOWN],
            attempts=self.attempts,
            event_id=event.event.id if event else None,
            event_type=event.event.type if event else None,
            topic=event.routing.topic if event else None,
            correlation_id=(
                event.event.correlation_id
                if event
                else self.correlation_id or contract.correlation_of_target(self.target_workflow)
            ),
            target_workflow=self.target_workflow,
            target_agent=self.target_agent,
            parked_at=self.parked_at,
        )


class EntrySummary(BaseModel):
    """One listing row, read from visibility alone (the entry's memo): no query per entry."""

    entry_id: str
    status: EntryStatus
    failure_type: str
    message: str
    attempts: int
    event_id: str | None
    event_type: str | None
    topic: str | None
    correlation_id: str | None
    target_workflow: str | None
    target_agent: str | None
    parked_at: datetime

    @property
    def action(self) -> str:
        return contract.dlq_action(self.failure_type)

    def search_attributes(self) -> contract.SearchValues:
        """The entry's filters; what it does not have (no event, say) is left unset."""
        values = {
            contract.COORD_PATTERN: contract.Pattern.DLQ.value,
            contract.COORD_STATUS: self.status,
            contract.FAILURE_TYPE: self.failure_type,
        }
        optional = {
            contract.CORRELATION_ID: self.correlation_id,
            contract.EVENT_TYPE: self.event_type,
            contract.TOPIC: self.topic,
        }
        values.update({key: value for key, value in optional.items() if value})
        return values


class DlqSelection(BaseModel):
    """Which entries a listing or a bulk operation concerns: all given fields must match."""

    model_config = ConfigDict(extra="forbid")

    status: EntryStatus | None = None
    type: str | None = None
    topic: str | None = None
    failure_type: str | None = None
    correlation_id: str | None = None


class DlqPage(BaseModel):
    entries: list[EntrySummary]
    next_cursor: str | None = None
    """Pass it back (`coord dlq list --cursor`) for the next page; None on the last page."""


class ReplayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    payload: JsonObject | None = None
    """Fix and replay: the corrected payload replaces the event's (bounded as an event's)."""


class ArchiveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = Field(min_length=1)


class StatusCounts(BaseModel):
    parked: int = 0
    replaying: int = 0
    replayed: int = 0
    archived: int = 0

    def in_order(self) -> list[int]:
        """The counts in the order of `ENTRY_STATUSES`."""
        return [getattr(self, status) for status in ENTRY_STATUSES]


class DlqCounts(BaseModel):
    """Counted by visibility: totals by status, and by failure type and status."""

    total: StatusCounts = Field(default_factory=StatusCounts)
    by_failure_type: dict[str, StatusCounts] = Field(default_factory=dict)


class BulkOutcome(BaseModel):
    """What one entry of a bulk replay or archive came to."""

    entry_id: str
    status: EntryStatus | None
    """None: refused, `detail` says why (naming the entry)."""
    detail: str
    missing: bool = False
    """Refused because there is no such entry (the CLI's exit code is then 5, not_found)."""


class Redelivery(BaseModel):
    """What the replay activity delivers: the event again, to its workflow (and agent)."""

    target_workflow: str
    target_agent: str | None
    event: EventEnvelope
    idempotency_key: str | None = None
    """A chain rerun's key and inputs: those of the run that failed, so the rerun is that run."""
    inputs: dict[str, Any] = Field(default_factory=dict)


class AgentLookup(BaseModel):
    """Which agent a `run_agent` replay runs: the target saga's declaration of it, if any."""

    target_workflow: str
    agent: str


class DeclaredAgent(BaseModel):
    """The target saga's inline declaration of the agent; None: the worker's registry decides."""

    config: AgentConfig | None = None
