"""What happens to an agent run that its agent cannot take: pure rules, shared by every pattern.

A run can be turned away before its agent is called: the agent's circuit breaker is open
(`circuit_open`) or its pool has no permit free (`pool_full`). Nothing was called, so such a
refusal must not spend the caller's retries: the worker hands it back to the workflow at once
(a *gate refusal*, never retried by Temporal), and the workflow decides here what to do next:
wait and send the run again, with its business attempts carried over; go to the run's
`fallback` (another agent, or other capabilities); route a capability-routed run again, to the
next capable agent; or, once the run's own bound is reached, fail with the refusal's type.

A run whose agent has no worker (`agent_unavailable`) or times out for good is treated the same
way when it has somewhere else to go, since neither says anything about the caller's business.

The jitter of agent retries lives here too: the worker spreads the delay before each retry of a
failed run (`retry_delay`), seeded by the workflow, so that runs failing together do not all
come back together (retry storms)."""

import random
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coord.models.wire.contract import FailureType

GATE_FAILURES = frozenset({FailureType.CIRCUIT_OPEN, FailureType.POOL_FULL})
"""Refusals made before the agent is called: they cost the caller no attempt."""
GO_ELSEWHERE = frozenset(
    {FailureType.CIRCUIT_OPEN, FailureType.AGENT_UNAVAILABLE, FailureType.TIMEOUT}
)
"""Failures that say the agent cannot serve the run now (its breaker is open, no worker takes
its runs, it does not answer in time): a run with a fallback, or routed by capability, goes
elsewhere instead of waiting or failing."""
DEFAULT_AGENT_WAIT = timedelta(minutes=10)
"""How long in all a run may wait for its agent's breaker to close or its pool to have a permit,
when the run sets no `schedule_to_close_timeout`: longer than a breaker's recovery window and
than the server outages the product rides out, short enough that a dead agent is noticed."""
MIN_GATE_DELAY = timedelta(milliseconds=200)
GATE_SPREAD = 0.5
"""A gate wait is stretched by up to this share (random), so runs turned away together (a
breaker's open window ending) do not come back at the same moment."""
MAX_DETOURS = 20
"""Detours kept per run record, newest last."""

Jitter = Literal["full", "decorrelated", "none"]
DetourAction = Literal["waited", "rerouted", "fell_back", "resent", "queued"]
"""What a run did instead of simply running: waited at a gate, went to the next capable agent or
to its fallback, was sent again once a worker served its agent again, or went to its agent's
queue instead of a local activity (the agent held its share of the worker's local slots)."""


class RetryJitter(BaseModel):
    """How the worker spreads the delay before each retry of a run, and the seed the workflow
    drew for it (so the delays are the same whenever the run is looked at again)."""

    model_config = ConfigDict(extra="forbid")

    kind: Jitter = "full"
    seed: int = 0


NO_JITTER = RetryJitter(kind="none")


class GateRefusal(BaseModel):
    """What a worker says when it turns a run away before calling the agent."""

    attempt: int = Field(default=1, ge=1)
    """The business attempt that was turned away (it is not counted as one)."""
    retry_after_s: float = Field(default=1.0, ge=0)
    """When the gate may let the run through (the breaker's open window's end, a spread pool
    retry)."""

    @classmethod
    def of(cls, details: Any) -> "GateRefusal":
        """From a refusal's first detail; defaults for anything missing or malformed."""
        if not isinstance(details, Mapping):
            return cls()
        try:
            return cls.model_validate({k: v for k, v in details.items() if k in cls.model_fields})
        except ValueError:
            return cls()


class RunDetour(BaseModel):
    """Why a run did not simply go to its agent once: the run's record keeps these."""

    run: str = ""
    """Which run, where a record holds several (a saga's step, a chain's subscription)."""
    at: datetime
    agent: str
    """The agent that could not take the run."""
    reason: str
    """The failure type that turned it away (`circuit_open`, `pool_full`, ...)."""
    action: DetourAction
    to_agent: str | None = None
    """Where the run went instead (rerouted, fell back)."""
    waited_s: float | None = None
    message: str = ""

    def describe(self) -> str:
        where = f"{self.run}: " if self.run else ""
        if self.action == "waited":
            return f"{where}{self.agent} {self.reason}, waited {self.waited_s or 0:g}s"
        if self.action == "resent":
            return f"{where}{self.agent} {self.reason}, sent again (a worker serves it again)"
        if self.action == "queued":
            return f"{where}{self.agent} {self.reason}, sent to its queue"
        verb = "rerouted" if self.action == "rerouted" else "fell back"
        return f"{where}{self.agent} {self.reason}, {verb} to {self.to_agent}"

    def continues(self, earlier: "RunDetour") -> bool:
        """Whether this is one more wait of the same run for the same reason."""
        same = (self.run, self.agent, self.reason) == (earlier.run, earlier.agent, earlier.reason)
        return same and self.action == earlier.action == "waited"


def kept(detours: list[RunDetour], detour: RunDetour) -> list[RunDetour]:
    """`detours` with one more, newest last: a run's waits in a row for the same reason add up
    in one entry; the oldest are dropped past MAX_DETOURS."""
    if detours and detour.continues(detours[-1]):
        waited = (detours[-1].waited_s or 0) + (detour.waited_s or 0)
        merged = detours[-1].model_copy(update={"waited_s": round(waited, 3), "at": detour.at})
        return [*detours[:-1], merged]
    return [*detours, detour][-MAX_DETOURS:]


class RunAllowance(BaseModel):
    """A run's business attempts across the activity executions its waits split it into."""

    maximum: int
    """The retry policy's maximum attempts (0: unlimited)."""
    spent: int = 0
    deadline: datetime
    """When the run stops waiting for gates: its schedule-to-close, else DEFAULT_AGENT_WAIT."""

    @classmethod
    def starting(
        cls, maximum: int, now: datetime, schedule_to_close: timedelta | None
    ) -> "RunAllowance":
        return cls(maximum=maximum, deadline=now + (schedule_to_close or DEFAULT_AGENT_WAIT))

    def refused(self, refusal: GateRefusal) -> None:
        """The business attempts before the refused one are spent (`attempt` counts the run's
        attempts across its executions)."""
        self.spent = max(self.spent, refusal.attempt - 1)

    @property
    def remaining(self) -> int:
        """Attempts left for the next execution (0: unlimited); at least one."""
        return 0 if self.maximum == 0 else max(self.maximum - self.spent, 1)

    def time_left(self, now: datetime) -> timedelta:
        return max(self.deadline - now, timedelta(0))


Decision = Literal["wait", "elsewhere", "fail"]


def after_refusal(
    failure_type: str, *, can_go_elsewhere: bool, delay: timedelta, time_left: timedelta
) -> Decision:
    """What a run turned away by `failure_type` does: go elsewhere when it can and the refusal
    says its agent cannot serve it; else wait at a gate while its bound allows; else fail."""
    if can_go_elsewhere and failure_type in GO_ELSEWHERE:
        return "elsewhere"
    if failure_type in GATE_FAILURES and delay <= time_left:
        return "wait"
    return "fail"


def gate_delay(refusal: GateRefusal, spread: float) -> timedelta:
    """The wait before a refused run is sent again: the gate's own hint, stretched by
    `spread` (in [0, 1), the workflow's random draw) times GATE_SPREAD."""
    hint = max(timedelta(seconds=refusal.retry_after_s), MIN_GATE_DELAY)
    return hint * (1 + GATE_SPREAD * spread)


def retry_delay(
    attempt: int,
    jitter: RetryJitter,
    *,
    initial: timedelta,
    coefficient: float,
    maximum: timedelta | None,
) -> timedelta:
    """The delay before the retry that follows failed attempt `attempt` (from 1), as the retry
    policy's backoff says, spread by `jitter`: `full` draws it uniformly up to the backoff,
    `decorrelated` from the initial interval up to three times the previous delay (capped),
    `none` keeps the backoff. The draw depends only on the seed and the attempt."""
    cap = maximum.total_seconds() if maximum else float("inf")
    base = initial.total_seconds()
    backoff = min(base * coefficient ** (attempt - 1), cap)
    if jitter.kind == "none":
        return timedelta(seconds=backoff)
    rng = random.Random(f"{jitter.seed}:{attempt}")
    if jitter.kind == "full":
        return timedelta(seconds=rng.uniform(0, backoff))
    previous = base
    draw = random.Random(jitter.seed)
    for _ in range(attempt):
        previous = min(cap, draw.uniform(base, previous * 3))
    return timedelta(seconds=previous)
