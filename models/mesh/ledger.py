"""An agent's ledger: its circuit breaker and its recent-window run stats, shared by every
workflow that uses the agent. Pure: the `AgentLedger` entity workflow holds one `LedgerBook` per
agent queue; workers read it (`AgentLedgerState`) and report to it.

The breaker's rules (what counts, when it opens, its probes) are coord.models.mesh.breaker's.
Workers send the runs that ended in batches (`RunStats`, every few seconds, at once when one holds a
failure that counts); the ledger adds them to the closed breaker's window (`CallWindow`) and
opens it when the window's failure rate (or a streak, if declared) says so. Open for `recovery`,
while runs fail fast with `circuit_open`; then `half_open`: `probes` runs are let through, each a
lease, and report how they ended (`OutcomeReport`).

The stats window: runs that succeeded and failed, and the durations of the successful ones (a
log-scale histogram, so memory stays bounded however many runs there are), in time buckets over
the last WINDOW; the success rate and the median duration are read from it.

The pool (a resource pool, for an agent declaring `max_concurrent`): permits to run,
at most `size` out at once across every worker serving the agent. A permit is a lease (a run
whose worker died gives its permit back when the lease ends); a run asking while none is free
waits its turn, first come first served, for a bounded time (`PermitPool`).

Every message is bounded (counts, names, leases, durations), so that whatever validates can be
applied: the ledger's handlers never fail its workflow task."""

import math
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coord.models.mesh.breaker import (
    ABANDONED,
    DEFAULT_FAILURE_RATE,
    DEFAULT_MIN_CALLS,
    DEFAULT_PROBES,
    DEFAULT_RECOVERY,
    DEFAULT_WINDOW,
    MAX_NAME,
    SUCCEEDED,
    CallSlice,
    CallWindow,
    Probes,
    Reasons,
    Verdict,
    merged_reasons,
    window_slices,
    window_totals,
)
from coord.models.mesh.breaker import BreakerConfig as BreakerConfig

BreakerStateName = Literal["closed", "open", "half_open"]
HALF_OPEN_RETRY = timedelta(seconds=2)
"""When a run turned away while every probe is out may try again."""
WINDOW = timedelta(minutes=5)
"""The recent window of the success rate and the p50."""
BUCKET = timedelta(seconds=30)
"""The window's granularity: whole buckets leave it."""
HISTOGRAM_BASE = 2 ** (1 / 8)
"""Duration histogram bins grow by this factor (about 9%): the p50 is within about 4.5%."""
MIN_DURATION_MS = 0.01
MAX_DURATION_MS = 1e10
"""Durations are counted between these (longer: in the last bin, about 116 days)."""
MAX_TRANSITIONS = 20
"""Breaker transitions kept, newest last (what the health monitor reads)."""
POOL_WAIT = timedelta(seconds=2)
"""How long one request for a permit waits in the ledger for a free one before it is answered
`not granted` (the worker then heartbeats its run and asks again, keeping its turn)."""
KEEP_PLACE = POOL_WAIT
"""How long a run answered `not granted` keeps its place in line (and counts as waiting)."""
MAX_LEASE = timedelta(days=7)
"""The longest permit lease a request may ask for (a run renews its lease every minute or so)."""
MAX_POOL_SIZE = 100_000
MAX_BATCH_RUNS = 10_000_000
"""Runs one stats report may count (a worker reports every few seconds)."""
MAX_ID = 1000
"""Characters of a worker identity, run attempt or agent queue in a message."""

Identity = Annotated[str, Field(max_length=MAX_ID)]


def duration_bin(duration_ms: float) -> int:
    """The histogram bin of a duration (MIN_DURATION_MS to MAX_DURATION_MS)."""
    bounded = min(max(duration_ms, MIN_DURATION_MS), MAX_DURATION_MS)
    return round(math.log(bounded, HISTOGRAM_BASE))


MIN_BIN = duration_bin(MIN_DURATION_MS)
MAX_BIN = duration_bin(MAX_DURATION_MS)


def bin_duration(index: int) -> float:
    """The duration a bin stands for (ms)."""
    return float(HISTOGRAM_BASE**index)


class RunStats(BaseModel):
    """Runs counted by a worker since its last report (or in one bucket of the window)."""

    model_config = ConfigDict(extra="forbid")

    succeeded: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    durations: dict[int, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    """Successful runs' durations: histogram bin (MIN_BIN to MAX_BIN) -> count."""
    counted: int = Field(default=0, ge=0)
    """The failures that count against the breaker (of `failed`)."""
    reasons: Reasons = Field(default_factory=dict)
    """Those failures by reason (health reason, else failure type)."""
    streak: int = Field(default=0, ge=0)
    """Counted failures in a row at the end of these runs (a run here that was not one ended
    any streak before them)."""

    @field_validator("durations")
    @classmethod
    def _bins_in_range(cls, durations: dict[int, int]) -> dict[int, int]:
        """A bin outside the range (from a report, say) is counted in the nearest one."""
        bounded: dict[int, int] = {}
        for index, count in durations.items():
            key = min(max(index, MIN_BIN), MAX_BIN)
            bounded[key] = bounded.get(key, 0) + count
        return bounded

    @property
    def runs(self) -> int:
        return self.succeeded + self.failed

    def continued_streak(self, before: int) -> int:
        """The streak after these runs, `before` them: continued if they all counted."""
        return self.streak + (before if self.runs == self.counted else 0)

    def record(self, verdict: Verdict, duration_ms: float) -> None:
        """One run that ended (an abandoned one is not counted)."""
        if verdict.ended == "abandoned":
            return
        if verdict.ended == "succeeded":
            self.succeeded += 1
            index = duration_bin(duration_ms)
            self.durations[index] = self.durations.get(index, 0) + 1
        else:
            self.failed += 1
        if verdict.counted:
            self.counted += 1
            self.streak += 1
            self.reasons = merged_reasons(self.reasons, {verdict.reason: 1})
        else:
            self.streak = 0

    def merge(self, other: "RunStats") -> None:
        """`other`'s runs, which ended after these."""
        self.succeeded += other.succeeded
        self.failed += other.failed
        for index, count in other.durations.items():
            self.durations[index] = self.durations.get(index, 0) + count
        self.streak = other.continued_streak(self.streak)
        self.counted += other.counted
        self.reasons = merged_reasons(self.reasons, other.reasons)

    def p50_ms(self) -> float | None:
        """The median successful duration (the bin it falls in), None without successes."""
        total = sum(self.durations.values())
        seen = 0
        for index in sorted(self.durations):
            seen += self.durations[index]
            if seen * 2 >= total:
                return round(bin_duration(index), 1)
        return None

    def counts(self) -> list[int]:
        """Every count it holds (for bounding a report)."""
        return [
            self.succeeded,
            self.failed,
            self.counted,
            self.streak,
            sum(self.durations.values()),
            sum(self.reasons.values()),
        ]


class WindowBucket(BaseModel):
    start: datetime
    stats: RunStats = Field(default_factory=RunStats)


class BreakerTransition(BaseModel):
    """One change of the breaker's state; `seq` grows by one per transition, so a reader tells
    the ones it has not seen yet."""

    seq: int
    at: datetime
    from_state: BreakerStateName
    to_state: BreakerStateName
    reason: str


class Permit(BaseModel):
    """A run's permit to call the agent, until its lease ends."""

    run: str
    """The run attempt holding it (workflow, run, activity and attempt)."""
    worker: str = ""
    until: datetime


class PoolWaiter(BaseModel):
    """A run attempt waiting for a permit, in arrival order."""

    run: str
    worker: str = ""
    lease_s: float
    """How long its permit will last once granted (the rest of its start-to-close limit)."""
    asking: bool = True
    """Its request is waiting for an answer; only asking runs are granted a permit (one that
    is not listening might never take it)."""
    answer_at: datetime
    """When its request is answered `not granted` if no permit came."""
    until: datetime
    """When it leaves the line unless it asks again (KEEP_PLACE after its answer)."""


def lease_end(now: datetime, lease_s: float) -> datetime:
    """When a permit leased at `now` for `lease_s` seconds ends (what a permit request's
    validator computes too: a lease too long for a date is refused, not applied)."""
    return now + timedelta(seconds=lease_s)


class PoolState(BaseModel):
    """The pool as every worker shares it: `coord agents`' in use / free / waiting."""

    size: int
    in_use: int
    waiting: int
    """Runs waiting in the ledger for a permit (not those still on the agent's queue)."""

    @property
    def free(self) -> int:
        return max(self.size - self.in_use, 0)


class PermitPool(BaseModel):
    """Permit accounting for an agent's `max_concurrent` across all its workers. Every method
    takes `now`; leases and waits that have ended are dropped as time is brought up to date
    (`expire`), which the ledger does on every message and at `next_deadline`."""

    size: int | None = None
    """The agent's max_concurrent (None: no pool): the smallest that the workers taking part
    (holding a permit or waiting for one) declare, so that none of their declarations is
    exceeded; for runs recorded before `smallest` (a ledger patch), the latest request's."""
    declared: dict[str, int] = Field(default_factory=dict)
    """Each worker's max_concurrent as its latest request says, while it takes part."""
    permits: list[Permit] = Field(default_factory=list)
    waiters: list[PoolWaiter] = Field(default_factory=list)

    def acquire(
        self,
        run: str,
        size: int,
        lease_s: float,
        now: datetime,
        *,
        worker: str = "",
        smallest: bool = True,
    ) -> bool:
        """Whether `run` holds a permit now; else it waits in line, its request answered at
        the latest POOL_WAIT later. A run asking again keeps its place; a holder asking again
        renews its lease (`lease_s` from now). `smallest`: the pool's size is the smallest
        declared (see `size`)."""
        if smallest:
            self.declared[worker] = size
        else:
            self.size = size
        self.expire(now, asking=worker)
        held = next((p for p in self.permits if p.run == run), None)
        if held is not None:
            held.until = lease_end(now, lease_s)  # renewed
            return True
        answer_at = now + POOL_WAIT
        waiter = next((w for w in self.waiters if w.run == run), None)
        if waiter is None:
            waiter = PoolWaiter(run=run, worker=worker, lease_s=lease_s, answer_at=now, until=now)
            self.waiters.append(waiter)
        waiter.asking, waiter.lease_s = True, lease_s
        waiter.answer_at, waiter.until = answer_at, answer_at + KEEP_PLACE
        self._grant(now)
        return self.holds(run)

    def release(self, run: str, now: datetime) -> None:
        """`run` is done with its permit, or leaves the line; the next waiter gets it."""
        self.permits = [p for p in self.permits if p.run != run]
        self.waiters = [w for w in self.waiters if w.run != run]
        self.expire(now)

    def expire(self, now: datetime, *, asking: str | None = None) -> None:
        """Ends the leases, requests and places in line whose time has come, and grants the
        freed permits in turn (`asking`: the worker whose request is being taken)."""
        self.permits = [p for p in self.permits if p.until > now]
        self.waiters = [w for w in self.waiters if w.until > now]
        for waiter in self.waiters:
            waiter.asking = waiter.asking and waiter.answer_at > now
        self._resize(asking)
        self._grant(now)

    def _resize(self, asking: str | None) -> None:
        """Forgets the declarations of workers no longer taking part; the size is the smallest
        of the others (unchanged once none is left, or without declarations)."""
        if not self.declared:
            return
        taking_part = {p.worker for p in self.permits} | {w.worker for w in self.waiters}
        if asking is not None:
            taking_part.add(asking)
        self.declared = {w: n for w, n in self.declared.items() if w in taking_part}
        if self.declared:
            self.size = min(self.declared.values())

    def holds(self, run: str) -> bool:
        return any(p.run == run for p in self.permits)

    def asking(self, run: str) -> bool:
        """Whether `run`'s request waits for its answer."""
        return any(w.run == run and w.asking for w in self.waiters)

    def next_deadline(self) -> datetime | None:
        """When a lease, a request or a place in line ends next (None: nothing out)."""
        ends = [p.until for p in self.permits]
        ends += [w.answer_at if w.asking else w.until for w in self.waiters]
        return min(ends, default=None)

    def state(self, now: datetime) -> PoolState | None:
        """The pool as of `now` (None for an agent that declares no max_concurrent)."""
        if self.size is None:
            return None
        in_use = sum(1 for p in self.permits if p.until > now)
        waiting = sum(1 for w in self.waiters if w.until > now)
        return PoolState(size=self.size, in_use=in_use, waiting=waiting)

    def _grant(self, now: datetime) -> None:
        """Free permits to the asking waiters, first come first served."""
        for waiter in [w for w in self.waiters if w.asking]:
            if len(self.permits) >= (self.size or 0):
                return
            self.waiters.remove(waiter)
            until = lease_end(now, waiter.lease_s)
            self.permits.append(Permit(run=waiter.run, worker=waiter.worker, until=until))


class AgentLedgerState(BaseModel):
    """What the ledger query answers (and `read_ledgers` when an agent has no ledger: closed,
    no runs)."""

    agent_queue: str
    breaker: BreakerStateName = "closed"
    open_until: datetime | None = None
    """When an open breaker lets probes through."""
    recovery_s: float = DEFAULT_RECOVERY.total_seconds()
    breaker_window_s: float = DEFAULT_WINDOW.total_seconds()
    min_calls: int = DEFAULT_MIN_CALLS
    failure_rate_to_open: float = DEFAULT_FAILURE_RATE
    breaker_calls: int = 0
    """Runs that ended in the breaker's window since it last closed (closed breaker only)."""
    breaker_failures: int = 0
    """Those failing in a way that counts against the breaker."""
    breaker_failure_rate: float | None = None
    """None: no runs in the breaker's window."""
    breaker_reasons: dict[str, int] = Field(default_factory=dict)
    """The counted failures by reason (`timeout`, `http_5xx`, ...)."""
    consecutive_failures: int = 0
    consecutive_to_open: int | None = None
    """The declared streak that opens the breaker (None: the failure rate alone)."""
    probes: int = DEFAULT_PROBES
    probes_out: int = 0
    probes_succeeded: int = 0
    """A half-open breaker's probes running and succeeded; it closes when `probes` succeeded."""
    runs: int = 0
    """Runs in the recent window (successes and failures; not the runs turned away)."""
    succeeded: int = 0
    failed: int = 0
    success_rate: float | None = None
    """None: no runs in the window."""
    p50_ms: float | None = None
    window_s: float = WINDOW.total_seconds()
    transitions: list[BreakerTransition] = Field(default_factory=list)
    window: list[WindowBucket] = Field(default_factory=list)
    """The window's buckets, so a reader counts them at its own `now` (`at`)."""
    calls: list[CallSlice] = Field(default_factory=list)
    """The breaker window's slices, likewise."""
    pool: PoolState | None = None
    """Its pool across all workers, for an agent declaring max_concurrent."""
    as_of: datetime | None = None

    def at(self, now: datetime) -> "AgentLedgerState":
        """The state as of `now`: the windows' counts without what has left them, and an open
        breaker whose window has passed half-open. The ledger sets no timers (it changes only
        when told something), so whoever reads it brings it up to date."""
        window = [b for b in self.window if b.start + BUCKET > now - WINDOW]
        stats = RunStats()
        for bucket in window:
            stats.merge(bucket.stats)
        span = timedelta(seconds=self.breaker_window_s)
        calls = window_totals(self.calls, now, span)
        return self.model_copy(
            update={
                "breaker": self.breaker_at(now),
                "calls": window_slices(self.calls, now, span),
                "breaker_calls": calls.calls,
                "breaker_failures": calls.failures,
                "breaker_failure_rate": calls.failure_rate,
                "breaker_reasons": calls.reasons,
                "runs": stats.runs,
                "succeeded": stats.succeeded,
                "failed": stats.failed,
                "success_rate": round(stats.succeeded / stats.runs, 4) if stats.runs else None,
                "p50_ms": stats.p50_ms(),
                "window": window,
                "as_of": now,
            }
        )

    def breaker_at(self, now: datetime) -> BreakerStateName:
        """The state at `now`: an open breaker whose window has passed is half-open even if the
        ledger has not said so yet."""
        if self.breaker == "open" and self.open_until is not None and now >= self.open_until:
            return "half_open"
        return self.breaker

    @property
    def quiet(self) -> bool:
        """Closed, with no failure counted against the agent in its breaker's window nor in a
        row: no worker's runs are pushing it towards open. A worker watches a quiet breaker
        less often (coord.activities.mesh.breakers)."""
        return (
            self.breaker == "closed"
            and self.breaker_failures == 0
            and self.consecutive_failures == 0
        )


class LedgerBook(BaseModel):
    """The ledger's whole state, carried across continue-as-new (books recorded by older code
    read with defaults for what they lack). Every method takes `now`."""

    agent_queue: str
    config: BreakerConfig = Field(default_factory=BreakerConfig)
    breaker: BreakerStateName = "closed"
    consecutive_failures: int = 0
    open_until: datetime | None = None
    calls: CallWindow = Field(default_factory=CallWindow)
    """The closed breaker's window."""
    probes: Probes = Field(default_factory=Probes)
    """The half-open breaker's probes."""
    buckets: list[WindowBucket] = Field(default_factory=list)
    transitions: list[BreakerTransition] = Field(default_factory=list)
    next_seq: int = 1
    last_report: datetime | None = None
    pool: PermitPool = Field(default_factory=PermitPool)

    @model_validator(mode="before")
    @classmethod
    def _one_probe_books(cls, data: Any) -> Any:
        """A book recorded when a half-open breaker had one probe kept its lease's end as
        `probe_until`: the lease of an unnamed probe now."""
        if isinstance(data, dict) and "probe_until" in data:
            data = dict(data)
            until = data.pop("probe_until")
            if until is not None and "probes" not in data:
                data["probes"] = {"out": [{"run": "", "until": until}]}
        return data

    def configure(self, config: BreakerConfig) -> None:
        """The reporting worker's declaration of the agent (the latest wins)."""
        self.config = config

    def tick(self, now: datetime) -> None:
        """Moves an open breaker whose window passed to half-open; drops buckets past the
        window."""
        if self.breaker == "open" and self.open_until is not None and now >= self.open_until:
            recovery = self.config.recovery.total_seconds()
            self._move("half_open", self.open_until, f"open for {recovery:g}s")
            self.probes.clear()
        self.buckets = [b for b in self.buckets if b.start + BUCKET > now - WINDOW]

    def add_stats(self, stats: RunStats, now: datetime) -> None:
        """A worker's batch of runs that ended, into the bucket of `now`; a closed breaker
        judges them."""
        self._heard(now)
        start = _bucket_start(now)
        if not self.buckets or self.buckets[-1].start != start:
            self.buckets.append(WindowBucket(start=start))
        self.buckets[-1].stats.merge(stats)
        self._judge(stats, now)

    def claim_probe(self, run: str, now: datetime) -> bool:
        """Whether `run` may probe the half-open breaker (`Probes.claim`)."""
        self._heard(now)
        return self.breaker == "half_open" and self.probes.claim(run, now, self.config.probes)

    def probe_ended(self, run: str, verdict: Verdict, now: datetime) -> None:
        """A probe's outcome: its success counts towards closing, a counted failure re-opens;
        a failure that does not count, or an abandoned probe, frees its place."""
        self._heard(now)
        if self.breaker != "half_open":
            return
        self.probes.release(run)
        if verdict.ended == "succeeded":
            self.probes.succeeded += 1
            if self.probes.succeeded >= self.config.probes:
                succeeded = self.probes.succeeded
                self._close(now, f"{succeeded} probe{'s' if succeeded > 1 else ''} succeeded")
        elif verdict.counted:
            self._open(now, f"probe failed: {verdict.reason}")

    def report_outcome(self, report: "OutcomeReport", now: datetime) -> None:
        self.configure(report.config)
        if report.probe:
            self.probe_ended(report.run, report.verdict(), now)
            return
        # From a worker before batched failures: one run (its batch counts it too).
        self._heard(now)
        run = RunStats()
        run.record(report.verdict(), 0)
        self._judge(run, now)

    def state(self, now: datetime) -> AgentLedgerState:
        config = self.config
        return AgentLedgerState(
            agent_queue=self.agent_queue,
            breaker=self.breaker,
            open_until=self.open_until if self.breaker == "open" else None,
            recovery_s=config.recovery.total_seconds(),
            breaker_window_s=config.window.total_seconds(),
            min_calls=config.min_calls,
            failure_rate_to_open=config.failure_rate,
            consecutive_failures=self.consecutive_failures,
            consecutive_to_open=config.consecutive,
            probes=config.probes,
            probes_out=sum(1 for p in self.probes.out if p.until > now),
            probes_succeeded=self.probes.succeeded,
            transitions=list(self.transitions),
            window=list(self.buckets),
            calls=list(self.calls.slices),
            pool=self.pool.state(now),
        ).at(now)

    def _heard(self, now: datetime) -> None:
        self.tick(now)
        self.last_report = now

    def _judge(self, stats: RunStats, now: datetime) -> None:
        """The closed breaker's rules on runs that ended: the window's failure rate, and the
        streak when declared."""
        if self.breaker != "closed":
            return
        self.calls.add(stats.runs, stats.counted, stats.reasons, now, self.config.window)
        self.consecutive_failures = stats.continued_streak(self.consecutive_failures)
        reason = self._streak_opens() or self.calls.opens(self.config, now)
        if reason is not None:
            self._open(now, reason)

    def _streak_opens(self) -> str | None:
        """Why the declared streak opens the breaker, or None."""
        wanted, streak = self.config.consecutive, self.consecutive_failures
        if wanted is None or streak < wanted:
            return None
        return f"{streak} consecutive failures"

    def _open(self, now: datetime, reason: str) -> None:
        self._move("open", now, reason)
        self.open_until = now + self.config.recovery
        self.probes.clear()
        self.calls.clear()

    def _close(self, now: datetime, reason: str) -> None:
        self._move("closed", now, reason)
        self.consecutive_failures = 0
        self.probes.clear()
        self.calls.clear()

    def _move(self, to_state: BreakerStateName, now: datetime, reason: str) -> None:
        self.transitions.append(
            BreakerTransition(
                seq=self.next_seq, at=now, from_state=self.breaker, to_state=to_state, reason=reason
            )
        )
        self.transitions = self.transitions[-MAX_TRANSITIONS:]
        self.next_seq += 1
        self.breaker = to_state


def _bucket_start(now: datetime) -> datetime:
    seconds = BUCKET.total_seconds()
    epoch = now.timestamp()
    return datetime.fromtimestamp(epoch - epoch % seconds, now.tzinfo)


class LedgerStart(BaseModel):
    """The ledger's start input (and continue-as-new's, with the book carried)."""

    model_config = ConfigDict(extra="forbid")

    agent_queue: str = Field(min_length=1, max_length=MAX_ID)
    config: BreakerConfig = Field(default_factory=BreakerConfig)
    book: LedgerBook | None = None


class OutcomeReport(BaseModel):
    """A probe's outcome (a worker before batched failures also reported failures and the
    success ending a streak this way, with `probe` false)."""

    model_config = ConfigDict(extra="forbid")

    worker: Identity = ""
    config: BreakerConfig = Field(default_factory=BreakerConfig)
    run: Identity = ""
    """The probe's run attempt, as it claimed the probe."""
    succeeded: bool
    failure_type: str | None = Field(default=None, max_length=MAX_NAME)
    counted: bool | None = None
    """Whether the failure counts against the breaker (None: from a worker before the counting
    rules, which reported only failures that counted)."""
    reason: str = Field(default="", max_length=MAX_NAME)
    """The failure's health reason, else its type."""
    probe: bool = False
    abandoned: bool = False
    """The probe ended without an outcome (cancelled): says nothing of the agent."""

    def verdict(self) -> Verdict:
        if self.abandoned:
            return ABANDONED
        if self.succeeded:
            return SUCCEEDED
        return Verdict(
            ended="failed",
            counted=self.counted is not False,
            reason=self.reason or self.failure_type or "",
        )


class ProbeClaim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker: Identity = ""
    config: BreakerConfig = Field(default_factory=BreakerConfig)
    run: Identity = ""
    """The run attempt asking to probe ("" from workers that did not name it)."""


class ProbeGrant(BaseModel):
    granted: bool
    state: AgentLedgerState


class StatsReport(BaseModel):
    """A worker's runs of the agent since its last report, sent every few seconds (at once when
    they hold a failure that counts)."""

    model_config = ConfigDict(extra="forbid")

    worker: Identity = ""
    config: BreakerConfig = Field(default_factory=BreakerConfig)
    stats: RunStats

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        if max(self.stats.counts()) > MAX_BATCH_RUNS:
            raise ValueError(f"stats: at most {MAX_BATCH_RUNS} runs per report")
        return self


class PermitRequest(BaseModel):
    """A run attempt asking its agent's ledger for a permit (or, released, giving it back)."""

    model_config = ConfigDict(extra="forbid")

    run: Identity = Field(min_length=1)
    worker: Identity = ""
    size: int = Field(default=1, ge=1, le=MAX_POOL_SIZE)
    """The agent's max_concurrent as the asking worker declares it."""
    lease_s: float = Field(default=60.0, gt=0, le=MAX_LEASE.total_seconds())


class PermitGrant(BaseModel):
    granted: bool
    pool: PoolState | None = None
