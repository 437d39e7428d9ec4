"""Teams that talk: a plan's team members send each other messages (a swarm's `send`).

An agent's run may ask to send messages (`AgentContext.send(to, message)`, or a result's `send`
key for shell, HTTP and `llm` agents). Its output is data: the plan decides here, with no server,
which of them go. A message goes only from a team member (the member a task names) to another
member of the same team, within the sender's bounds (`MessageLimits`: how many a run, how many
characters each). Every other is refused with its reason, recorded in the plan's record, and
never fails anything.

Accepted messages are numbered in the order the plan accepted them (`seq`, one sequence per
plan) and wait in their recipient's mailbox. A per-task member gets every message not yet
delivered to it in its next run's context, oldest first, each with its sender; a long-lived
member's entity workflow is handed each one as it is accepted (`coord.models.plan.member`)."""

from collections.abc import Mapping, Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import OutgoingMessage, TeamMessage
from coord.models.wire.specs import MAX_ITEMS, MAX_NAME

__all__ = ["OutgoingMessage", "TeamMessage"]

TEAM_MESSAGE_EVENT = "TeamMessage"
"""The event type of a message between members, published into the plan's correlation."""
DEFAULT_MESSAGES_PER_RUN = 8
DEFAULT_MESSAGE_CHARS = 4096
MAX_MESSAGE_CHARS = 64 * 1024
MAX_REFUSED_MESSAGES = 50
"""Refused messages the record keeps (the latest): a run asking for many costs the record
nothing more."""
MAX_SENT_MESSAGES = MAX_ITEMS
"""Messages a plan accepts in all; more are refused (the record, and its history, stay
bounded whatever the agents ask)."""
MAX_SENT_CHARS = 1024 * 1024
"""Characters of all the messages a plan accepts; one that would pass it is refused."""


class MessageLimits(BaseModel):
    """What one run of a member may send: at most `max_per_run` messages, each at most
    `max_chars` characters. The team's spec declares them per member."""

    model_config = ConfigDict(extra="forbid")

    max_per_run: int = Field(default=DEFAULT_MESSAGES_PER_RUN, ge=0, le=MAX_ITEMS)
    max_chars: int = Field(default=DEFAULT_MESSAGE_CHARS, ge=1, le=MAX_MESSAGE_CHARS)


class RefusedMessage(BaseModel):
    """A message the plan did not send, and why (one line naming the rule)."""

    task: str
    sender: str | None
    """The member the task names; None for a task done by an agent outside the team."""
    to: str = Field(max_length=MAX_NAME)
    reason: str
    at: datetime


class Posted(BaseModel):
    """What one run's messages came to: those accepted (in order) and those refused."""

    sent: list[TeamMessage] = Field(default_factory=list)
    refused: list[RefusedMessage] = Field(default_factory=list)


class TeamPost(BaseModel):
    """A plan's messages: every one accepted (the plan's log of them, in order), the latest
    refused, and how far each member's mailbox has been delivered."""

    sent: list[TeamMessage] = Field(default_factory=list)
    refused: list[RefusedMessage] = Field(default_factory=list)
    delivered: dict[str, int] = Field(default_factory=dict)
    """Member -> the seq of the last message handed to it (its run's context, or its entity)."""
    waiting: dict[str, str] = Field(default_factory=dict)
    """Task -> its member, for each task waiting for a message now (`wait_for_message`)."""

    def post(
        self,
        team: Mapping[str, MessageLimits],
        sender: str | None,
        task: str,
        outgoing: Sequence[OutgoingMessage],
        now: datetime,
    ) -> Posted:
        """Checks and records what the run of `task` (done by team member `sender`) asks to
        send; the accepted ones wait in their recipients' mailboxes."""
        posted = Posted()
        for index, asked in enumerate(outgoing):
            reason = self._refusal(team, sender, index, asked)
            if reason is None:
                message = TeamMessage(
                    seq=len(self.sent) + 1,
                    sender=sender or "",
                    to=asked.to,
                    message=asked.message,
                    task=task,
                    at=now,
                )
                self.sent.append(message)
                posted.sent.append(message)
                continue
            to = asked.to[:MAX_NAME]
            refused = RefusedMessage(task=task, sender=sender, to=to, reason=reason, at=now)
            posted.refused.append(refused)
        self.refused = [*self.refused, *posted.refused][-MAX_REFUSED_MESSAGES:]
        return posted

    def _refusal(
        self,
        team: Mapping[str, MessageLimits],
        sender: str | None,
        index: int,
        asked: OutgoingMessage,
    ) -> str | None:
        """Why the `index`th message of a run may not go, or None: it may."""
        if sender is None or sender not in team:
            return "send: only a team member sends messages; this task is not done by one"
        limits = team[sender]
        if index >= limits.max_per_run:
            return f"send: {sender} may send at most {limits.max_per_run} messages a run"
        if asked.to not in team:
            members = ", ".join(sorted(team))
            return f"send.to: {asked.to[:MAX_NAME]!r} is not a member of the team ({members})"
        if asked.to == sender:
            return f"send.to: {sender} is the sender; a member does not message itself"
        if len(asked.message) > limits.max_chars:
            return (
                f"send.message: {len(asked.message)} characters, over {sender}'s limit of "
                f"{limits.max_chars}"
            )
        if len(self.sent) >= MAX_SENT_MESSAGES:
            return f"send: the plan has sent {MAX_SENT_MESSAGES} messages, its most"
        if self.chars() + len(asked.message) > MAX_SENT_CHARS:
            return f"send: the plan's messages would pass {MAX_SENT_CHARS} characters in all"
        return None

    def chars(self) -> int:
        return sum(len(message.message) for message in self.sent)

    def summary(self) -> str:
        """`3 sent, 1 refused`: what the team said, in a few words ('' when nothing)."""
        parts = [f"{len(self.sent)} sent"] if self.sent else []
        parts += [f"{len(self.refused)} refused"] if self.refused else []
        return ", ".join(parts)

    def inbox(self, member: str) -> list[TeamMessage]:
        """The messages to `member` not yet handed to it, oldest first."""
        last = self.delivered.get(member, 0)
        return [m for m in self.sent if m.to == member and m.seq > last]

    def deliver(self, member: str) -> list[TeamMessage]:
        """The inbox, now counted as handed over (a run's context holds them; its retries get
        the same request, so the same messages)."""
        messages = self.inbox(member)
        if messages:
            self.delivered[member] = messages[-1].seq
        return messages

    def has_mail(self, member: str) -> bool:
        return bool(self.inbox(member))

    def waits(self) -> list[str]:
        """What the plan waits for from its team, in words (`PlanProgress.waiting_for`)."""
        return [f"a message to {member} (task {task})" for task, member in self.waiting.items()]


def message_event(plan_id: str, correlation_id: str, message: TeamMessage) -> EventEnvelope:
    """A message the plan accepted, as the `TeamMessage` event its correlation's log keeps
    (source `/plan/<plan_id>/team/<sender>`)."""
    payload = {"plan_id": plan_id, **message.model_dump(mode="json")}
    return EventEnvelope.new(
        TEAM_MESSAGE_EVENT,
        f"/plan/{plan_id}/team/{message.sender}",
        payload=payload,
        correlation_id=correlation_id,
    )
