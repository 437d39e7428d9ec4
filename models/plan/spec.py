"""Coordinator mode (seeds 003 and 004): a plan is a dependency graph of agent tasks run under a
worker cap, with review gates, dual verification and human approval; and its record.

The spec is checked whole before anything runs (unknown dependencies, repeated ids, cycles with
their path), so a plan that starts can always finish. The record follows each task through the
plan's state machine and is the final report once the plan ends."""

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, NamedTuple, Self, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from coord.models.events.envelope import Priority
from coord.models.events.rewind import CopyPast
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.assignment import Assignment, Routed
from coord.models.mesh.config import SCHEDULE_TO_START_DEFAULT, AgentConfig
from coord.models.mesh.lifecycle import RunFailure
from coord.models.mesh.results import MAX_PROGRESS, ResultReference
from coord.models.mesh.retry import RetryConfig
from coord.models.mesh.runs import RunDetour
from coord.models.mesh.tiers import TaskKind
from coord.models.mesh.usage import TokenBudget, TokenUsage
from coord.models.plan.team import MessageLimits, TeamPost
from coord.models.vote.spec import VoteRules
from coord.models.wire.contract import (
    Pattern,
    SearchValues,
    coordination_attributes,
    plan_workflow_id,
    scoped_id,
)
from coord.models.wire.durations import Duration
from coord.models.wire.graphs import find_cycle
from coord.models.wire.specs import IDENTIFIER, IDENTIFIER_OR_NONE, MAX_ITEMS, MAX_NAME, JsonObject

DEFAULT_MAX_WORKERS = 5
"""A coordinator runs at most five workers at once."""
DEFAULT_TASK_TIMEOUT = timedelta(seconds=300)
"""A worker times out after 300 seconds by default."""
DEFAULT_PROGRESS_INTERVAL = timedelta(seconds=30)
"""The coordinator looks at its workers' progress every 30 seconds (plans started
before the reader looked only when asked)."""
DEFAULT_FIX_BUDGET = 3
MAX_NOTES = 4096
"""Characters of a reviewer's notes kept in the record and passed to the fix round."""
"""Characters of a progress summary kept (three to five words)."""
DEFAULT_RESULT_LIMIT = 16 * 1024
"""JSON bytes of a task's result kept in history and the record; larger ones by reference."""


def relative_path(path: str) -> str:
    """`path` when it stays under whatever root it is joined to: relative, no `..`. Whoever
    starts a plan names its scratchpad; the worker alone decides the root it lands under."""
    if PurePosixPath(path).is_absolute() or "\\" in path or "\0" in path:
        raise ValueError(
            f"{path!r} must be a relative path, parts separated by `/` (it lands under the "
            "worker's scratchpad root)"
        )
    if ".." in PurePosixPath(path).parts:
        raise ValueError(f"{path!r} must not contain `..`; it stays under the scratchpad root")
    return path


class Dispatch(StrEnum):
    """Where a plan sends its agent runs (`PlanSpec.dispatch`)."""

    AGENT_QUEUES = "agent_queues"
    COORDINATOR = "coordinator"


class ReviewStage(StrEnum):
    """The two-stage review, in its order: the spec first, then quality."""

    SPEC_COMPLIANCE = "spec_compliance"
    CODE_QUALITY = "code_quality"


class ReviewGate(BaseModel):
    """After the task's agent succeeds, `reviewer` reviews the result stage by stage; a failing
    stage sends the task back to its agent with the notes, then that stage is reviewed again.
    Each fix spends one of `fix_budget`."""

    model_config = ConfigDict(extra="forbid")

    stages: list[ReviewStage] = Field(
        default_factory=lambda: [ReviewStage.SPEC_COMPLIANCE, ReviewStage.CODE_QUALITY],
        min_length=1,
    )
    reviewer: str = Field(min_length=1, max_length=MAX_NAME)
    fix_budget: int = Field(default=DEFAULT_FIX_BUDGET, ge=0, le=MAX_ITEMS)

    @model_validator(mode="after")
    def _seed_order(self) -> Self:
        order = list(ReviewStage)
        if len(set(self.stages)) != len(self.stages):
            raise ValueError("stages: a stage is named twice")
        if self.stages != sorted(self.stages, key=order.index):
            raise ValueError("stages: spec_compliance is reviewed before code_quality, never after")
        return self


class DualVerification(BaseModel):
    """The Santa method: independent verifiers, run in parallel on the same result; the
    task passes only when every one passes, else it is fixed with all their notes."""

    model_config = ConfigDict(extra="forbid")

    verifiers: list[str] = Field(min_length=2, max_length=5)
    fix_budget: int = Field(default=DEFAULT_FIX_BUDGET, ge=0, le=MAX_ITEMS)

    @model_validator(mode="after")
    def _independent(self) -> Self:
        if len(set(self.verifiers)) != len(self.verifiers):
            raise ValueError("verifiers: each verifier must be a different agent")
        return self


TIMEOUT_DECIDER = "timeout"
"""Who rejected a task nobody approved in time (`ApprovalDecision.by`): the timer's name alone,
never a caller's."""
MAX_REFUSED = 20
"""Refused decisions a task's record keeps (the latest)."""


def _not_the_timer(name: str | None) -> str | None:
    if name == TIMEOUT_DECIDER:
        raise ValueError(f"{name!r} is reserved for the approval's timer")
    return name


Decider = Annotated[str, Field(min_length=1, max_length=MAX_NAME), AfterValidator(_not_the_timer)]
"""Who decides: a Temporal client's identity (`coord` sends `$COORD_IDENTITY`, else user@host;
the Temporal CLI its `--identity`)."""


class ApprovalGate(BaseModel):
    """The task waits, before it runs, for a person's approve or reject; a timeout rejects.
    `approvers` names the client identities that may decide (anyone, when not given)."""

    model_config = ConfigDict(extra="forbid")

    required: bool = True
    timeout: Duration = timedelta(days=1)
    approvers: list[Decider] | None = Field(default=None, min_length=1, max_length=MAX_ITEMS)


DEFAULT_MEMBER_MEMORY = 10
"""Handled messages a long-lived member remembers (the latest), passed to its next run."""
MAX_MEMORY = 100
"""The most a member may remember: its memory crosses each continue-as-new whole."""


class TeamMember(BaseModel):
    """Coordination by a team: a named member of the team with a role, played by an agent. Members
    message each other (`coord.models.plan.team`) within their `messages` limits. A per-task
    member does the tasks that name it and gets its messages in its next run; a `long_lived`
    one is a workflow of its own for the plan's lifetime, running its agent on each message it
    receives, in order, with a memory of the latest `memory` it handled."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(default="", max_length=MAX_NAME)
    agent: str = Field(min_length=1, max_length=MAX_NAME)
    messages: MessageLimits = Field(default_factory=MessageLimits)
    long_lived: bool = False
    memory: int = Field(default=DEFAULT_MEMBER_MEMORY, ge=0, le=MAX_MEMORY)


class PlannerSpec(BaseModel):
    """The agent that writes the plan's task graph from its `goal` before anything runs
    (`coord.models.plan.planner`): its answer is validated as a written spec is."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=MAX_NAME)
    timeout: Duration = DEFAULT_TASK_TIMEOUT
    retry: RetryConfig = Field(default_factory=RetryConfig)
    choose_level: bool = False
    """Ask the planner which level of coordination fits the goal (`direct`, `single`, `team`,
    `coordinator`) besides the graph: what `coord run GOAL --planner AGENT` asks."""

    @model_validator(mode="before")
    @classmethod
    def _agent_alone(cls, value: Any) -> Any:
        """`planner: NAME` is short for `planner: {agent: NAME}`."""
        return {"agent": value} if isinstance(value, str) else value


class PlanTask(Routed):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME)
    agent: str = Field(default="", max_length=MAX_NAME)
    member: str | None = Field(default=None, max_length=MAX_NAME)
    """A team member doing the task (its agent is the member's); instead of `agent`."""
    input: JsonObject = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    timeout: Duration = DEFAULT_TASK_TIMEOUT
    heartbeat_timeout: Duration | None = None
    schedule_to_start_timeout: Duration = SCHEDULE_TO_START_DEFAULT
    """How long a run waits for a worker serving its agent before it fails `agent_unavailable`
    (not retried: a retry would wait on the same queue)."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    priority: Priority = Priority.NORMAL
    summary: str = Field(default="", max_length=MAX_NAME)
    """What the task does, in a few words: the activity summary shown in the UI."""
    kind: TaskKind | None = None
    """`mechanical`, `integration` or `review`: the model tier its run asks of an `llm` agent
    that names no model of its own (`TASK_KIND_EFFORT`: quick, normal, thorough)."""
    review: ReviewGate | None = None
    verify: DualVerification | None = None
    approval: ApprovalGate | None = None
    vote: VoteRules | None = None
    """A consensus vote instead of an agent's run: the task's input and its dependencies'
    results (under `results`) are the proposal; decided is success, rejected or no quorum an
    error."""
    wait_for_message: Duration | None = None
    """A member's task waits, once its dependencies have succeeded and before it takes a slot,
    until a message to its member arrives (at most this long; none: the task ends `error`,
    `no_message`). Its run gets the message in its context."""

    @model_validator(mode="after")
    def _one_doer(self) -> Self:
        problem = self.doer_problem(
            self.agent, member=self.member is not None, vote=self.vote is not None
        )
        if problem:
            raise ValueError(problem)
        if self.vote is not None:
            _check_vote_task(self)
        if len(set(self.depends_on)) != len(self.depends_on):
            raise ValueError("depends_on: a dependency is named twice")
        return self

    def agents_named(self, where: str) -> list[tuple[str, str]]:
        """Every agent the task runs, each with where it is named (`where`: the task's own
        place in its plan)."""
        named = []
        if self.vote is not None:
            named += [(f"{where}.vote.voters", voter) for voter in self.vote.voters]
        elif self.member is None and self.route is None:
            named.append((f"{where}.agent", self.agent))
        if self.review is not None:
            named.append((f"{where}.review.reviewer", self.review.reviewer))
        if self.verify is not None:
            named += [(f"{where}.verify.verifiers", v) for v in self.verify.verifiers]
        return named


VOTE_RESULTS_KEY = "results"
"""Where a vote task's proposal carries its dependencies' results, keyed by task id."""


def _check_vote_task(task: PlanTask) -> None:
    """A vote has no agent to review or to send back with notes; its proposal's `results` are
    its dependencies'."""
    gate = "review" if task.review is not None else "verify" if task.verify is not None else None
    if gate:
        raise ValueError(f"{gate}: a vote task has no agent result to {gate}; drop `{gate}`")
    if task.depends_on and VOTE_RESULTS_KEY in task.input:
        raise ValueError(
            f"input: `{VOTE_RESULTS_KEY}` is where a vote task's proposal carries its "
            "dependencies' results; rename that key"
        )


def _check_reused(spec: "PlanSpec") -> None:
    """A copy reuses tasks of its own graph, and runs at least one."""
    if spec.rewind is None:
        return
    ids = {task.id for task in spec.tasks}
    for index, reused in enumerate(spec.rewind.tasks):
        if reused.id not in ids:
            raise ValueError(f"rewind.tasks[{index}].id: {reused.id!r} is no task of the plan")
    if ids <= {reused.id for reused in spec.rewind.tasks}:
        raise ValueError("rewind.tasks: a rewound copy must leave at least one task to run")


class ReusedTask(BaseModel):
    """A task of the original plan that a rewound copy takes as it succeeded: its result (what
    its dependents' agents are handed), never run again."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(max_length=MAX_NAME)
    result: dict[str, Any] | None = None
    result_ref: ResultReference | None = None


class PlanRewind(CopyPast):
    """A copy's past: the original's tasks that succeeded and are not run again."""

    tasks: list[ReusedTask] = Field(max_length=MAX_ITEMS)


class PlanSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan_id: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME)
    name: str = Field(default="", max_length=MAX_NAME)
    description: str = ""
    correlation_id: str = Field(default="", pattern=IDENTIFIER_OR_NONE, max_length=MAX_NAME)
    max_workers: int = Field(default=DEFAULT_MAX_WORKERS, ge=1, le=MAX_ITEMS)
    fail_fast: bool = False
    """Cancel everything at the first task that fails for good, and fail the plan (typed)."""
    progress_interval: Duration = DEFAULT_PROGRESS_INTERVAL
    """How often plans started before progress was read on demand poll their agents' progress
    (they still do, until they end). A plan started since never polls: whoever asks reads its
    agents' words from the server (`coord plan state`), so its history does not grow with its
    age; the field is still accepted, and ignored."""
    result_limit: int = Field(default=DEFAULT_RESULT_LIMIT, ge=0, le=2**31)
    """A task result larger than this (JSON bytes) goes to the payload store; dependents' agents
    still receive the data, history and the record only its reference."""
    scratchpad: str | None = Field(default=None, max_length=MAX_NAME)
    """A directory, relative to the worker's scratchpad root (the worker decides where plans may
    write), where the plan writes the layout: `<plan_id>/task-plan.md`,
    `worker-results/<task>.json`, `final-report.md`."""
    dispatch: Dispatch = Dispatch.AGENT_QUEUES
    """Where the agent runs (tasks, reviews, verifiers) go. `agent_queues`: each agent's own task
    queue, served by every worker that declares the agent (`coord worker --only`), paced by its
    `rate_limit` and `max_concurrent_per_worker`, failing `agent_unavailable` when no worker
    takes a run. `coordinator`: the plan's own queue, where the worker running the plan takes
    each run with the workflow task that scheduled it (eager: no hop through the server's
    queues, the fast path); every coordinator worker must then serve the plan's agents, and a
    run is paced by `max_workers`, the agent's pool (`max_concurrent`) and its breaker only."""
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """Agents declared inline, beside the worker's own (`coord worker --agents`)."""
    team: dict[str, TeamMember] = Field(default_factory=dict)
    tasks: list[PlanTask] = Field(default_factory=list, max_length=MAX_ITEMS)
    goal: str = Field(default="", max_length=MAX_NOTES)
    """What the planner is asked to plan (with `planner`)."""
    planner: PlannerSpec | None = None
    """An agent that writes `tasks` from `goal` when the plan starts (`tasks` is then left
    out): the planned graph is validated as a written one, recorded, then run."""
    approve_plan: bool | ApprovalGate = False
    """A person approves the planned graph before it runs: each of its first tasks (those that
    depend on none) waits for `coord plan approve`, with this gate (`true`: the default gate)
    unless the planner gave it one."""
    budget: TokenBudget | None = None
    """`{tokens: N}`: the most tokens the plan's runs, reviews and verifications may use
    (`coord.models.mesh.usage`); an `llm` run is refused `budget_exceeded` once none are left."""
    rewind: PlanRewind | None = None
    """Set on a rewound copy (`coord plan rewind`): the tasks it takes from its original."""

    @field_validator("scratchpad")
    @classmethod
    def _scratchpad_stays_under_root(cls, path: str | None) -> str | None:
        return path if path is None else relative_path(path)

    @model_validator(mode="after")
    def _runnable_graph(self) -> Self:
        self.name = self.name or self.plan_id
        self.correlation_id = self.correlation_id or self.plan_id
        _check_planner(self)
        _check_graph(self)
        _check_vote_ids(self)
        _check_team(self)
        _check_reused(self)
        return self

    @property
    def workflow_id(self) -> str:
        return plan_workflow_id(self.plan_id)

    def task(self, task_id: str) -> PlanTask:
        return next(task for task in self.tasks if task.id == task_id)

    def agent_of(self, task: PlanTask) -> str:
        """The agent that does `task`: its own, or its team member's (a vote's, its voters)."""
        if task.vote is not None:
            return f"vote: {', '.join(task.vote.voters)}"
        return self.team[task.member].agent if task.member is not None else task.agent

    def vote_id(self, task: PlanTask, *, scoped: bool = True) -> str:
        """The vote a vote task runs: `<plan_id>~<task_id>` (workflow `vote-<plan_id>~<task_id>`),
        which no other plan's task shares. Runs recorded before (`scoped` False) joined the two
        with `-`, so plan `a-b`'s task `c` and plan `a`'s task `b-c` held the same vote."""
        return scoped_id(self.plan_id, task.id) if scoped else f"{self.plan_id}-{task.id}"

    def shared_scratchpad(self) -> str | None:
        """`<scratchpad>/<plan_id>`, relative to a worker's scratchpad root: where the plan
        writes its files and its agents' runs share theirs."""
        return f"{self.scratchpad}/{self.plan_id}" if self.scratchpad is not None else None

    def message_limits(self) -> dict[str, MessageLimits]:
        """Each member's limits on what its runs send: who may be messaged at all."""
        return {name: member.messages for name, member in self.team.items()}

    def long_lived_members(self) -> list[str]:
        return [name for name, member in self.team.items() if member.long_lived]

    def agents_named(self) -> list[tuple[str, str]]:
        """Every agent the plan runs, with where it is named: what a pre-start check checks."""
        named = [(f"team.{name}.agent", member.agent) for name, member in self.team.items()]
        if self.planner is not None:
            named.append(("planner.agent", self.planner.agent))
        for i, task in enumerate(self.tasks):
            named += task.agents_named(f"tasks[{i}]")
        return named


def _check_planner(spec: PlanSpec) -> None:
    """Tasks come from the spec or from its planner, which needs a goal."""
    if spec.planner is None and not spec.tasks:
        raise ValueError("tasks: a plan needs at least one task, or a `planner` to write them")
    if spec.planner is not None and not spec.goal.strip():
        raise ValueError("goal: a plan with a `planner` needs the goal it plans for")
    if spec.planner is None and spec.approve_plan is not False:
        raise ValueError(
            "approve_plan: only a planned graph is approved as a whole; give written tasks "
            "their own `approval`"
        )


def _check_graph(spec: PlanSpec) -> None:
    """One clear error for the first problem: a repeated id, an unknown member or dependency,
    or a cycle, given as its path (`a -> b -> c -> a`)."""
    seen: set[str] = set()
    for i, task in enumerate(spec.tasks):
        if task.id in seen:
            raise ValueError(f"tasks[{i}].id: {task.id!r} is repeated; task ids must be unique")
        seen.add(task.id)
    for i, task in enumerate(spec.tasks):
        if task.member is not None and task.member not in spec.team:
            raise ValueError(f"tasks[{i}].member: {task.member!r} is not a member of `team`")
        for dependency in task.depends_on:
            if dependency not in seen:
                raise ValueError(
                    f"tasks[{i}].depends_on: {dependency!r} is not a task of this plan"
                )
    cycle = find_cycle({task.id: task.depends_on for task in spec.tasks})
    if cycle:
        path = " -> ".join(reversed(cycle))
        raise ValueError(f"tasks: dependency cycle {path}; a plan must be acyclic")


def _check_team(spec: PlanSpec) -> None:
    """A long-lived member works from its mailbox, never from a task; only a member's task can
    wait for a message to its member. A long-lived member's name is part of its workflow's id."""
    for name in spec.long_lived_members():
        if not re.match(IDENTIFIER, name):
            raise ValueError(
                f"team: {name!r}: a long-lived member's name is an identifier (letters, digits, "
                "`.`, `_`, `:`, `-`)"
            )
    for i, task in enumerate(spec.tasks):
        member = spec.team.get(task.member) if task.member is not None else None
        if member is not None and member.long_lived:
            raise ValueError(
                f"tasks[{i}].member: {task.member!r} is long-lived: it runs on the messages it "
                "receives, not on tasks; send it messages, or make it a per-task member"
            )
        if task.wait_for_message is not None and task.member is None:
            raise ValueError(
                f"tasks[{i}].wait_for_message: only a team member's task waits for a message; "
                "name a `member`"
            )


def _check_vote_ids(spec: PlanSpec) -> None:
    for i, task in enumerate(spec.tasks):
        if task.vote is not None and len(spec.vote_id(task)) > MAX_NAME:
            raise ValueError(
                f"tasks[{i}].id: the vote id `<plan_id>~<task_id>` would be longer than "
                f"{MAX_NAME} characters; shorten the plan id or the task id"
            )


# --- The record -------------------------------------------------------------------------------


class TaskState(StrEnum):
    """A task's state machine (`pending -> ready -> running -> succeeded | failed`, `failed ->
    running` on a retry, `failed -> error` once retries are spent), with what a coordinator adds:
    waiting for a person, being reviewed, and the two ways a task never ends on its own."""

    PENDING = "pending"
    """Waiting for its dependencies."""
    AWAITING_APPROVAL = "awaiting_approval"
    READY = "ready"
    """Runnable, waiting for a worker slot."""
    RUNNING = "running"
    REVIEWING = "reviewing"
    """Its result is with reviewers or verifiers."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """An attempt failed; a retry follows, or `error`."""
    ERROR = "error"
    """Failed for good: retries spent, review budget spent, or approval rejected."""
    SKIPPED = "skipped"
    """Never run, because a task it depends on did not succeed."""
    CANCELLED = "cancelled"


ENDED_TASK_STATES = frozenset(
    {TaskState.SUCCEEDED, TaskState.ERROR, TaskState.SKIPPED, TaskState.CANCELLED}
)


class Transition(BaseModel):
    state: TaskState
    at: datetime
    attempt: int | None = None
    reason: str | None = None


class Verdict(BaseModel):
    """A reviewer's or verifier's answer. Agents answer `{"passed": bool, "notes": "..."}`."""

    reviewer: str
    passed: bool
    notes: str = Field(default="", max_length=MAX_NOTES)


class ReviewRound(BaseModel):
    """One round of a review gate (one stage, one verdict) or of dual verification (every
    verifier's verdict), in the order they ran."""

    kind: Literal["review", "verify"]
    round: int
    stage: ReviewStage | None = None
    verdicts: list[Verdict] = Field(default_factory=list)
    at: datetime

    @property
    def passed(self) -> bool:
        return bool(self.verdicts) and all(verdict.passed for verdict in self.verdicts)


class ApprovalRequest(BaseModel):
    """An approve or reject for a waiting task (the `approve` update), from `coord plan
    approve` or the Temporal CLI. Who decides is the caller's client identity, which the
    server records with the update; `by`, when given, must be that identity (it is checked,
    never taken as is), and `timeout` is the timer's alone."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, max_length=MAX_NAME)
    approve: bool = True
    by: Decider | None = None
    reason: str = Field(default="", max_length=MAX_NOTES)


class ApprovalDecision(BaseModel):
    approved: bool
    by: str
    """Who decided: the caller's client identity (runs recorded before identities were read
    took the request's `by`); `timeout` when nobody did in time."""
    reason: str = ""
    at: datetime


class RefusedDecision(BaseModel):
    """A decision the plan accepted to look at and refused once it knew who asked (not one of
    the task's approvers, say): the task kept waiting."""

    by: str
    """The caller's client identity, as the server recorded it (empty when it could not be
    read)."""
    approve: bool
    at: datetime
    problem: str


class UpdateCaller(BaseModel):
    """Which update's caller to look up in a run's history (`update_caller`)."""

    workflow_id: str
    run_id: str
    update_id: str


"""The key of an `inputs` value that is a ResultReference."""


class TaskError(BaseModel):
    """Why a task ended in error, as its record shows it: the failure type (the contract's
    taxonomy) and the words of whoever failed it (its agent, a reviewer, a person)."""

    type: str
    message: str

    @classmethod
    def of(cls, failure: RunFailure) -> "TaskError":
        """A run's failure for good as its task's error (its attempts are in the task's
        transitions)."""
        return cls(type=failure.type, message=failure.message)


class TaskRecord(BaseModel):
    id: str
    agent: str
    summary: str = ""
    state: TaskState = TaskState.PENDING
    attempts: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    result: dict[str, Any] | None = None
    result_ref: ResultReference | None = None
    error: TaskError | None = None
    skipped_because: str | None = None
    """The dependency whose failure skipped this task."""
    progress: str | None = Field(default=None, max_length=MAX_PROGRESS)
    """The agent's latest progress summary (its activity's heartbeat details)."""
    progress_at: datetime | None = None
    fixes: int = 0
    reviews: list[ReviewRound] = Field(default_factory=list)
    approval: ApprovalDecision | None = None
    refused: list[RefusedDecision] = Field(default_factory=list, max_length=MAX_REFUSED)
    """Decisions refused once their caller was known (the latest `MAX_REFUSED`)."""
    assignment: Assignment | None = None
    """For a task naming capabilities: the agent picked (then `agent`), with the bids."""
    detours: list[RunDetour] = Field(default_factory=list)
    """Its runs that waited for their agent (breaker open, pool full) or went elsewhere."""
    ended_as: str | None = None
    """How it ended, in words, where its result is a record of its own (a vote's)."""
    transitions: list[Transition] = Field(default_factory=list)

    @property
    def duration(self) -> timedelta | None:
        """From its first run's start to its end, less its runs' waits for their agents (a
        gate, a pool's permit: `detours`), which are not the agent's time."""
        if self.started_at is None or self.ended_at is None:
            return None
        waited = timedelta(seconds=sum(d.waited_s or 0 for d in self.detours))
        return max(self.ended_at - self.started_at - waited, timedelta(0))


class MemberRun(BaseModel):
    """One run of a long-lived member's agent on a message it received."""

    seq: int
    """The message's."""
    sender: str
    result: dict[str, Any] | None = None
    """Its data (an excerpt note when larger than the member's limit)."""
    error: TaskError | None = None
    at: datetime


class MemberRecord(BaseModel):
    """A long-lived member: its memory (the latest runs, oldest first) and how many messages
    it handled in all."""

    member: str
    agent: str
    handled: int = 0
    memory: list[MemberRun] = Field(default_factory=list)


class PlanStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    """Every task succeeded."""
    PARTIAL = "partial"
    """Some tasks succeeded, some did not."""
    FAILED = "failed"
    """No task succeeded (or `fail_fast` stopped it)."""
    CANCELLED = "cancelled"


def counts_line(counts: dict[TaskState, int], total: int) -> str:
    """`4 of 6 succeeded, 1 error, 1 skipped`: a plan's tasks by state (as `counts()` gives
    them, in the states' order, none at zero)."""
    done = f"{counts.get(TaskState.SUCCEEDED, 0)} of {total} succeeded"
    others = [f"{n} {state.value}" for state, n in counts.items() if state != TaskState.SUCCEEDED]
    return ", ".join([done, *others])


class Level(StrEnum):
    """The levels of coordination, as a planner chooses among them: the simplest that
    fits the goal."""

    DIRECT = "direct"
    """Simple: the planner answers the goal itself; no agent is spawned."""
    SINGLE = "single"
    """One clear subtask: a single delegation (one task, one agent)."""
    TEAM = "team"
    """Agents that must talk to each other: a team whose members do the tasks."""
    COORDINATOR = "coordinator"
    """Several independent subtasks: a task graph run under the worker cap."""


class Planning(BaseModel):
    """What the plan's planner was asked and answered: the level it chose and why, the tasks it
    planned (the spec's `tasks` from then on), its own answer at the direct level, or why its
    answer was refused (then no task ran)."""

    planner: str
    goal: str
    level: Level | None = None
    why: str = Field(default="", max_length=MAX_NOTES)
    tasks: list[str] = Field(default_factory=list)
    answer: dict[str, Any] | None = None
    error: str | None = Field(default=None, max_length=MAX_NOTES)
    at: datetime | None = None


class PlanState(BaseModel):
    """The plan's record while it runs, and the final report once it ends."""

    plan_id: str
    name: str = ""
    correlation_id: str = ""
    status: PlanStatus = PlanStatus.RUNNING
    max_workers: int = DEFAULT_MAX_WORKERS
    started_at: datetime | None = None
    ended_at: datetime | None = None
    tasks: list[TaskRecord] = Field(default_factory=list)
    summary: str = ""
    """One line: how the plan ended or stands (`4 of 6 succeeded, 1 error, 1 skipped`)."""
    scratchpad_error: str | None = Field(default=None, max_length=MAX_NOTES)
    """The first scratchpad write that failed, and why (the plan goes on without it)."""
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    """What the plan's agent runs reported using (an `llm` agent's tokens), in all and by model."""
    events: list[TimelineEntry] = Field(default_factory=list)
    """The newest of the events the plan announced (`EVENTS_WINDOW`), as rows of the
    correlation table; its correlation's chain, when one runs, has them all."""
    messages: TeamPost = Field(default_factory=TeamPost)
    """The team's messages: every one sent, in order, the latest refused with why, and how far
    each member's mailbox has been delivered."""
    members: dict[str, MemberRecord] = Field(default_factory=dict)
    """Each long-lived member's record, once the plan has closed it: what it handled."""
    planning: Planning | None = None
    """A plan written by its planner: what it planned, and how (None: a written plan)."""
    rewind_of: str | None = None
    """A rewound copy's original and point (`CoordRewindOf`): `<plan id>@<task>`."""

    def counts(self) -> dict[TaskState, int]:
        counted = {state: 0 for state in TaskState}
        for task in self.tasks:
            counted[task.state] += 1
        return {state: n for state, n in counted.items() if n}

    def search_attributes(self) -> SearchValues:
        """What the run is found by; a rewound copy is found by its original too."""
        key = self.correlation_id or self.plan_id
        return coordination_attributes(
            Pattern.PLAN, correlation_id=key, status=self.status, rewind_of=self.rewind_of
        )


class RunningTask(BaseModel):
    task: str
    state: TaskState
    summary: str | None
    elapsed_s: float
    """Since it started, as of the plan's latest step (a query cannot read the clock)."""
    started_at: datetime | None = None
    """When it started, for a live elapsed time on the reader's clock."""


class ActivityProgress(BaseModel):
    """What the plan's progress reader sees of one running activity (its heartbeat details)."""

    activity_id: str
    progress: str | None = Field(default=None, max_length=MAX_PROGRESS)
    attempt: int = 1
    last_failure: str | None = Field(default=None, max_length=MAX_NOTES)


class PlanProgress(BaseModel):
    """The `progress` query: per running task its latest summary and elapsed time, the counts
    by state, and what the plan waits for (approvals)."""

    plan_id: str
    status: PlanStatus
    counts: dict[TaskState, int]
    running: list[RunningTask] = Field(default_factory=list)
    waiting_for: list[str] = Field(default_factory=list)


# --- Activity ids -----------------------------------------------------------------------------
# Every agent activity a plan runs is named after its task, so the progress reader maps a pending
# activity back to its task and the UI lists a plan's activities by task and round.

ActivityKind = Literal["run", "review", "verify"]


class ActivityKey(NamedTuple):
    """What a plan activity's id says: its task, what it does, for which stage or verifier (a
    review's stage, a verifier's agent; empty for a run) and in which round (from 1)."""

    task: str
    kind: ActivityKind
    round: int
    of: str = ""

    @property
    def activity_id(self) -> str:
        parts = [self.task, self.kind, *([self.of] if self.of else []), str(self.round)]
        return "/".join(parts)


def run_activity_id(task: str, round: int) -> str:
    """`{task}/run/{round}`: the task's agent run (round 1, then one per fix)."""
    return ActivityKey(task, "run", round).activity_id


def review_activity_id(task: str, stage: str, round: int) -> str:
    """`{task}/review/{stage}/{round}`."""
    return ActivityKey(task, "review", round, stage).activity_id


def verify_activity_id(task: str, verifier: str, round: int) -> str:
    """`{task}/verify/{verifier}/{round}`."""
    return ActivityKey(task, "verify", round, verifier).activity_id


def parse_activity_id(activity_id: str) -> ActivityKey | None:
    """The key of a plan activity's id; None for any other activity (a local one, say)."""
    task, _, rest = activity_id.partition("/")
    kind, _, rest = rest.partition("/")
    of, _, number = rest.rpartition("/")
    known = kind in ("run", "review", "verify") and number.isdigit()
    if not known or (kind == "run") == bool(of):
        return None
    return ActivityKey(task, cast(ActivityKind, kind), int(number), of)


def current_activity(record: TaskRecord, key: ActivityKey) -> bool:
    """Whether the activity `key` is the task's current one: the run of its current round while
    it runs, a reviewer or verifier while it is reviewed. A pending activity read a moment late
    may be one that has ended since (a run before its fix, a review before the next stage)."""
    if key.kind == "run":
        return record.state == TaskState.RUNNING and key.round == record.fixes + 1
    return record.state == TaskState.REVIEWING


def _current_attempt(record: TaskRecord) -> int:
    """The attempt the record shows its current run at (its latest `running` transition's)."""
    running = (t for t in reversed(record.transitions) if t.state == TaskState.RUNNING)
    return next((t.attempt or 1 for t in running), 1)


def as_seen(state: PlanState, seen: Sequence[ActivityProgress]) -> PlanState:
    """The record with what its running agents say now (`seen`: the server's pending activities,
    read when someone asks): each current activity's progress summary, and the attempts a run
    retried since its record last moved. The plan's own record gets the retries when the run
    ends, and no progress: it never polls, so its history grows with its work, not its age."""
    records = {record.id: record for record in state.tasks}
    updates: dict[str, TaskRecord] = {}
    for item in seen:
        key = parse_activity_id(item.activity_id)
        record = records.get(key.task) if key is not None else None
        if key is None or record is None or not current_activity(record, key):
            continue
        retried = max(0, item.attempt - _current_attempt(record)) if key.kind == "run" else 0
        progress = item.progress or record.progress
        updates[record.id] = record.model_copy(
            update={"progress": progress, "attempts": record.attempts + retried}
        )
    if not updates:
        return state
    tasks = [updates.get(record.id, record) for record in state.tasks]
    return state.model_copy(update={"tasks": tasks})


def progress_as_seen(progress: PlanProgress, seen: Sequence[ActivityProgress]) -> PlanProgress:
    """The `progress` query's answer with what its running agents say now (`seen`, as above):
    a running task's run's summary, a task under review its reviewer's."""
    said: dict[tuple[str, bool], str] = {}
    for item in seen:
        key = parse_activity_id(item.activity_id)
        if key is not None and item.progress:
            said[(key.task, key.kind == "run")] = item.progress
    running = [
        task.model_copy(
            update={"summary": said.get((task.task, task.state == TaskState.RUNNING), task.summary)}
        )
        for task in progress.running
    ]
    return progress.model_copy(update={"running": running})
