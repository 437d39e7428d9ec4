"""Agent health (a heartbeat monitor, read from the Temporal server): an agent is
`healthy` while a worker serving its task queue was seen within the heartbeat timeout (10 s),
`unreachable` otherwise. A worker is seen by its polls of the queue and by the worker
heartbeats it sends (every 3 s from `coord worker`); the server reports both, so nothing here
keeps state. Pure: the server side is infra/agent_health.py."""

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field

from coord.models.mesh.ledger import AgentLedgerState, BreakerStateName, PoolState

HEARTBEAT_TIMEOUT = timedelta(seconds=10)
"""The heartbeat timeout (10 s): a worker not seen for this long is gone."""

WorkerState = Literal["running", "shutting_down", "shutdown", "unknown"]
AgentStatus = Literal["healthy", "unreachable"]


class WorkerSeen(BaseModel):
    """One worker of an agent's queue, as the server last saw it."""

    identity: str
    last_poll: datetime | None = None
    """When it last asked the queue for a run. A poll waits up to a minute for one, and its
    start is what the server records: an idle worker's last poll may be older than the
    timeout, which is why worker heartbeats count too."""
    last_heartbeat: datetime | None = None
    state: WorkerState = "unknown"
    """What its last worker heartbeat said (`unknown` without heartbeats)."""

    @property
    def last_seen(self) -> datetime | None:
        seen = [at for at in (self.last_poll, self.last_heartbeat) if at is not None]
        return max(seen, default=None)

    def alive(self, now: datetime, timeout: timedelta = HEARTBEAT_TIMEOUT) -> bool:
        """Seen within `timeout`, and not saying it has stopped."""
        if self.state in ("shutting_down", "shutdown"):
            return False
        return self.last_seen is not None and now - self.last_seen <= timeout


class AgentPool(BaseModel):
    """An agent's pool (a resource pool's status). For an agent declaring
    max_concurrent, its ledger's permits across all its workers (`with_ledger`); otherwise the
    run slots of the live workers serving it, as their last worker heartbeats (every 3 s) said.
    Waiting: the runs on its queue that no worker has taken yet, and those taken that wait in
    the ledger for a permit."""

    in_use: int
    free: int
    waiting: int

    @property
    def size(self) -> int:
        return self.in_use + self.free

    @property
    def free_share(self) -> float:
        """The share of the pool free now (0 when it has no slots)."""
        return self.free / self.size if self.size else 0.0


class AgentHealth(BaseModel):
    """One row of `coord agents`."""

    agent: str
    task_queue: str
    kind: str | None = None
    """From the agents file or registry that declares it; None for one only found polling."""
    capabilities: list[str] = Field(default_factory=list)
    """What it offers to runs naming capabilities, as declared there (none when not declared)."""
    status: AgentStatus
    workers: list[WorkerSeen] = Field(default_factory=list)
    backlog: int = 0
    """Runs waiting on the queue for a worker (the server's approximate backlog count)."""
    backlog_age_s: float | None = None
    """How long the oldest waiting run has waited."""
    pool: AgentPool | None = None
    """None when no live worker reports its slots (no worker heartbeats)."""
    breaker: BreakerStateName | None = None
    """Its circuit breaker, from its ledger (`with_ledger`). The breaker fields are None while
    the ledger is unread (it did not answer in time): unknown, which `closed` would not say."""
    open_until: datetime | None = None
    breaker_calls: int | None = None
    """Runs in the closed breaker's window (since it closed) ..."""
    breaker_failure_rate: float | None = None
    """... the share of them failing in a way that counts (None: no runs) ..."""
    breaker_reasons: dict[str, int] | None = None
    """... and those failures by reason (`timeout`, `http_5xx`, ...)."""
    probes: int | None = None
    probes_succeeded: int | None = None
    """A half-open breaker's probes to succeed, and those that have."""
    runs: int | None = None
    """Runs in the ledger's recent window (success rate and p50 are over these); None while
    the ledger is unread, as the breaker fields."""
    success_rate: float | None = None
    p50_ms: float | None = None

    @classmethod
    def of(
        cls,
        agent: str,
        task_queue: str,
        workers: list[WorkerSeen],
        now: datetime,
        *,
        kind: str | None = None,
        backlog: int = 0,
        backlog_age_s: float | None = None,
        pool: AgentPool | None = None,
    ) -> "AgentHealth":
        """The row, its status from whether any of its workers is alive at `now`."""
        alive = any(worker.alive(now) for worker in workers)
        return cls(
            agent=agent,
            task_queue=task_queue,
            kind=kind,
            status="healthy" if alive else "unreachable",
            workers=workers,
            backlog=backlog,
            backlog_age_s=backlog_age_s,
            pool=pool,
        )

    def with_ledger(
        self, ledger: AgentLedgerState, max_concurrent: int | None = None
    ) -> "AgentHealth":
        """The row with its ledger's breaker, recent-window stats and, for an agent declaring
        max_concurrent, its pool across all workers (`max_concurrent`: as declared to the
        reader, for a pool whose ledger has granted no permit yet)."""
        return self.model_copy(
            update={
                "pool": self._pool_across_workers(ledger, max_concurrent),
                "breaker": ledger.breaker,
                "open_until": ledger.open_until if ledger.breaker == "open" else None,
                "breaker_calls": ledger.breaker_calls,
                "breaker_failure_rate": ledger.breaker_failure_rate,
                "breaker_reasons": ledger.breaker_reasons,
                "probes": ledger.probes,
                "probes_succeeded": ledger.probes_succeeded,
                "runs": ledger.runs,
                "success_rate": ledger.success_rate,
                "p50_ms": ledger.p50_ms,
            }
        )

    def _pool_across_workers(
        self, ledger: AgentLedgerState, max_concurrent: int | None
    ) -> AgentPool | None:
        """The ledger's pool, when the agent declares one; else the workers' slots."""
        pool = ledger.pool
        if pool is None and max_concurrent is not None:
            pool = PoolState(size=max_concurrent, in_use=0, waiting=0)
        if pool is None:
            return self.pool
        return AgentPool(in_use=pool.in_use, free=pool.free, waiting=self.backlog + pool.waiting)

    @property
    def free_pool_share(self) -> float:
        """The auction's resource availability: the pool's free share, 1.0 when unknown."""
        return self.pool.free_share if self.pool is not None else 1.0
