"""Saga specs (what to run) and the saga coordinator record (where it stands)."""

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from coord.models.events.rewind import CopyPast
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.assignment import Assignment, Routed
from coord.models.mesh.config import SCHEDULE_TO_START_DEFAULT, AgentConfig
from coord.models.mesh.retry import DEFAULT_COMPENSATION_RETRY, RetryConfig
from coord.models.mesh.runs import RunDetour
from coord.models.mesh.usage import TokenBudget, TokenUsage
from coord.models.saga.budget import carried_checked, carried_problem
from coord.models.wire.contract import (
    Pattern,
    SearchValues,
    coordination_attributes,
    saga_workflow_id,
)
from coord.models.wire.durations import Duration
from coord.models.wire.specs import IDENTIFIER, IDENTIFIER_OR_NONE, MAX_ITEMS, MAX_NAME, JsonObject


class SagaStep(Routed):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME)
    agent: str = Field(default="", max_length=MAX_NAME)
    """The step's name by default, unless it names capabilities (`Routed`)."""
    compensation: str | None = None
    on_success: str = ""
    on_failure: str = ""
    on_compensated: str = ""
    """The event announced once this step's compensation has run (the `RemoveStaging`,
    `RollbackAll`); `<name>Compensated` by default."""
    timeout: Duration = timedelta(minutes=5)
    heartbeat_timeout: Duration | None = None
    schedule_to_start_timeout: Duration = SCHEDULE_TO_START_DEFAULT
    """How long a run waits for a worker serving its agent before it fails `agent_unavailable`
    (not retried: a retry would wait on the same queue)."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    compensation_timeout: Duration = timedelta(minutes=5)
    compensation_retry: RetryConfig = DEFAULT_COMPENSATION_RETRY
    pivot: bool = False

    @model_validator(mode="after")
    def _defaults_from_name(self) -> Self:
        if self.route is None:
            self.agent = self.agent or self.name
        if problem := self.doer_problem(self.agent):  # never none: the name is the default
            raise ValueError(problem)
        self.on_success = self.on_success or f"{self.name}Succeeded"
        self.on_failure = self.on_failure or f"{self.name}Failed"
        self.on_compensated = self.on_compensated or f"{self.name}Compensated"
        return self


class RecordedStep(BaseModel):
    """A step of the original saga that a rewound copy takes as it stood: its result (what later
    steps and its compensation are handed) and the event it announced."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=MAX_NAME)
    result: JsonObject = Field(default_factory=dict)
    event: TimelineEntry


class SagaRewind(CopyPast):
    """A copy's past: the original's first steps, reused in order, never run again."""

    steps: list[RecordedStep] = Field(max_length=MAX_ITEMS)


class SagaSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    saga_id: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME)
    name: str = ""
    description: str = ""
    correlation_id: str = Field(default="", pattern=IDENTIFIER_OR_NONE, max_length=MAX_NAME)
    parallel_compensation: bool = False
    continue_on_compensation_error: bool = False
    input: JsonObject = Field(default_factory=dict)
    """The saga's input: the payload of every step's and compensation's command, so its size
    times their number is bounded: at most 8 MiB of the saga's history in all."""
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """Agents declared inline, beside the worker's own (`coord worker --agents`)."""
    steps: list[SagaStep] = Field(min_length=1, max_length=MAX_ITEMS)
    budget: TokenBudget | None = None
    """`{tokens: N}`: the most tokens the saga's steps and compensations may use
    (`coord.models.mesh.usage`); an `llm` run is refused `budget_exceeded` once none are left."""
    rewind: SagaRewind | None = None
    """Set on a rewound copy (`coord saga rewind`): the steps it takes from its original."""

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Self:
        self.correlation_id = self.correlation_id or self.saga_id
        self.name = self.name or self.saga_id
        names = [step.name for step in self.steps]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            repeated = ", ".join(duplicates)
            raise ValueError(f"steps: step names must be unique, repeated: {repeated}")
        if sum(step.pivot for step in self.steps) > 1:
            raise ValueError("steps: at most one step can be the pivot")
        if self.rewind is not None:
            _check_recorded(self.rewind.steps, names)
        runs = agents_per_run(self.steps)
        if carried_checked(info.context) and (
            problem := carried_problem(self.input, self.agents, runs)
        ):
            raise ValueError(problem)
        return self

    @property
    def workflow_id(self) -> str:
        return saga_workflow_id(self.saga_id)

    def agents_run(self) -> list[str]:
        """The agents its steps and compensations name (not those picked by capability), in
        order, once each: those whose runs the saga places before its first step."""
        named = [step.agent for step in self.steps] + [s.compensation or "" for s in self.steps]
        return [agent for agent in dict.fromkeys(named) if agent]


def agents_per_run(steps: list[SagaStep]) -> list[str]:
    """The agent of each step's run and each compensation's (a step picking one by capability
    names none)."""
    return [s.agent for s in steps] + [s.compensation for s in steps if s.compensation]


def _check_recorded(recorded: list[RecordedStep], names: list[str]) -> None:
    """A copy reuses the first steps of its spec, in their order, and runs at least one."""
    if len(recorded) >= len(names):
        raise ValueError("rewind.steps: a rewound copy must leave at least one step to run")
    for index, step in enumerate(recorded):
        if step.name != names[index]:
            raise ValueError(
                f"rewind.steps[{index}].name: {step.name!r} is not step {index + 1} of the saga "
                f"({names[index]!r})"
            )


class SagaStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPENSATING = "compensating"
    COMPLETED = "completed"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"
    FAILED = "failed"


class CompletedStep(BaseModel):
    step: int
    event: str
    event_id: str
    name: str = ""


class StackEntry(BaseModel):
    step: int
    compensate: str


class CompensationOutcome(BaseModel):
    step: int
    compensate: str
    status: Literal["compensated", "failed"]
    error: str | None = None


CancelEffect = Literal["unwind", "forward", "compensating", "ended"]


class SagaCancel(BaseModel):
    """A cancel request and what it did: `unwind` (the stack was unwound), `forward` (it came
    after the pivot had completed, so the remaining steps went forward), `compensating` (the
    saga was already unwinding after a failure, which went on and decided the outcome),
    `ended` (the saga had already ended and was only sending its last events)."""

    requested_at: datetime
    during_step: int | None = None
    effect: CancelEffect


class SagaState(BaseModel):
    """The saga coordinator record, plus what an operator needs after a failure."""

    saga_id: str
    correlation_id: str = ""
    current_step: int | None = None
    status: SagaStatus = SagaStatus.PENDING
    completed_steps: list[CompletedStep] = Field(default_factory=list)
    compensation_stack: list[StackEntry] = Field(default_factory=list)
    compensations: list[CompensationOutcome] = Field(default_factory=list)
    recovery: Literal["backward", "forward"] = "backward"
    failed_event: str | None = None
    failure_reason: str | None = None
    cancel: SagaCancel | None = None
    assignments: dict[str, Assignment] = Field(default_factory=dict)
    """The agent picked for each step that names capabilities, by step name, with the bids."""
    detours: list[RunDetour] = Field(default_factory=list)
    """Runs that waited for their agent (breaker open, pool full) or went elsewhere (routed
    again, fell back), by step (`run`), newest last."""
    events: list[TimelineEntry] = Field(default_factory=list)
    """The saga's events with their times (`ArtifactBuilt` ... `ProductionFailed`, the
    compensation events), as rows of the correlation table."""
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    """What the saga's agent runs reported using (an `llm` agent's tokens), in all and by model."""
    rewind_of: str | None = None
    """A rewound copy's original and step (`CoordRewindOf`): `<saga id>@step N <name>`."""

    def cut_short(self, how: str) -> "SagaState":
        """The record of a run the server or an operator ended (`how`: terminated, timed out),
        as it stood: it ran no further and compensated nothing (its run's listing still shows
        the status it had)."""
        why = f"{how}; nothing was compensated"
        return self.model_copy(update={"status": SagaStatus.FAILED, "failure_reason": why})

    def search_attributes(self) -> SearchValues:
        """What the run is found by: set at start (the first record), upserted on every change;
        a rewound copy is found by its original too."""
        key = self.correlation_id or self.saga_id
        return coordination_attributes(
            Pattern.SAGA, correlation_id=key, status=self.status, rewind_of=self.rewind_of
        )
