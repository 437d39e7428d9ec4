"""An agent's circuit breaker, its rules (pure): what counts against it, when it opens, and its
probes. The `AgentLedger` workflow applies them (`LedgerBook`, coord.models.mesh.ledger); the
worker judges each run by them (`failure_verdict`, `cancel_verdict`).

What counts: only failures saying the agent itself is unhealthy. By default timeouts
(Temporal's start-to-close and heartbeat ones, and the kinds' own `timeout`), `agent_unavailable`,
`agent_blocked`, and the failures the agent kinds mark with a `Health` reason (connection errors,
HTTP/LLM 5xx and 429, a shell agent killed by a signal). Not bad input (`invalid_payload`), not
`unauthorized`, not what an agent declares as its outcome (a python agent raising
`temporary_failure`): those say the agent answered. A declaration's `count` and `ignore` add
failure types or health reasons to the defaults and take them away (`BreakerConfig.counts`, the
one place that decides).

When it opens: when, in the last `window` (60 s), at least `min_calls` runs (20) ended and at
least `failure_rate` of them (50%) failed in a way that counts (`CallWindow`); or, if declared,
after `consecutive` counted failures in a row. A rate over a minimum volume, as resilience
libraries define a breaker, rather than "5 failures": with many concurrent runs, five failures
in a row happen by chance to a healthy agent whose inputs sometimes fail, and one slow trickle
of calls should not open on its first few failures.

Half-open: `probes` runs (3) go through, each holding a lease (`Probes`); when they have all
succeeded the breaker closes; a probe failing in a way that counts (a timeout included)
re-opens it; a probe ending with a failure that does not count, or abandoned (cancelled by its
caller, its worker shutting down), frees its place for another probe and changes nothing."""

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coord.models.wire.contract import FailureType, Health
from coord.models.wire.durations import Duration, format_duration

DEFAULT_MIN_CALLS = 20
DEFAULT_FAILURE_RATE = 0.5
DEFAULT_WINDOW = timedelta(seconds=60)
DEFAULT_RECOVERY = timedelta(seconds=30)
DEFAULT_PROBES = 3
MIN_WINDOW = timedelta(seconds=1)
MAX_WINDOW = timedelta(days=1)
WINDOW_SLICES = 10
"""The window's granularity: it slides by a tenth of itself (6 s of the default 60 s)."""
PROBE_LEASE = timedelta(minutes=1)
"""How long a granted probe holds its place before another run may probe instead (its worker
may have died). A probe that runs longer is not stopped."""
MAX_NAMES = 32
"""Entries in a declaration's `count` or `ignore`."""
MAX_NAME = 200
"""Characters of a failure type or health reason the ledger keeps (any string is a type)."""
MAX_REASONS = 16
"""Distinct reasons the ledger counts per window; more are counted under OTHER_REASON."""
OTHER_REASON = "other"

AGENT_BLOCKED = "agent_blocked"
"""An async agent blocking its worker's event loop: the agent is unhealthy."""
COUNTED_TYPES: frozenset[str] = frozenset(
    {FailureType.TIMEOUT, FailureType.AGENT_UNAVAILABLE, AGENT_BLOCKED}
)
COUNTED_BY_DEFAULT: frozenset[str] = COUNTED_TYPES | frozenset(Health)
"""Failure types and health reasons that count against the breaker unless ignored."""
GATE_TYPES: frozenset[str] = frozenset({FailureType.CIRCUIT_OPEN, FailureType.POOL_FULL})
"""Raised before the agent is called: never the agent's failure."""

FailureName = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]


class BreakerConfig(BaseModel):
    """An agent declaration's `breaker:` (`{min_calls: 20, failure_rate: 0.5, window: 60s,
    recovery: 30s, probes: 3}`, the defaults)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """False: the agent's runs never consult the ledger (no breaker, no window stats)."""
    min_calls: int = Field(default=DEFAULT_MIN_CALLS, ge=1, le=100_000)
    """Runs that must have ended in the window before its failure rate can open the breaker."""
    failure_rate: float = Field(default=DEFAULT_FAILURE_RATE, gt=0, le=1)
    """The share of the window's runs failing in a way that counts that opens the breaker."""
    window: Duration = DEFAULT_WINDOW
    """How far back the failure rate looks (between 1s and 1d)."""
    consecutive: int | None = Field(default=None, ge=1, le=10_000)
    """Also open after this many counted failures in a row (none: off). `failures`, its
    former name, is still read."""
    recovery: Duration = DEFAULT_RECOVERY
    """How long the breaker stays open before probe runs may test the agent again."""
    probes: int = Field(default=DEFAULT_PROBES, ge=1, le=100)
    """Probe runs of the half-open breaker; it closes once they have all succeeded."""
    count: list[FailureName] = Field(default_factory=list, max_length=MAX_NAMES)
    """Failure types or health reasons to count beyond the defaults (none by default), such as
    `temporary_failure`, which does not count unless named here. Any name is taken: an agent
    may raise failure types of its own."""
    ignore: list[FailureName] = Field(default_factory=list, max_length=MAX_NAMES)
    """Failure types or health reasons not to count, the defaults' included (none by
    default), such as `http_429`; ignore wins over count."""

    @model_validator(mode="before")
    @classmethod
    def _former_names(cls, data: Any) -> Any:
        """`failures: N`, as declared (and as older workers and ledgers recorded it), is the
        consecutive rule it always was."""
        if isinstance(data, dict) and "failures" in data:
            data = dict(data)
            failures = data.pop("failures")
            if data.get("consecutive") is not None:
                raise ValueError("failures is the former name of consecutive: give only one")
            data["consecutive"] = failures
        return data

    @field_validator("window")
    @classmethod
    def _window_within_bounds(cls, value: timedelta) -> timedelta:
        if not MIN_WINDOW <= value <= MAX_WINDOW:
            low, high = format_duration(MIN_WINDOW), format_duration(MAX_WINDOW)
            raise ValueError(f"must be between {low} and {high}")
        return value

    @field_validator("count")
    @classmethod
    def _not_the_gates(cls, value: list[str]) -> list[str]:
        if gates := sorted(GATE_TYPES.intersection(value)):
            raise ValueError(
                f"{', '.join(gates)}: raised before the agent is called, never a failure of it"
            )
        return value

    def counts(self, failure_type: str, health: str | None) -> bool:
        """Whether a failure of this type, with this health reason (None: unmarked), counts
        against the breaker: one of them is counted (by default or by `count`) and neither is
        ignored."""
        names = {failure_type} if health is None else {failure_type, health}
        if names.intersection(self.ignore):
            return False
        return bool(names & COUNTED_BY_DEFAULT or names.intersection(self.count))


RunEnd = Literal["succeeded", "failed", "abandoned"]


class Verdict(BaseModel):
    """How one run of the agent ended, as its breaker sees it."""

    model_config = ConfigDict(frozen=True)

    ended: RunEnd
    counted: bool = False
    """A failure that counts against the breaker."""
    reason: str = ""
    """A failure's health reason, else its type (what the ledger counts it under)."""


SUCCEEDED = Verdict(ended="succeeded")
ABANDONED = Verdict(ended="abandoned")
"""Cancelled by its caller, or its worker shutting down: says nothing of the agent."""


def failure_verdict(config: BreakerConfig, failure_type: str, health: str | None) -> Verdict:
    return Verdict(
        ended="failed",
        counted=config.counts(failure_type, health),
        reason=(health or failure_type)[:MAX_NAME],
    )


CancelCause = Literal["timed_out", "gone", "abandoned"]
"""Why a run was cancelled, from the SDK's cancellation details: `timed_out` (the worker saw its
time limit pass), `gone` (the server no longer knows the attempt), or anything else (its
caller cancelled, paused or reset it; its worker is shutting down)."""


def cancel_verdict(
    config: BreakerConfig,
    cause: CancelCause,
    ran_for: timedelta,
    start_to_close: timedelta | None,
    heartbeat_timeout: timedelta | None,
) -> Verdict:
    """A cancelled run: Temporal timing it out is the agent's failure (`timeout`); a run the
    server forgot while still within its limits (no heartbeat timeout that could have ended
    it, its start-to-close not passed) had its workflow end, and is abandoned like any other
    cancel."""
    if cause == "abandoned":
        return ABANDONED
    within_limits = heartbeat_timeout is None and (
        start_to_close is None or ran_for < start_to_close
    )
    if cause == "gone" and within_limits:
        return ABANDONED
    return failure_verdict(config, FailureType.TIMEOUT, Health.TIMEOUT)


Reasons = dict[FailureName, Annotated[int, Field(ge=0)]]


def merged_reasons(into: dict[str, int], other: dict[str, int]) -> dict[str, int]:
    """`other`'s counts added to `into`'s, at most MAX_REASONS names (the rest as `other`)."""
    merged = dict(into)
    for name, count in other.items():
        key = name if name in merged or len(merged) < MAX_REASONS - 1 else OTHER_REASON
        merged[key] = merged.get(key, 0) + count
    return merged


def describe_reasons(reasons: dict[str, int]) -> str:
    """`timeout 12, http_5xx 3`: the most frequent first."""
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name} {count}" for name, count in ranked)


class CallSlice(BaseModel):
    """The runs that ended in one slice of the window, and those failing in a way that counts."""

    start: datetime
    calls: int = Field(default=0, ge=0)
    failures: int = Field(default=0, ge=0)
    reasons: Reasons = Field(default_factory=dict)

    @property
    def failure_rate(self) -> float | None:
        return round(self.failures / self.calls, 4) if self.calls else None


class CallWindow(BaseModel):
    """The breaker's sliding window: the runs of the last `span`, in WINDOW_SLICES slices, so
    that memory stays bounded however many runs there are. Cleared on every transition: a
    closed breaker judges only the runs since it closed."""

    slices: list[CallSlice] = Field(default_factory=list)

    def add(
        self, calls: int, failures: int, reasons: dict[str, int], now: datetime, span: timedelta
    ) -> None:
        self.slices = window_slices(self.slices, now, span)
        start = _slice_start(now, span / WINDOW_SLICES)
        if not self.slices or self.slices[-1].start != start:
            self.slices.append(CallSlice(start=start))
        last = self.slices[-1]
        last.calls += calls
        last.failures += failures
        last.reasons = merged_reasons(last.reasons, reasons)

    def totals(self, now: datetime, span: timedelta) -> CallSlice:
        """The window's runs as of `now`: the slices overlapping the last `span`."""
        return window_totals(self.slices, now, span)

    def clear(self) -> None:
        self.slices = []

    def opens(self, config: BreakerConfig, now: datetime) -> str | None:
        """Why the window's failure rate opens the breaker, or None."""
        total = self.totals(now, config.window)
        if total.calls < config.min_calls or total.failures < config.failure_rate * total.calls:
            return None
        return (
            f"{total.failures} of {total.calls} calls failed in {format_duration(config.window)} "
            f"({total.failures / total.calls:.0%}): {describe_reasons(total.reasons)}"
        )


def window_slices(slices: list[CallSlice], now: datetime, span: timedelta) -> list[CallSlice]:
    """The slices overlapping the last `span`."""
    size = span / WINDOW_SLICES
    return [piece for piece in slices if piece.start + size > now - span]


def window_totals(slices: list[CallSlice], now: datetime, span: timedelta) -> CallSlice:
    total = CallSlice(start=now - span)
    for piece in window_slices(slices, now, span):
        total.calls += piece.calls
        total.failures += piece.failures
        total.reasons = merged_reasons(total.reasons, piece.reasons)
    return total


def _slice_start(now: datetime, size: timedelta) -> datetime:
    seconds = size.total_seconds()
    epoch = now.timestamp()
    return datetime.fromtimestamp(epoch - epoch % seconds, now.tzinfo)


class ProbeLease(BaseModel):
    run: str
    """The run attempt probing ("" from workers that did not name it)."""
    until: datetime


class Probes(BaseModel):
    """The half-open breaker's probes: those out (each a lease) and those that succeeded."""

    out: list[ProbeLease] = Field(default_factory=list)
    succeeded: int = 0

    def claim(self, run: str, now: datetime, wanted: int) -> bool:
        """Whether `run` may probe: it holds a lease already, or fewer than `wanted` probes
        are out or have succeeded (leases that ended are dropped first)."""
        self.out = [p for p in self.out if p.until > now]
        if run and any(p.run == run for p in self.out):
            return True
        if len(self.out) + self.succeeded >= wanted:
            return False
        self.out.append(ProbeLease(run=run, until=now + PROBE_LEASE))
        return True

    def release(self, run: str) -> None:
        """`run`'s lease ends (the first unnamed one for an unnamed run)."""
        held = next((p for p in self.out if p.run == run), None)
        if held is not None:
            self.out.remove(held)

    def clear(self) -> None:
        self.out, self.succeeded = [], 0
