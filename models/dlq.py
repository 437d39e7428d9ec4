"""The dead-letter queue's entries: what could not be handled, where it was going, and why."""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from models.agent_config import AgentConfig
from models.envelope import EventEnvelope

DLQ_WORKFLOW_ID = "dead-letter-queue"

EntryStatus = Literal["parked", "replayed", "archived"]


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
    last_failed_at: datetime
    agent_config: AgentConfig | None = None
    """The agent's inline declaration, so a `run_agent` replay runs the same agent."""
    idempotency_key: str | None = None
    """The failed run's key, so a replay of it reaches the agent as the same run."""
    replay: Literal["signal", "rerun", "run_agent"] = "signal"
    """How a replay reaches the target: the event as a signal, a chain's `rerun` of the agent, or
    the agent run again directly (a saga's compensation)."""


class ReplayOutcome(BaseModel):
    at: datetime
    corrected: bool
    outcome: str


class DlqEntry(DeadLetter):
    entry_id: str
    status: EntryStatus = "parked"
    parked_at: datetime
    replays: list[ReplayOutcome] = Field(default_factory=list)
    archive_note: str | None = None

    def matches(self, selection: "DlqSelection") -> bool:
        event = self.event
        checks = [
            (selection.status, self.status),
            (selection.failure_type, self.failure_type),
            (selection.type, event.event.type if event else None),
            (selection.topic, event.routing.topic if event else None),
            (selection.correlation_id, event.event.correlation_id if event else None),
        ]
        if selection.entry_ids and self.entry_id not in selection.entry_ids:
            return False
        return all(wanted is None or wanted == actual for wanted, actual in checks)


class DlqSelection(BaseModel):
    """Which entries an operation concerns: ids, or a filter (all given fields must match)."""

    model_config = ConfigDict(extra="forbid")

    entry_ids: list[str] = Field(default_factory=list)
    status: EntryStatus | None = None
    type: str | None = None
    topic: str | None = None
    failure_type: str | None = None
    correlation_id: str | None = None


class ReplayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    selection: DlqSelection
    payload: dict[str, Any] | None = None
    """Fix and replay: the corrected payload replaces the event's."""


class ArchiveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    selection: DlqSelection
    note: str = Field(min_length=1)


class DlqCounts(BaseModel):
    parked: int = 0
    replayed: int = 0
    archived: int = 0
    by_failure_type: dict[str, int] = Field(default_factory=dict)


class Redelivery(BaseModel):
    """What the replay activity delivers: the event again, to its workflow (and agent)."""

    target_workflow: str
    target_agent: str | None
    event: EventEnvelope
