"""The event taxonomy: every event type the coordinator publishes itself, with its category
(domain: what happened; integration: work passed between agents; system: the coordinator's own
handling), who publishes it, its payload model and what causes it.

Plans and votes announce their lifecycle into their correlation's chain with these types
(`ANNOUNCEMENTS`): a chain subscription matches them like any event, yet they differ from an
agent's events in two ways, so a plan can never loop nor fill the dead-letter queue:
- they never add causation depth among themselves (a plan's hundredth event is as deep as its
  first); only the event that opens a run (`PlanStarted`, `VoteOpened`) counts one more than
  its cause, so a chain that starts votes on `DecisionMade` still meets its depth limit;
- a chain that refuses one (closing, ended) records it and never parks it.
Lifecycle notices (`LIFECYCLE_NOTICES`) are about the coordinator's handling: never forwarded to
listeners, never parked, never the cause of another notice. Event types named by specs (a saga
step's `on_success`, an aggregator's `on_complete`) are the specs' own; `docs/events.md` lists
them beside this table."""

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict

from coord.models.events.envelope import EventEnvelope


class Category(StrEnum):
    DOMAIN = "domain"
    """What happened in a pattern's work (a task completed, a decision was made)."""
    INTEGRATION = "integration"
    """Work passed between agents (a task's output handed to the next task's agent)."""
    SYSTEM = "system"
    """The coordinator's own handling (dead letters, failed compensations, agent health)."""


class Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlanPayload(Payload):
    plan_id: str


class TaskPayload(PlanPayload):
    task: str
    agent: str


class PlanStarted(PlanPayload):
    name: str
    tasks: list[str]


class TaskStarted(TaskPayload):
    attempt: int
    round: int
    """1, then one more for each fix a review asked for."""


class TaskCompleted(TaskPayload):
    attempts: int


class TaskFailed(TaskPayload):
    attempt: int | None
    reason: str
    final: bool
    """True when the task ended in error (retries, reviews or approval spent); else a retry
    follows."""


class TaskSkipped(PlanPayload):
    task: str
    because: str
    """The dependency that did not succeed."""


class TaskCancelled(PlanPayload):
    task: str
    reason: str


class ReviewRequested(TaskPayload):
    kind: Literal["review", "verify"]
    round: int


class ReviewCompleted(TaskPayload):
    round: int
    stage: str | None
    passed: bool
    reviewers: list[str]


class VerificationCompleted(TaskPayload):
    round: int
    passed: bool
    verifiers: list[str]


class ApprovalRequested(TaskPayload):
    approvers: list[str]
    """Who may decide; empty: anyone who may update the plan."""


class DecisionMade(Payload):
    kind: Literal["approval", "vote"]
    subject: str
    """`<plan_id>/<task>` for an approval, the vote id for a vote."""
    outcome: str
    """`approved` or `rejected` for an approval; the vote's status (`decided`, `rejected`,
    `no_quorum`) for a vote."""
    by: str
    """Who decided: the approver (`timeout` when nobody did in time), or `voters`."""
    reason: str


class PlanCompleted(PlanPayload):
    status: str
    summary: str


class AgentHandoff(PlanPayload):
    from_task: str
    from_agent: str
    to_task: str
    to_agent: str


class DependencyResolved(PlanPayload):
    task: str
    dependencies: list[str]


class VotePayload(Payload):
    vote_id: str


class VoteOpened(VotePayload):
    voters: list[str]
    needed: int


class BallotCast(VotePayload):
    voter: str
    choice: str
    reason: str


class EventDeadLettered(Payload):
    entry_id: str
    failure_type: str
    message: str
    target_workflow: str | None
    target_agent: str | None
    parked_event_id: str
    causation_depth: int | None


class CompensationFailed(Payload):
    step: str
    error: str


class StepOutcome(Payload):
    """A saga step's event: the agent's result as it answered (any fields), or `error`."""

    model_config = ConfigDict(extra="allow")

    error: dict[str, str] | None = None


class Aggregation(Payload):
    aggregator_id: str
    inputs: dict[str, object]
    """The joined events' payloads by slot."""
    missing: list[dict[str, object]]
    needed: int


@dataclass(frozen=True)
class EventKind:
    """One row of the taxonomy."""

    name: str
    """The event type."""
    category: Category
    publishers: tuple[str, ...]
    payload: type[Payload]
    cause: str
    """What causes it: the event its `causation_id` names."""
    named_by_spec: bool = False
    """The spec names the type (`name` says which fields name it)."""


PLAN, VOTE = "plan", "vote"

TAXONOMY: tuple[EventKind, ...] = (
    EventKind("PlanStarted", Category.DOMAIN, (PLAN,), PlanStarted, "the plan's start (no cause)"),
    EventKind(
        "DependencyResolved",
        Category.INTEGRATION,
        (PLAN,),
        DependencyResolved,
        "the `TaskCompleted` of the task's last dependency to succeed",
    ),
    EventKind(
        "AgentHandoff",
        Category.INTEGRATION,
        (PLAN,),
        AgentHandoff,
        "the `TaskCompleted` of a dependency whose result the task's agent receives",
    ),
    EventKind(
        "ApprovalRequested",
        Category.DOMAIN,
        (PLAN,),
        ApprovalRequested,
        "`DependencyResolved` (`PlanStarted` for a root task): approval comes before the run",
    ),
    EventKind(
        "DecisionMade",
        Category.DOMAIN,
        (PLAN, VOTE),
        DecisionMade,
        "an approval: its `ApprovalRequested`; a vote: the ballot that decided it "
        "(`VoteOpened` at the deadline or on cancel)",
    ),
    EventKind(
        "TaskStarted",
        Category.DOMAIN,
        (PLAN,),
        TaskStarted,
        "`DependencyResolved`, `DecisionMade` or `PlanStarted`; a retry: its `TaskFailed`; "
        "a fix: the failing `ReviewCompleted`",
    ),
    EventKind(
        "TaskFailed", Category.DOMAIN, (PLAN,), TaskFailed, "the task's latest event (its attempt)"
    ),
    EventKind(
        "ReviewRequested",
        Category.DOMAIN,
        (PLAN,),
        ReviewRequested,
        "the `TaskStarted` of the run whose result is reviewed",
    ),
    EventKind(
        "ReviewCompleted", Category.DOMAIN, (PLAN,), ReviewCompleted, "its `ReviewRequested`"
    ),
    EventKind(
        "VerificationCompleted",
        Category.DOMAIN,
        (PLAN,),
        VerificationCompleted,
        "its `ReviewRequested`",
    ),
    EventKind(
        "TaskCompleted",
        Category.DOMAIN,
        (PLAN,),
        TaskCompleted,
        "the task's latest event: its `TaskStarted`, or the review round that passed",
    ),
    EventKind(
        "TaskSkipped",
        Category.DOMAIN,
        (PLAN,),
        TaskSkipped,
        "the `TaskFailed` (or `TaskSkipped`) of the dependency that did not succeed",
    ),
    EventKind("TaskCancelled", Category.DOMAIN, (PLAN,), TaskCancelled, "the task's latest event"),
    EventKind(
        "PlanCompleted", Category.DOMAIN, (PLAN,), PlanCompleted, "the plan's last task event"
    ),
    EventKind(
        "VoteOpened",
        Category.DOMAIN,
        (VOTE,),
        VoteOpened,
        "what the vote was started for: a plan task's `TaskStarted`, a chain's trigger",
    ),
    EventKind("BallotCast", Category.DOMAIN, (VOTE,), BallotCast, "`VoteOpened`"),
    EventKind(
        "a saga step's `on_success`, `on_failure`, `on_compensated`",
        Category.DOMAIN,
        ("saga",),
        StepOutcome,
        "the saga's previous event",
        named_by_spec=True,
    ),
    EventKind(
        "an aggregator's `on_complete`, `on_timeout`",
        Category.INTEGRATION,
        ("aggregator",),
        Aggregation,
        "the last event it joined",
        named_by_spec=True,
    ),
    EventKind(
        "EventDeadLettered",
        Category.SYSTEM,
        ("dead-letter queue",),
        EventDeadLettered,
        "the parked event",
    ),
    EventKind(
        "CompensationFailed",
        Category.SYSTEM,
        ("saga",),
        CompensationFailed,
        "the saga's latest event",
    ),
)
"""Every event type the coordinator publishes under a name of its own, in the order a plan
meets them."""

BY_TYPE = {kind.name: kind for kind in TAXONOMY if not kind.named_by_spec}

ANNOUNCEMENTS = frozenset(kind.name for kind in TAXONOMY if set(kind.publishers) <= {PLAN, VOTE})
"""The lifecycle plans and votes announce: subscribable, never parked, depth-free among
themselves."""

OPENERS = frozenset({"PlanStarted", "VoteOpened"})
"""Announcements that open a run: one causation level deeper than their cause."""

ANNOUNCING_SOURCES = ("/plan/", "/vote/")
"""The sources plans and votes announce from (`/plan/<plan_id>`, `/vote/<vote_id>`)."""


def is_announcement(envelope: EventEnvelope) -> bool:
    """A plan's or vote's lifecycle event, by type and source (an agent publishes from
    `/<agent>`, never from a pattern's source)."""
    header = envelope.event
    return header.type in ANNOUNCEMENTS and header.source.startswith(ANNOUNCING_SOURCES)


def announcement_depth(envelope: EventEnvelope, cause_depth: int | None) -> int:
    """An announcement's causation depth in a chain: its cause's, one more for an opener, 0
    when its cause is unknown there."""
    if cause_depth is None:
        return 0
    return cause_depth + (envelope.event.type in OPENERS)
