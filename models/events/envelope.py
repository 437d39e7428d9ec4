"""The standard event message: `event` header, `payload`, `routing`."""

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from temporalio import workflow

from coord.models.wire.specs import JsonObject


def _now() -> datetime:
    """Deterministic inside a workflow, wall clock elsewhere, so one model serves both."""
    return workflow.now() if workflow.in_workflow() else datetime.now(UTC)


def _random_hex(length: int) -> str:
    source = workflow.uuid4() if workflow.in_workflow() else uuid.uuid4()
    return source.hex[:length]


def new_event_id() -> str:
    """`evt-YYYYMMDD-HHMMSS-<12 hex>`: sortable by time like the example ids, with enough
    randomness that deduplication by id never merges two distinct events. The time is
    formatted field by field: `strftime` imports `time` at every call, which inside the
    workflow sandbox goes through its importer (most of the cost of an event's id)."""
    t = _now()
    stamp = f"{t.year}{t.month:02d}{t.day:02d}-{t.hour:02d}{t.minute:02d}{t.second:02d}"
    return f"evt-{stamp}-{_random_hex(12)}"


LIFECYCLE_NOTICES = frozenset({"EventDeadLettered", "CompensationFailed"})
"""Events the coordinator announces about its own handling. They are never forwarded to
listeners, never dead-lettered, and can never cause another notice."""


class Priority(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    CRITICAL = "critical"


MAX_HEADER = 500
"""Characters of an event's id, type, source, version, correlation, cause and routing: the
type, topic and correlation are keyword search attributes of the runs they reach, which hold
2,048 bytes (a character may take four)."""
Header = Annotated[str, Field(min_length=1, max_length=MAX_HEADER)]


class EventHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: Header = Field(default_factory=new_event_id)
    type: Header
    source: Header
    timestamp: datetime = Field(default_factory=_now)
    version: str = Field(default="1.0", max_length=MAX_HEADER)
    correlation_id: str | None = Field(default=None, max_length=MAX_HEADER)
    causation_id: str | None = Field(default=None, max_length=MAX_HEADER)

    @field_validator("timestamp")
    @classmethod
    def _in_utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Routing(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str | None = Field(default=None, max_length=MAX_HEADER)
    partition_key: str | None = Field(default=None, max_length=MAX_HEADER)
    priority: Priority = Priority.NORMAL


class EventEnvelope(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event: EventHeader
    payload: JsonObject = Field(default_factory=dict)
    routing: Routing = Field(default_factory=Routing)

    @model_validator(mode="after")
    def _partition_by_correlation(self) -> Self:
        if self.routing.partition_key is None and self.event.correlation_id is not None:
            self.routing.partition_key = self.event.correlation_id
        return self

    @classmethod
    def new(
        cls,
        type: str,
        source: str,
        *,
        payload: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        topic: str | None = None,
        priority: Priority = Priority.NORMAL,
        event_id: str | None = None,
        timestamp: datetime | None = None,
    ) -> Self:
        """The short way to build an envelope from code; ids and timestamps are filled in (the
        id unless given: one reserved before, for events caused by it; the time unless given:
        when what it announces happened, if that was before now)."""
        return cls(
            event=EventHeader(
                id=event_id or new_event_id(),
                type=type,
                source=source,
                timestamp=timestamp or _now(),
                correlation_id=correlation_id,
                causation_id=causation_id,
            ),
            payload=payload or {},
            routing=Routing(topic=topic, priority=priority),
        )
