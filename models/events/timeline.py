"""The correlation's timeline: one row per event, with the ids that link it to its cause."""

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
