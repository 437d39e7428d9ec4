"""A long-lived team member apart from Temporal: its mailbox, what it asks its agent, and its
memory.

A long-lived member is an entity of its own for its plan's lifetime: it takes the messages its
plan hands it (`receive`), runs its agent on each, one at a time in the plan's order, and keeps
the latest few outcomes (`memory`), which each next run gets in its inputs. When its history
grows long it continues as new with this whole state, so nothing it holds is lost. The workflow
(`coord.workflows.plan.member`) keeps only the runs, the signals and the continue-as-new."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentRequest, OutgoingMessage, TeamMessage
from coord.models.mesh.config import AgentConfig
from coord.models.plan.spec import MemberRecord, MemberRun, TaskError
from coord.models.plan.team import MAX_SENT_MESSAGES, TEAM_MESSAGE_EVENT
from coord.models.wire.contract import member_workflow_id
from coord.models.wire.sizes import json_size

MAX_MEMORY_RESULT = 4096
"""JSON bytes of a run's result its memory keeps; a larger one is remembered by its size."""
DEFAULT_HISTORY_LIMIT = 2000
"""History events after which the member continues as new, between two messages."""
MEMORY_KEY = "memory"
"""Where a run's inputs carry the member's memory (its latest runs, oldest first)."""


class MemberStart(BaseModel):
    """A long-lived member's start input, and what it carries across continue-as-new."""

    plan_id: str
    member: str
    agent: str
    role: str = ""
    correlation_id: str
    memory: int = Field(ge=0)
    config: AgentConfig | None = None
    """The agent's inline declaration, when the plan's spec carries one."""
    agent_queue: bool = True
    scratchpad: str | None = None
    """The plan's shared scratchpad (`PlanSpec.shared_scratchpad`)."""
    history_limit: int = Field(default=DEFAULT_HISTORY_LIMIT, ge=10)
    mailbox: list[TeamMessage] = Field(default_factory=list, max_length=MAX_SENT_MESSAGES)
    record: MemberRecord | None = None
    closing: bool = False

    @property
    def workflow_id(self) -> str:
        return member_workflow_id(self.plan_id, self.member)


class MemberSent(BaseModel):
    """What the run of a long-lived member on its message `seq` asked to send: its plan checks
    it as any member's (`TeamPost.post`)."""

    member: str
    seq: int = Field(ge=1)
    messages: list[OutgoingMessage] = Field(max_length=MAX_SENT_MESSAGES)

    @property
    def task(self) -> str:
        """What the plan's record names as the sending task: `<member>/message/<seq>`."""
        return f"{self.member}/message/{self.seq}"


class MemberModel:
    """The member's state (`start`, updated in place) and the rules over it."""

    def __init__(self, start: MemberStart) -> None:
        self.start = start
        if start.record is None:
            start.record = MemberRecord(member=start.member, agent=start.agent)
        self.record: MemberRecord = start.record
        self._last_seq = max(
            [m.seq for m in start.mailbox] + [run.seq for run in self.record.memory] + [0]
        )

    def receive(self, message: TeamMessage) -> str | None:
        """Puts the message in the mailbox, in the plan's order; a repeat of one already
        received is dropped. Returns why it was refused, or None."""
        if message.to != self.start.member:
            return f"to: {message.to!r} is not this member ({self.start.member!r})"
        if message.seq <= self._last_seq:
            return None
        if len(self.start.mailbox) >= MAX_SENT_MESSAGES:
            return f"mailbox: {MAX_SENT_MESSAGES} messages wait already"
        self._last_seq = message.seq
        self.start.mailbox.append(message)
        return None

    def close(self) -> None:
        self.start.closing = True

    def has_mail(self) -> bool:
        return bool(self.start.mailbox)

    def done(self) -> bool:
        """Closed, and every message handled."""
        return self.start.closing and not self.start.mailbox

    def next_message(self) -> TeamMessage:
        """The oldest message, still in the mailbox until `handled` (a continue-as-new in
        between carries it)."""
        return self.start.mailbox[0]

    def request(self, message: TeamMessage) -> AgentRequest:
        """What the member's agent gets for a message: the message as its event (type
        `TeamMessage`) and in its context's `messages`, its memory in `inputs.memory`."""
        start = self.start
        event = EventEnvelope.new(
            TEAM_MESSAGE_EVENT,
            f"/plan/{start.plan_id}/team/{message.sender}",
            payload=message.model_dump(mode="json"),
            correlation_id=start.correlation_id,
        )
        memory = [run.model_dump(mode="json") for run in self.record.memory]
        return AgentRequest(
            agent=start.agent,
            event=event,
            config=start.config,
            idempotency_key=f"{start.workflow_id}/{message.seq}",
            inputs={MEMORY_KEY: memory},
            messages=[message],
            scratchpad=start.scratchpad,
        )

    def handled(
        self, result: dict[str, Any] | None, error: TaskError | None, now: datetime
    ) -> MemberRun:
        """The oldest message's run ended: out of the mailbox, into the memory (the latest
        `memory` runs kept)."""
        message = self.start.mailbox.pop(0)
        run = MemberRun(
            seq=message.seq, sender=message.sender, result=_kept(result), error=error, at=now
        )
        self.record.handled += 1
        kept = [*self.record.memory, run]
        self.record.memory = kept[-self.start.memory :] if self.start.memory else []
        return run

    def continue_due(self, history_length: int, suggested: bool) -> bool:
        """Whether to continue as new now (between messages): the history is past the
        member's limit, or the server suggests it."""
        return suggested or history_length >= self.start.history_limit


def _kept(result: dict[str, Any] | None) -> dict[str, Any] | None:
    if result is None:
        return None
    size = json_size(result)
    if size > MAX_MEMORY_RESULT:
        return {"note": f"a result of {size} bytes, over {MAX_MEMORY_RESULT}: not remembered"}
    return result
