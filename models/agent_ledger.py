"""An agent's ledger: its circuit breaker (seed 003) and its recent-window run stats, shared by
every workflow that uses the agent. Pure: the `AgentLedger` entity workflow holds one
`LedgerBook` per agent queue; workers read it (`AgentLedgerState`) and report to it.

The breaker: `closed` until `failures` consecutive failures of retryable types (default 5);
then `open` for `recovery` (default 30 s), while runs fail fast with `circuit_open`; then
`half_open`: exactly one probe run is let through (a lease, so a probe whose worker died does not
hold the breaker half-open for ever); its success closes the breaker, its failure re-opens it.

The window: runs that succeeded and failed, and the durations of the successful ones (a
log-scale histogram, so memory stays bounded however many runs there are), in time buckets over
the last WINDOW; the success rate and the median duration are read from it.

The pool (seed 003's resource pool, for an agent declaring `max_concurrent`): permits to run,
at most `size` out at once across every worker serving the agent. A permit is a lease (a run
whose worker died gives its permit back when the lease ends); a run asking while none is free
waits its turn, first come first served, for a bounded time (`PermitPool`)."""

import math
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coord.models.durations import Duration

BreakerStateName = Literal["closed", "open", "half_open"]
DEFAULT_FAILURES = 5
DEFAULT_RECOVERY = timedelta(seconds=30)
PROBE_LEASE = timedelta(minutes=1)
"""How long a granted probe holds the half-open breaker before another run may probe (its
worker may have died). A probe that runs longer is not stopped; a second probe may start."""
HALF_OPEN_RETRY = timedelta(seconds=2)
"""When a run turned away while a probe is out may try again."""
WINDOW = timedelta(minutes=5)
"""The recent window of the success rate and the p50."""
BUCKET = timedelta(seconds=30)
"""The window's granularity: whole buckets leave it."""
HISTOGRAM_BASE = 2 ** (1 / 8)
"""Duration histogram bins grow by this factor (about 9%): the p50 is within about 4.5%."""
MIN_DURATION_MS = 0.01
MAX_TRANSITIONS = 20
"""Breaker transitions kept, newest last (what the health monitor reads)."""
POOL_WAIT = timedelta(seconds=2)
"""How long one request for a permit waits in the ledger for a free one before it is answered
`not granted` (the worker then heartbeats its run and asks again, keeping its turn)."""
KEEP_PLACE = POOL_WAIT
"""How long a run answered `not granted` keeps its place in line (and counts as waiting)."""


class BreakerConfig(BaseModel):
    """An agent declaration's `breaker:` (`{failures: 5, recovery: 30s}`)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """False: the agent's runs never consult the ledger (no breaker, no window stats)."""
    failures: int = Field(default=DEFAULT_FAILURES, ge=1, le=10_000)
    """Consecutive failures of retryable types that open the breaker."""
    recovery: Duration = DEFAULT_RECOVERY
    """How long the breaker stays open before a probe run may test the agent again."""


def duration_bin(duration_ms: float) -> int:
    """The histogram bin of a duration."""
    return round(math.log(max(duration_ms, MIN_DURATION_MS), HISTOGRAM_BASE))


def bin_duration(index: int) -> float:
    """The duration a bin stands for (ms)."""
    return float(HISTOGRAM_BASE**index)


class RunStats(BaseModel):
    """Runs counted by a worker since its last report (or in one bucket of the window)."""

    model_config = ConfigDict(extra="forbid")

    succeeded: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    durations: dict[int, int] = Field(default_factory=dict)
    """Successful runs' durations: histogram bin -> count."""

    @property
    def runs(self) -> int:
        return self.succeeded + self.failed

    def record(self, succeeded: bool, duration_ms: float) -> None:
        if succeeded:
            self.succeeded += 1
            index = duration_bin(duration_ms)
            self.durations[index] = self.durations.get(index, 0) + 1
        else:
            self.failed += 1

    def merge(self, other: "RunStats") -> None:
        self.succeeded += other.succeeded
        self.failed += other.failed
        for index, count in other.durations.items():
            self.durations[index] = self.durations.get(index, 0) + count

    def p50_ms(self) -> float | None:
        """The median successful duration (the bin it falls in), None without successes."""
        total = sum(self.durations.values())
        seen = 0
        for index in sorted(self.durations):
            seen += self.durations[index]
            if seen * 2 >= total:
                return round(bin_duration(index), 1)
        return None


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
            held.until = now + timedelta(seconds=lease_s)  # renewed
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
            until = now + timedelta(seconds=waiter.lease_s)
            self.permits.append(Permit(run=waiter.run, worker=waiter.worker, until=until))


class AgentLedgerState(BaseModel):
    """What the ledger query answers (and `read_ledgers` when an agent has no ledger: closed,
    no runs)."""

    agent_queue: str
    breaker: BreakerStateName = "closed"
    open_until: datetime | None = None
    """When an open breaker lets a probe through."""
    consecutive_failures: int = 0
    failures_to_open: int = DEFAULT_FAILURES
    recovery_s: float = DEFAULT_RECOVERY.total_seconds()
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
    pool: PoolState | None = None
    """Its pool across all workers, for an agent declaring max_concurrent."""
    as_of: datetime | None = None

    def at(self, now: datetime) -> "AgentLedgerState":
        """The state as of `now`: the window's counts without the buckets that have left it,
        and an open breaker whose window has passed half-open. The ledger sets no timers (it
        changes only when told something), so whoever reads it brings it up to date."""
        window = [b for b in self.window if b.start + BUCKET > now - WINDOW]
        stats = RunStats()
        for bucket in window:
            stats.merge(bucket.stats)
        return self.model_copy(
            update={
                "breaker": self.breaker_at(now),
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


class LedgerBook(BaseModel):
    """The ledger's whole state, carried across continue-as-new. Every method takes `now`."""

    agent_queue: str
    config: BreakerConfig = Field(default_factory=BreakerConfig)
    breaker: BreakerStateName = "closed"
    consecutive_failures: int = 0
    open_until: datetime | None = None
    probe_until: datetime | None = None
    """While half-open: when the granted probe's lease ends (None: no probe out)."""
    buckets: list[WindowBucket] = Field(default_factory=list)
    transitions: list[BreakerTransition] = Field(default_factory=list)
    next_seq: int = 1
    last_report: datetime | None = None
    pool: PermitPool = Field(default_factory=PermitPool)

    def configure(self, config: BreakerConfig) -> None:
        """The reporting worker's declaration of the agent (the latest wins)."""
        self.config = config

    def tick(self, now: datetime) -> None:
        """Moves an open breaker whose window passed to half-open; drops buckets past the
        window."""
        if self.breaker == "open" and self.open_until is not None and now >= self.open_until:
            recovery = self.config.recovery.total_seconds()
            self._move("half_open", self.open_until, f"open for {recovery:g}s")
            self.probe_until = None
        self.buckets = [b for b in self.buckets if b.start + BUCKET > now - WINDOW]

    def failed(self, failure_type: str, now: datetime, *, probe: bool = False) -> None:
        """A run failed with a retryable type (the caller leaves out the others)."""
        self.tick(now)
        self.last_report = now
        self.consecutive_failures += 1
        if self.breaker == "half_open" and (probe or self.probe_until is None):
            self._open(now, f"probe failed: {failure_type}")
        elif self.breaker == "closed" and self.consecutive_failures >= self.config.failures:
            streak = self.consecutive_failures
            self._open(now, f"{streak} consecutive failures, last {failure_type}")

    def succeeded(self, now: datetime, *, probe: bool = False) -> None:
        """A run succeeded: the streak ends; a probe's success closes the breaker. A success
        from a run started before the breaker opened does not close it (only a probe does)."""
        self.tick(now)
        self.last_report = now
        self.consecutive_failures = 0
        if self.breaker == "half_open" and (probe or self.probe_until is None):
            self._move("closed", now, "probe succeeded")
            self.probe_until = None

    def probe_abandoned(self, now: datetime) -> None:
        """The probe ended without an outcome (cancelled): the half-open breaker lets another
        probe through at once, not at the end of the abandoned one's lease."""
        self.tick(now)
        self.last_report = now
        if self.breaker == "half_open":
            self.probe_until = None

    def claim_probe(self, now: datetime) -> bool:
        """Whether the caller may run the one probe of a half-open breaker."""
        self.tick(now)
        self.last_report = now
        if self.breaker != "half_open":
            return False
        if self.probe_until is not None and now < self.probe_until:
            return False
        self.probe_until = now + PROBE_LEASE
        return True

    def add_stats(self, stats: RunStats, now: datetime) -> None:
        """A worker's batch of counted runs, into the bucket of `now`."""
        self.tick(now)
        self.last_report = now
        start = _bucket_start(now)
        if not self.buckets or self.buckets[-1].start != start:
            self.buckets.append(WindowBucket(start=start))
        self.buckets[-1].stats.merge(stats)

    def state(self, now: datetime) -> AgentLedgerState:
        return AgentLedgerState(
            agent_queue=self.agent_queue,
            breaker=self.breaker,
            open_until=self.open_until if self.breaker == "open" else None,
            consecutive_failures=self.consecutive_failures,
            failures_to_open=self.config.failures,
            recovery_s=self.config.recovery.total_seconds(),
            transitions=list(self.transitions),
            window=list(self.buckets),
            pool=self.pool.state(now),
        ).at(now)

    def _open(self, now: datetime, reason: str) -> None:
        self._move("open", now, reason)
        self.open_until = now + self.config.recovery
        self.probe_until = None

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

    agent_queue: str = Field(min_length=1)
    config: BreakerConfig = Field(default_factory=BreakerConfig)
    book: LedgerBook | None = None


class OutcomeReport(BaseModel):
    """A run's outcome that matters to the breaker: a failure of a retryable type, the success
    that ends a failure streak, or a probe's outcome. Runs that go well while the breaker is
    closed are not reported one by one (they are in the batched `StatsReport`)."""

    model_config = ConfigDict(extra="forbid")

    worker: str = ""
    config: BreakerConfig = Field(default_factory=BreakerConfig)
    succeeded: bool
    failure_type: str | None = None
    probe: bool = False
    abandoned: bool = False
    """The probe ended without an outcome (cancelled): says nothing of the agent."""


class ProbeClaim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker: str = ""
    config: BreakerConfig = Field(default_factory=BreakerConfig)


class ProbeGrant(BaseModel):
    granted: bool
    state: AgentLedgerState


class StatsReport(BaseModel):
    """A worker's runs of the agent since its last report, sent every few seconds."""

    model_config = ConfigDict(extra="forbid")

    worker: str = ""
    config: BreakerConfig = Field(default_factory=BreakerConfig)
    stats: RunStats


class PermitRequest(BaseModel):
    """A run attempt asking its agent's ledger for a permit (or, released, giving it back)."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(min_length=1)
    worker: str = ""
    size: int = Field(default=1, ge=1)
    """The agent's max_concurrent as the asking worker declares it."""
    lease_s: float = Field(default=60.0, gt=0)


class PermitGrant(BaseModel):
    granted: bool
    pool: PoolState | None = None
