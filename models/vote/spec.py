"""Consensus votes (threshold 0.67 by default): a proposal goes to N voter agents at once, each
answers approve or reject with a reason; the spec, the record, and `VoteModel`, which decides.

The outcome, decided as soon as it is certain:
- `decided` when the approvals reach the quorum (`threshold` of the voters, counted as the
  aggregator counts a share, `share_needed`: 0.67 of 3 is 2; or `at_least`);
- `rejected` when the rejections alone leave too few voters to reach it;
- `no_quorum` when abstentions (with any rejections) leave too few, or at the deadline.

A voter that fails, times out, or answers anything but `{"approve": bool, "reason": str}`
abstains, with the reason in its ballot: the vote tolerates up to a third of the voters faulty,
and with 0.67 of 3 one voter may abstain while the other two still decide."""

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, model_validator

from coord.models.events.envelope import EventEnvelope
from coord.models.events.joins import share_needed
from coord.models.events.rewind import CopyPast
from coord.models.events.taxonomy import BallotCast, DecisionMade, Payload, VoteOpened
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.config import SCHEDULE_TO_START_DEFAULT, AgentConfig
from coord.models.mesh.retry import RetryConfig
from coord.models.wire.contract import (
    FailureType,
    Pattern,
    SearchValues,
    coordination_attributes,
    vote_workflow_id,
)
from coord.models.wire.durations import Duration
from coord.models.wire.specs import (
    IDENTIFIER_OR_NONE,
    MAX_ITEMS,
    MAX_NAME,
    SCOPED_IDENTIFIER,
    JsonObject,
    parse_model,
)

DEFAULT_THRESHOLD = 0.67
"""A Byzantine-tolerant quorum: a proposal passes with two thirds of the voters, up to a
third of them faulty."""
DEFAULT_DEADLINE = timedelta(minutes=5)
DEFAULT_VOTER_TIMEOUT = timedelta(minutes=1)
"""The time one voter has to answer, its retries included."""
VOTE_REQUESTED = "VoteRequested"
"""The event type each voter's run receives, with the proposal as its payload."""
MAX_REASON = 1024
"""Characters of a voter's reason kept in its ballot."""

VoterName = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]


class VoteRules(BaseModel):
    """Who votes and what decides: a vote's own spec, and the `vote:` block of a plan task or a
    chain subscription (whose proposal comes from the task or the event)."""

    model_config = ConfigDict(extra="forbid")

    voters: list[VoterName] = Field(min_length=1, max_length=MAX_ITEMS)
    threshold: float | None = Field(default=None, gt=0, le=1)
    """The share of the voters whose approval decides (0.67 when neither it nor `at_least`)."""
    at_least: int | None = Field(default=None, ge=1)
    """The number of approvals that decides, instead of a share."""
    deadline: Duration = DEFAULT_DEADLINE
    timeout: Duration = DEFAULT_VOTER_TIMEOUT
    heartbeat_timeout: Duration | None = None
    """A voter that sends no heartbeat for this long is timed out (and abstains) before its
    `timeout`: how a hung voter is told from a slow one."""
    schedule_to_start_timeout: Duration = SCHEDULE_TO_START_DEFAULT
    """How long a voter's run waits for a worker serving its agent; then it abstains
    (`agent_unavailable`)."""
    retry: RetryConfig = Field(default_factory=RetryConfig)

    @model_validator(mode="after")
    def _countable(self) -> Self:
        repeated = sorted({v for v in self.voters if self.voters.count(v) > 1})
        if repeated:
            raise ValueError(f"voters: each voter votes once, repeated: {', '.join(repeated)}")
        if self.at_least is not None and self.threshold is not None:
            raise ValueError("threshold: give at most one of at_least and threshold")
        if self.at_least is not None and self.at_least > len(self.voters):
            voters = len(self.voters)
            raise ValueError(f"at_least: {self.at_least} is more than the {voters} voters")
        return self

    @property
    def needed(self) -> int:
        """The approvals that decide the vote."""
        if self.at_least is not None:
            return self.at_least
        return share_needed(self.threshold or DEFAULT_THRESHOLD, len(self.voters))


class VoteSpec(VoteRules):
    vote_id: str = Field(pattern=SCOPED_IDENTIFIER, max_length=MAX_NAME)
    """An identifier; a plan task's vote is `<plan_id>~<task_id>` (`PlanSpec.vote_id`)."""
    description: str = ""
    correlation_id: str = Field(default="", pattern=IDENTIFIER_OR_NONE, max_length=MAX_NAME)
    causation_id: str | None = Field(default=None, max_length=MAX_NAME)
    """The event the vote was started for (a plan task's `TaskStarted`, a chain's trigger): the
    cause of its `VoteOpened`."""
    proposal: JsonObject
    """What is voted on: each voter's run receives it as its event's payload."""
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """Agents declared inline, beside the worker's own (`coord worker --agents`)."""
    rewind: "VoteRewind | None" = None
    """Set on a rewound copy (`coord rewind`): the ballots it takes from its original."""

    @model_validator(mode="after")
    def _correlated(self) -> Self:
        self.correlation_id = self.correlation_id or self.vote_id
        if self.rewind is not None:
            strangers = [b.voter for b in self.rewind.ballots if b.voter not in self.voters]
            if strangers:
                raise ValueError(f"rewind.ballots: {strangers[0]!r} is no voter of the vote")
        return self

    @classmethod
    def of(
        cls,
        vote_id: str,
        rules: VoteRules,
        proposal: Mapping[str, Any],
        *,
        correlation_id: str,
        agents: Mapping[str, AgentConfig],
        causation_id: str | None = None,
    ) -> "VoteSpec":
        """The spec of a vote a plan task or a chain subscription holds (`rules`) on
        `proposal`, with the inline declarations of its voters; a proposal that is not a
        spec's (nested too deep) raises SpecError naming it."""
        declared = {voter: agents[voter] for voter in rules.voters if voter in agents}
        fields = {
            **rules.model_dump(),
            "vote_id": vote_id,
            "correlation_id": correlation_id,
            "causation_id": causation_id,
            "proposal": proposal,
            "agents": declared,
        }
        return parse_model(cls, fields, "vote")

    @property
    def workflow_id(self) -> str:
        return vote_workflow_id(self.vote_id)

    def agents_named(self) -> list[tuple[str, str]]:
        """Every agent the vote runs, with where it is named: what a pre-start check checks."""
        return [(f"voters[{i}]", voter) for i, voter in enumerate(self.voters)]


class Choice(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    ABSTAIN = "abstain"


class Ballot(BaseModel):
    voter: str
    choice: Choice
    reason: str = ""
    at: datetime
    counted: bool = True
    """False for an answer that arrived after the outcome was known (its run was not cancelled
    in time): kept in the record, not counted. One arriving in the same moment (workflow task) as
    the deciding ballot counts; no later ballot can change an outcome, only complete the tally."""


class VoteRewind(CopyPast):
    """A rewound copy's past: the ballots its original's voters cast before the rewind point
    (counted again, never asked of their agents), the id of its original's `VoteOpened` (the
    cause of the copy's later events) and the time its deadline had left then."""

    ballots: list[Ballot] = Field(default_factory=list, max_length=MAX_ITEMS)
    opened: str | None = Field(default=None, max_length=MAX_NAME)
    time_left: Duration | None = None
    """None: the copy waits its whole `deadline`, as a new vote would."""


VoteSpec.model_rebuild()


class VoterAnswer(BaseModel):
    """What a voter's agent answers; other keys are ignored."""

    approve: StrictBool
    reason: StrictStr = ""


class VoteStatus(StrEnum):
    VOTING = "voting"
    DECIDED = "decided"
    REJECTED = "rejected"
    NO_QUORUM = "no_quorum"
    CANCELLED = "cancelled"
    FAILED = "failed"
    """The run failed: its spec did not validate (`invalid_spec`)."""


class Tally(NamedTuple):
    approve: int
    reject: int
    abstain: int


class VoteState(BaseModel):
    """The vote's record: every ballot, and the voters whose runs were cancelled unanswered."""

    vote_id: str
    correlation_id: str = ""
    status: VoteStatus = VoteStatus.VOTING
    proposal: dict[str, Any] = Field(default_factory=dict)
    voters: list[str] = Field(default_factory=list)
    needed: int = 1
    deadline: datetime | None = None
    ballots: list[Ballot] = Field(default_factory=list)
    cancelled: list[str] = Field(default_factory=list)
    """Voters whose runs were cancelled before they answered: the outcome was known, or the vote
    itself was cancelled."""
    ended_at: datetime | None = None
    summary: str = ""
    events: list[TimelineEntry] = Field(default_factory=list)
    """The events the vote announced, as rows of the correlation table."""
    rewind_of: str | None = None
    """A rewound copy's original and event (`CoordRewindOf`): `<correlation>@<event id>`."""

    def tally(self) -> Tally:
        """The counted ballots by choice."""
        counted = [ballot.choice for ballot in self.ballots if ballot.counted]
        return Tally(*(counted.count(choice) for choice in Choice))

    def pending(self) -> list[str]:
        """Voters whose run has neither answered nor been cancelled."""
        done = {ballot.voter for ballot in self.ballots} | set(self.cancelled)
        return [voter for voter in self.voters if voter not in done]

    def ballot_of(self, voter: str) -> Ballot | None:
        return next((ballot for ballot in self.ballots if ballot.voter == voter), None)

    def failure(self) -> tuple[FailureType, str] | None:
        """None when decided; else how a plan task or chain subscription holding the vote
        reports it: `vote_rejected` or `no_quorum`, with how the ballots fell."""
        if self.status == VoteStatus.DECIDED:
            return None
        kind = (
            FailureType.VOTE_REJECTED
            if self.status == VoteStatus.REJECTED
            else FailureType.NO_QUORUM
        )
        return kind, self.outcome_line()

    def outcome_line(self) -> str:
        """How the vote ended, in words: `vote decided: 2 approve, 0 reject, ...`."""
        return f"vote {self.status.value}: {self.summary}"

    def search_attributes(self) -> SearchValues:
        """What the run is found by: set at start (the first record), upserted on every change."""
        key = self.correlation_id or self.vote_id
        return coordination_attributes(
            Pattern.VOTE, correlation_id=key, status=self.status, rewind_of=self.rewind_of
        )


def summary_line(state: VoteState) -> str:
    """`2 approve, 1 reject, 0 abstain of 3 voters; 2 approvals needed`."""
    tally = state.tally()
    return (
        f"{tally.approve} approve, {tally.reject} reject, {tally.abstain} abstain of "
        f"{len(state.voters)} voters; {state.needed} approval{'s' if state.needed != 1 else ''}"
        " needed"
    )


class VoteModel:
    """The vote's decisions, without Temporal: the workflow reports each voter's answer or
    failure, the deadline and a cancel; the model keeps the record and says when it is over."""

    def __init__(self, spec: VoteSpec, state: VoteState) -> None:
        self.spec = spec
        self.state = state
        self._sink: Callable[[EventEnvelope], None] | None = None
        self._opened: str | None = None

    def announce_to(self, sink: Callable[[EventEnvelope], None]) -> None:
        """From now on the vote announces its lifecycle to `sink` (the event taxonomy), starting
        with `VoteOpened`, caused by what the vote was started for."""
        self._sink = sink
        opened = VoteOpened(
            vote_id=self.spec.vote_id, voters=self.state.voters, needed=self.state.needed
        )
        self._opened = self._announce(opened, self.spec.causation_id)

    @classmethod
    def begin(cls, spec: VoteSpec, started_at: datetime) -> "VoteModel":
        state = VoteState(
            vote_id=spec.vote_id,
            correlation_id=spec.correlation_id,
            proposal=spec.proposal,
            voters=list(spec.voters),
            needed=spec.needed,
            deadline=started_at + spec.deadline,
            rewind_of=spec.rewind.of.search_value() if spec.rewind else None,
        )
        state.summary = summary_line(state)
        return cls(spec, state)

    def take_past(self, started_at: datetime) -> None:
        """A rewound copy starts from its original as it stood just before the point: the
        ballots cast then are counted (and decide, should they), announced no more (the copy's
        correlation holds them), and its later events are caused by the original's opening."""
        past = self.spec.rewind
        if past is None:
            return
        self._opened = past.opened
        if past.time_left is not None:
            self.state.deadline = started_at + past.time_left
        for ballot in past.ballots:
            self.state.ballots.append(ballot.model_copy(update={"counted": True}))
        self.state.summary = summary_line(self.state)
        if past.ballots:
            self._decide(past.ballots[-1].at, self._opened)

    def start_announcing(self, sink: Callable[[EventEnvelope], None]) -> None:
        """Announce from now on; a rewound copy's opening is its original's, in its past."""
        if self.spec.rewind is None:
            self.announce_to(sink)
        else:
            self._sink = sink

    def to_ask(self) -> list[str]:
        """The voters whose agents are asked: those without a ballot yet."""
        return [voter for voter in self.spec.voters if self.state.ballot_of(voter) is None]

    @property
    def over(self) -> bool:
        return self.state.status != VoteStatus.VOTING

    def answered(self, voter: str, data: Mapping[str, Any], at: datetime) -> Ballot:
        """A voter's agent answered: approve or reject, or abstain when the answer is not one."""
        try:
            answer = parse_model(VoterAnswer, data, "answer")
        except ValueError as error:
            expected = 'expected {"approve": true|false, "reason": "..."}'
            return self._cast(voter, Choice.ABSTAIN, f"{error}; {expected}", at)
        choice = Choice.APPROVE if answer.approve else Choice.REJECT
        return self._cast(voter, choice, answer.reason, at)

    def failed(self, voter: str, failure_type: str, message: str, at: datetime) -> Ballot:
        """A voter's run failed for good (or timed out): it abstains, saying why."""
        return self._cast(voter, Choice.ABSTAIN, f"{failure_type}: {message}", at)

    def run_cancelled(self, voter: str) -> None:
        """A voter's run was cancelled before it answered (the outcome known, or the vote
        cancelled). Listed in the voters' order, whatever order the cancels landed in."""
        if voter not in self.state.cancelled and self.state.ballot_of(voter) is None:
            cancelled = {*self.state.cancelled, voter}
            self.state.cancelled = [name for name in self.state.voters if name in cancelled]

    def deadline_passed(self, at: datetime) -> None:
        """The voters still out abstain, and without a decision there is no quorum."""
        if self.over:
            return
        for voter in self.state.pending():
            late = Ballot(voter=voter, choice=Choice.ABSTAIN, reason="no answer in time", at=at)
            self.state.ballots.append(late)
            self._ballot_cast(late)
        self._end(VoteStatus.NO_QUORUM, at)

    def cancel(self, at: datetime) -> None:
        if not self.over:
            self._end(VoteStatus.CANCELLED, at)

    def _cast(self, voter: str, choice: Choice, reason: str, at: datetime) -> Ballot:
        """Record the ballot; decide when it is the first to make the outcome certain. Once
        there is an outcome it stands: a ballot of the same moment only completes the tally. A
        voter votes once: one that abstained at the deadline keeps that ballot when its run,
        cancelled then, answers anyway."""
        earlier = self.state.ballot_of(voter) if self.over else None
        if earlier is not None:
            return earlier
        ballot = Ballot(voter=voter, choice=choice, reason=reason[:MAX_REASON], at=at)
        ballot.counted = not self.over or at == self.state.ended_at
        self.state.ballots.append(ballot)
        self.state.summary = summary_line(self.state)
        cast = self._ballot_cast(ballot)
        if not self.over:
            self._decide(at, cast)
        return ballot

    def _decide(self, at: datetime, cause: str | None) -> None:
        tally, voters, needed = self.state.tally(), len(self.state.voters), self.state.needed
        if tally.approve >= needed:
            self._end(VoteStatus.DECIDED, at, cause)
        elif tally.reject > voters - needed:
            self._end(VoteStatus.REJECTED, at, cause)
        elif tally.approve + len(self.state.pending()) < needed:
            self._end(VoteStatus.NO_QUORUM, at, cause)

    def _end(self, status: VoteStatus, at: datetime, cause: str | None = None) -> None:
        """The outcome, announced as `DecisionMade`, caused by the ballot that made it certain
        (`VoteOpened` at the deadline or on a cancel)."""
        self.state.status = status
        self.state.ended_at = at
        self.state.summary = summary_line(self.state)
        decided = DecisionMade(
            kind="vote",
            subject=self.spec.vote_id,
            outcome=status.value,
            by="voters",
            reason=self.state.summary,
        )
        self._announce(decided, cause or self._opened)

    def _ballot_cast(self, ballot: Ballot) -> str | None:
        cast = BallotCast(
            vote_id=self.spec.vote_id,
            voter=ballot.voter,
            choice=ballot.choice.value,
            reason=ballot.reason,
        )
        return self._announce(cast, self._opened)

    def _announce(self, payload: Payload, cause: str | None) -> str | None:
        """The event to the sink; its id (None when the vote does not announce)."""
        if self._sink is None:
            return None
        envelope = EventEnvelope.new(
            type(payload).__name__,
            f"/vote/{self.spec.vote_id}",
            payload=payload.model_dump(mode="json"),
            correlation_id=self.spec.correlation_id,
            causation_id=cause,
        )
        self._sink(envelope)
        row = TimelineEntry.recording(
            envelope, seq=len(self.state.events) + 1, correlation_id=self.spec.correlation_id
        )
        self.state.events.append(row)
        return envelope.event.id

    def details(self) -> str:
        """The vote as the Temporal UI shows it in 'current details' (markdown)."""
        state = self.state
        lines = [f"**Status:** {state.status.value}: {state.summary}"]
        if state.deadline is not None and not self.over:
            lines.append(f"**Deadline:** {state.deadline:%Y-%m-%d %H:%M:%S} UTC")
        for ballot in state.ballots:
            late = "" if ballot.counted else " (after the outcome, not counted)"
            reason = f": {ballot.reason}" if ballot.reason else ""
            lines.append(f"- **{ballot.voter}** {ballot.choice.value}{late}{reason}")
        if state.cancelled:
            lines.append(f"**Cancelled unanswered:** {', '.join(state.cancelled)}")
        return "\n\n".join(lines)
