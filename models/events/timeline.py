"""The correlation's timeline: one row per event, with the ids that link it to its cause."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, field_validator

from coord.models.events.envelope import EventEnvelope, EventHeader, Priority, Routing


class TimelineEntry(BaseModel):
    """A row of the correlation table, with the ids that link it to its cause."""

    seq: int
    time: datetime
    event: str
    agent: str
    correlation_id: str
    event_id: str
    causation_id: str | None
    topic: str | None = None
    priority: Priority = Priority.NORMAL
    payload: dict[str, Any] = Field(default_factory=dict)
    causes: list[str] = Field(default_factory=list)
    """Every event that caused this one: a joined agent's events are all its causes, in slot
    order (`causation_id` names the one that completed the join)."""

    @field_validator("causes", mode="before")
    @classmethod
    def _null_is_none(cls, value: Any) -> Any:
        """The Temporal CLI prints an empty list as `null`."""
        return [] if value is None else value

    @classmethod
    def recording(
        cls,
        envelope: EventEnvelope,
        *,
        seq: int,
        correlation_id: str,
        causes: list[str] | None = None,
    ) -> "TimelineEntry":
        """The row a workflow records for an event; without joined causes, its cause is its
        causation id."""
        header = envelope.event
        return cls(
            seq=seq,
            time=header.timestamp,
            event=header.type,
            agent=header.source,
            correlation_id=correlation_id,
            event_id=header.id,
            causation_id=header.causation_id,
            topic=envelope.routing.topic,
            priority=envelope.routing.priority,
            payload=envelope.payload,
            causes=causes or [cause for cause in [header.causation_id] if cause],
        )

    def to_envelope(self) -> EventEnvelope:
        return EventEnvelope(
            event=EventHeader(
                id=self.event_id,
                type=self.event,
                source=self.agent,
                timestamp=self.time,
                correlation_id=self.correlation_id,
                causation_id=self.causation_id,
            ),
            payload=self.payload,
            routing=Routing(topic=self.topic, priority=self.priority),
        )


def logical_order(
    chain: Sequence[TimelineEntry], records: Sequence[Sequence[TimelineEntry]]
) -> list[TimelineEntry]:
    """One correlation table from the chain's timeline and the rows the patterns' records keep
    (sagas, aggregators, plans, votes), never by wall clock: the chain's rows in its sequence,
    then each record's rows the chain does not hold in that record's sequence, and every row
    after the row that caused it, when the table has that row."""
    rows = sorted(chain, key=lambda entry: entry.seq)
    known = {entry.event_id for entry in rows}
    for record in records:
        fresh = [entry for entry in record if entry.event_id not in known]
        known.update(entry.event_id for entry in fresh)
        rows += sorted(fresh, key=lambda entry: entry.seq)
    return after_their_causes(rows)


def after_their_causes(rows: Sequence[TimelineEntry]) -> list[TimelineEntry]:
    """`rows` in their order, but a row whose cause comes later waits for it (stable)."""
    present = {entry.event_id for entry in rows}
    placed: list[TimelineEntry] = []
    done: set[str] = set()
    waiting: dict[str, list[TimelineEntry]] = {}

    def place(entry: TimelineEntry) -> None:
        pending = [entry]
        while pending:
            row = pending.pop(0)
            placed.append(row)
            done.add(row.event_id)
            pending[:0] = waiting.pop(row.event_id, [])

    for entry in rows:
        cause = entry.causation_id
        if cause is not None and cause in present and cause not in done:
            waiting.setdefault(cause, []).append(entry)
        else:
            place(entry)
    placed += [entry for stuck in waiting.values() for entry in stuck]
    return placed
