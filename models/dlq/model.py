"""One dead-letter entry's state and rules, apart from Temporal: its states, what may be replayed
and how, archiving, the `EventDeadLettered` notice and the record (`DlqEntry`).

Pure, so it is tested without a server (tests/test_dlq_model.py); the workflow
(`coord.workflows.dlq`) keeps the Temporal part: the updates and their lock, the replay's
activity or agent run, the notice's signal, search attributes, memo and continue-as-new.

The rules:
- states: `parked` (waiting for a person), `replaying` (one replay under way), then `replayed`
  (delivered: closed) or back to `parked` (the replay failed, recorded with why); `archived`
  (closed with a person's note). A closed entry's run completes with its record;
- what may be replayed: a parked entry with an event and a target workflow, or one waiting for
  the stored object its event is (`DlqEntry.stored_object`: its parker could not read it), which
  the replay reads again first, refused (the entry still parked) while it cannot; one kept raw
  otherwise, or without a target, can only be archived. With a fix, the corrected payload
  replaces the event's, and the replay is recorded as corrected. The replayed event is a new
  event caused by the parked one, keeping its type, source, correlation, topic and priority;
- by whom, and which agent: whoever may send the update replays (the API and the CLI); a
  `run_agent` replay runs the agent as its saga declared it, else as the worker's registry knows
  it, never a declaration carried by the entry, with the failed run's idempotency key and inputs;
- how many times: one at a time (a second replay or an archive is refused while one is under
  way), as often as it fails, and never again once delivered or archived."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from coord.models.dlq.letter import (
    CLOSED_STATUSES,
    DeadLetter,
    DlqEntry,
    EntryStatus,
    Redelivery,
    ReplayOutcome,
)
from coord.models.events.envelope import LIFECYCLE_NOTICES, EventEnvelope
from coord.models.mesh.agents import AgentRequest
from coord.models.mesh.config import AgentConfig
from coord.models.wire.contract import FailureType


class CarriedEntry(BaseModel):
    """A continued run's input: the entry's record so far, rather than a new letter."""

    model_config = ConfigDict(extra="forbid")

    carried: DlqEntry


class DeadLetterEntryModel:
    """One entry's record and what may be done with it."""

    def __init__(self, entry: DlqEntry) -> None:
        self.entry = entry

    @classmethod
    def parked(
        cls, letter: DeadLetter, *, entry_id: str, parked_at: datetime
    ) -> "DeadLetterEntryModel":
        return cls(DlqEntry(**letter.model_dump(), entry_id=entry_id, parked_at=parked_at))

    @staticmethod
    def unreadable(raw: Any, reason: str, now: datetime) -> DeadLetter:
        """A letter that does not decode or validate is kept too, as its JSON or its text."""
        return DeadLetter(
            raw=raw,
            failure_type=FailureType.INVALID_DEAD_LETTER,
            message=reason,
            first_failed_at=now,
            last_failed_at=now,
        )

    @property
    def status(self) -> EntryStatus:
        return self.entry.status

    @property
    def closed(self) -> bool:
        """Replayed or archived: nothing more can happen to it."""
        return self.entry.status in CLOSED_STATUSES

    def carry(self) -> CarriedEntry:
        return CarriedEntry(carried=self.entry)

    def not_parked(self) -> str | None:
        """Why nothing can be done with it now (it is replaying, or closed); None when parked."""
        if self.entry.status == "parked":
            return None
        return f"{self.entry.entry_id} is {self.entry.status}, not parked"

    def replay_refusal(self) -> str | None:
        """Why it cannot be replayed, or None."""
        if refusal := self.not_parked():
            return refusal
        if self.entry.event is None and self.entry.stored_object is None:
            return "it holds no event to deliver (what came could not be read as one); archive it"
        if not self.entry.target_workflow:
            return "it names no workflow to deliver its event to; archive it"
        return None

    def replay_started(self) -> None:
        self.entry.status = "replaying"

    def replay_refused(self) -> None:
        """A replay that could not begin (the stored object its entry waits for still cannot
        be read): nothing was delivered, so the entry is parked as it was, with no outcome."""
        self.entry.status = "parked"

    @property
    def runs_agent(self) -> bool:
        """The replay runs the failed agent again (a saga's compensation), rather than
        delivering the event to its workflow."""
        return self.entry.replay == "run_agent" and bool(self.entry.target_agent)

    def replayed_event(
        self, payload: dict[str, Any] | None, stored: EventEnvelope | None = None
    ) -> EventEnvelope:
        """The event delivered again: a new event caused by the parked one (or by the stored
        one the entry waits for, read again), carrying the fixed payload when one is given."""
        parked = stored or self._event()
        return EventEnvelope.new(
            parked.event.type,
            parked.event.source,
            payload=parked.payload if payload is None else payload,
            correlation_id=parked.event.correlation_id,
            causation_id=parked.event.id,
            topic=parked.routing.topic,
            priority=parked.routing.priority,
        )

    def redelivery(self, event: EventEnvelope) -> Redelivery:
        """What the replay activity delivers: the event to its workflow (and a chain's `rerun`
        of the agent, with the failed run's key and inputs)."""
        entry = self.entry
        return Redelivery(
            target_workflow=self.target_workflow,
            target_agent=entry.target_agent if entry.replay == "rerun" else None,
            event=event,
            idempotency_key=entry.idempotency_key,
            inputs=entry.inputs,
        )

    def agent_request(self, event: EventEnvelope, declared: AgentConfig | None) -> AgentRequest:
        """A `run_agent` replay's run: the agent as its saga or the registry declares it, never
        as the entry says, with the failed run's key and inputs."""
        return AgentRequest(
            agent=self.target_agent,
            event=event,
            config=declared,
            idempotency_key=self.entry.idempotency_key,
            inputs=self.entry.inputs,
        )

    def replay_ended(
        self, at: datetime, *, corrected: bool, error: str | None, event_id: str
    ) -> None:
        """The replay delivered (closed), or failed (parked again, with why; a replay that ran
        an agent names it)."""
        if error is None:
            outcome = f"delivered as {event_id}"
        else:
            agent = self.entry.target_agent if self.runs_agent else None
            outcome = f"not delivered: {f'{agent}: {error}' if agent else error}"
        self.entry.replays.append(ReplayOutcome(at=at, corrected=corrected, outcome=outcome))
        self.entry.status = "parked" if error else "replayed"

    def archive(self, note: str) -> None:
        self.entry.archive_note = note
        self.entry.status = "archived"

    @property
    def target_workflow(self) -> str:
        if self.entry.target_workflow is None:
            raise ValueError(f"{self.entry.entry_id} has no target workflow")
        return self.entry.target_workflow

    @property
    def target_agent(self) -> str:
        if self.entry.target_agent is None:
            raise ValueError(f"{self.entry.entry_id} has no target agent")
        return self.entry.target_agent

    def notice(self) -> EventEnvelope | None:
        """`EventDeadLettered`, for the chain of the parked event's correlation, so operators'
        agents can react. Caused by the parked event, with its causation depth when the parker
        knew it. None without a correlation, and for a lifecycle notice (a notice about a notice
        could loop)."""
        entry = self.entry
        parked = entry.event
        if parked is None or not parked.event.correlation_id:
            return None
        if parked.event.type in LIFECYCLE_NOTICES:
            return None
        return EventEnvelope.new(
            "EventDeadLettered",
            "/dead-letter-queue",
            payload={
                "entry_id": entry.entry_id,
                "failure_type": entry.failure_type,
                "message": entry.message,
                "target_workflow": entry.target_workflow,
                "target_agent": entry.target_agent,
                "parked_event_id": parked.event.id,
                "causation_depth": entry.causation_depth,
            },
            correlation_id=parked.event.correlation_id,
            causation_id=parked.event.id,
        )

    def details(self) -> str:
        """The entry as the Temporal UI shows it in 'current details' (markdown)."""
        entry = self.entry
        target = (entry.target_workflow or "-") + (
            f" / {entry.target_agent}" if entry.target_agent else ""
        )
        lines = [
            f"**Status:** {entry.status} · **failure:** {entry.failure_type}",
            f"**Event:** {entry.event.event.type} ({entry.event.event.id})"
            if entry.event
            else "**Event:** (invalid, kept raw)",
            f"**Target:** {target} · **attempts:** {entry.attempts}",
            f"**Message:** {entry.message}",
        ]
        if entry.stored_object:
            lines.append(f"**Waits for:** stored object {entry.stored_object}")
        lines += [f"**Replay {r.at:%H:%M:%S}:** {r.outcome}" for r in entry.replays]
        if entry.archive_note:
            lines.append(f"**Archived:** {entry.archive_note}")
        return "\n\n".join(lines)

    def _event(self) -> EventEnvelope:
        if self.entry.event is None:
            raise ValueError(f"{self.entry.entry_id} has no event to replay")
        return self.entry.event
