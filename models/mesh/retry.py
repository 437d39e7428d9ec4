"""The retry configuration, expressed as a Temporal RetryPolicy, and how a run's worker
counts the retries its agent spends (`RunBudget`, `RunTally`)."""

import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from temporalio.common import RetryPolicy

from coord.models.mesh.runs import Jitter
from coord.models.wire.contract import NOT_RETRYABLE
from coord.models.wire.durations import Duration
from coord.models.wire.specs import MAX_COUNT


class RetryConfig(BaseModel):
    """`max_retries` counts retries after the first attempt (None: retry until success).
    `retry_on` empty means every failure type not in `no_retry_on` is retried."""

    model_config = ConfigDict(extra="forbid")

    max_retries: int | None = Field(default=3, ge=0, le=MAX_COUNT)
    backoff_type: Literal["exponential", "fixed"] = "exponential"
    initial_delay: Duration = timedelta(seconds=1)
    max_delay: Duration = timedelta(seconds=30)
    retry_on: list[str] = Field(default_factory=list)
    no_retry_on: list[str] = Field(
        default_factory=lambda: [kind.value for kind in sorted(NOT_RETRYABLE)]
    )
    jitter: Jitter = "full"
    """How the delay before each retry is spread: `full` (uniform up to the backoff, the
    default: runs failing together come back apart), `decorrelated`, or `none` (the backoff
    exactly)."""

    @model_validator(mode="after")
    def _delays_ordered(self) -> Self:
        if self.initial_delay <= timedelta(0):
            raise ValueError("initial_delay must be positive")
        if self.max_delay < self.initial_delay:
            raise ValueError("max_delay must not be shorter than initial_delay")
        return self

    def to_retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            initial_interval=self.initial_delay,
            backoff_coefficient=2.0 if self.backoff_type == "exponential" else 1.0,
            maximum_interval=self.max_delay,
            maximum_attempts=0 if self.max_retries is None else self.max_retries + 1,
            non_retryable_error_types=list(self.no_retry_on),
        )

    def until_success(self) -> Self:
        """The same backoff with no attempt limit and nothing non-retryable by type."""
        return self.model_copy(update={"max_retries": None, "no_retry_on": [], "retry_on": []})

    def budget(self) -> "RunBudget":
        """What the run's worker counts (`AgentRequest.budget`): `max_retries` of the agent's
        own failures, and LOST_RUNS_ALLOWED attempts lost without a report (none counted when
        retried until success)."""
        lost = None if self.max_retries is None else LOST_RUNS_ALLOWED
        return RunBudget(max_retries=self.max_retries, lost_runs=lost)

    def to_counted_policy(self) -> RetryPolicy:
        """The server's policy for a run that carries its `budget()`: the same backoff and
        non-retryable types, and no attempt limit, since the server counts every attempt alike:
        one a server outage or a dead worker lost would spend a retry of the agent's."""
        return dataclasses.replace(self.to_retry_policy(), maximum_attempts=0)


LOST_RUNS_ALLOWED = 5
"""Attempts of one run that may end without a report from a worker (the server timed them out:
their worker died or could not reach it, or the agent stopped heartbeating) before the run fails
for good with `timeout`. A server restart loses at most one of each run in flight, a killed
worker one of each run it held."""


class RunBudget(BaseModel):
    """A run's retries as its worker counts them, carried in its request: `max_retries` of the
    agent's own failures (a gate turning the run away is none), `lost_runs` attempts ended by the
    server without a report. None: no limit (a step retried until success)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retries: int | None = Field(ge=0, le=MAX_COUNT)
    lost_runs: int | None = Field(default=LOST_RUNS_ALLOWED, ge=0, le=MAX_COUNT)

    def spent(self, tally: "RunTally", before: int = 0) -> bool:
        """The agent has failed once more than its retries allow (`before`: its failures in
        earlier executions of the run): the run fails for good."""
        return self.max_retries is not None and before + tally.failures > self.max_retries

    def lost_too_often(self, tally: "RunTally", attempt: int) -> bool:
        return self.lost_runs is not None and tally.lost(attempt) > self.lost_runs


TIME_LIMIT_MARGIN = timedelta(seconds=1)


def agent_time_limit(limit: timedelta) -> timedelta:
    """How long a run's worker lets its agent go on within the run's start-to-close `limit`:
    a little less (TIME_LIMIT_MARGIN, or a tenth of a short limit), so that an agent running past
    it is reported as its own `timeout` before the server's clock ends the attempt as one lost
    without a report."""
    return limit - min(TIME_LIMIT_MARGIN, limit / 10)


TALLY_DETAIL = "run_tally"


class RunTally(BaseModel):
    """How a run's earlier attempts ended, as far as their workers could tell: `failures` the
    agent's own, `turned_away` by a gate before the agent was called. The worker sends it as the
    last of every heartbeat's details; the server keeps the last heartbeat's details for the
    next attempt, even when it timed the attempt out. Such an attempt left no mark of its own:
    it is what `attempt - 1` leaves over (`lost`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    failures: int = Field(default=0, ge=0)
    turned_away: int = Field(default=0, ge=0)

    @classmethod
    def carried_in(cls, details: Sequence[Any]) -> "RunTally":
        """The tally an attempt finds in the heartbeat details the server kept (none yet: the
        first attempt, or attempts whose worker counted nothing)."""
        last = details[-1] if details else None
        if isinstance(last, dict) and isinstance(last.get(TALLY_DETAIL), dict):
            try:
                return cls.model_validate(last[TALLY_DETAIL])
            except ValueError:
                return cls()
        return cls()

    def as_detail(self) -> dict[str, Any]:
        return {TALLY_DETAIL: self.model_dump()}

    def lost(self, attempt: int) -> int:
        """The attempts before `attempt` that ended without a worker's report."""
        return max(attempt - 1 - self.failures - self.turned_away, 0)

    def failed(self) -> "RunTally":
        return self.model_copy(update={"failures": self.failures + 1})

    def refused(self) -> "RunTally":
        return self.model_copy(update={"turned_away": self.turned_away + 1})


DEFAULT_COMPENSATION_RETRY = RetryConfig(max_retries=None, max_delay=timedelta(minutes=1))
