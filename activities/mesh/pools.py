"""The pool around `run_agent` (a resource pool): an agent declaring `max_concurrent`
runs at most that many times at once across every worker serving it.

Each worker's slot limit (its `max_concurrent_activities`) is the first line: a worker takes
no more runs of the agent than its slots. Across workers, a run takes one of the pool's permits
from the agent's ledger (the `AgentLedger` workflow) before the agent is called, and gives it
back after. The permit is a lease the run renews while it goes on, so a worker killed while
holding one cannot keep it: the renewals stop and the lease ends (`lease`).

A run that finds no permit free waits its turn in the ledger (first come, first served),
heartbeating, for at most POOL_PATIENCE (and half its time limit); then it fails `pool_full`
without calling the agent, retried after a spread delay. Agents without `max_concurrent` cost
nothing here: no message to any ledger."""

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from coord.activities import metrics
from coord.infra.heartbeats import beating
from coord.infra.ledgers import LedgerClient
from coord.infra.logs import get_logger
from coord.models.mesh.agents import AgentRegistry, AgentRequest
from coord.models.mesh.ledger import POOL_WAIT, BreakerConfig, PoolState
from coord.models.wire.contract import FailureType, agent_task_queue, failure

POOL_PATIENCE = timedelta(seconds=30)
"""The longest a run waits for a permit, holding its worker slot, before it fails pool_full."""
PATIENCE_SHARE = 4
"""A run whose workflow takes its refusals back (`AgentRequest.gates_return`) waits here at
most a quarter of its time limit: the rest is the agent's. Its workflow then sends it again
soon enough that it keeps its place in line (RETURNED_RETRY, within the ledger's KEEP_PLACE)."""
RETURNED_RETRY = timedelta(milliseconds=500)
POOL_RETRY = timedelta(seconds=2)
"""About when a run turned away with pool_full is retried: spread over 0.5x to 1.5x of it, so
runs turned away together do not come back together."""
LEASE_SLACK = timedelta(seconds=2)
"""Added to a permit's lease (clocks, messages in flight)."""
RENEWED_LEASE = timedelta(minutes=1)
"""A permit's lease, renewed while its run goes on; a run with a heartbeat timeout has that
instead (at least MIN_LEASE), so its permit outlives a dead worker no longer than the run does
on the server. Never beyond the run's start-to-close limit."""
MIN_LEASE = timedelta(seconds=2)
RENEWALS_PER_LEASE = 3
HEARTBEATS_PER_TIMEOUT = 3
"""How often a run waiting for its ledger's answer heartbeats, per heartbeat timeout."""
ASK_TIMEOUT = POOL_WAIT + timedelta(seconds=10)
"""How long one request to the ledger may take, asked again while it fails, before the run
counts the ledger unreachable."""
REASK_PAUSE = 0.2
"""Seconds before a request is sent again after a failure or an immediate `not granted`."""

T = TypeVar("T")
log = get_logger("pool")


def run_key(info: activity.Info) -> str:
    """The run attempt a permit is for: a retry of the same run is another attempt."""
    return f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}#{info.attempt}"


def time_left(info: activity.Info, now: datetime) -> timedelta | None:
    """What remains of the run's start-to-close limit (None without one)."""
    if info.start_to_close_timeout is None:
        return None
    return max(info.started_time + info.start_to_close_timeout - now, timedelta(0))


def queued(info: activity.Info) -> float:
    """The seconds an activity task of the run waited on its agent's queue for a worker's
    slot, which for an agent with a pool is its first line (a worker takes no more of its runs
    than `max_concurrent`): from its attempt's scheduling to its start, by the server's clock.
    Nothing for a local run: it waits on no queue."""
    if info.is_local:
        return 0.0
    return max((info.started_time - info.current_attempt_scheduled_time).total_seconds(), 0.0)


def lease_span(info: activity.Info) -> timedelta:
    """How long a permit lasts between renewals: the run's heartbeat timeout, else
    RENEWED_LEASE."""
    return max(info.heartbeat_timeout or RENEWED_LEASE, MIN_LEASE)


def lease(info: activity.Info, now: datetime) -> timedelta:
    """The lease to ask for at `now`: a span, or what remains of the run's time limit if less,
    plus LEASE_SLACK."""
    span = lease_span(info)
    left = time_left(info, now)
    return min(span, left if left is not None else span) + LEASE_SLACK


def pool_full(
    agent: str,
    size: int,
    waited: timedelta,
    pool: PoolState | None,
    retry_after: timedelta | None = None,
) -> ApplicationError:
    waiting = f", {pool.waiting} runs waiting" if pool is not None else ""
    return turned_away(
        agent,
        f"all {size} permits of its pool in use across its workers for "
        f"{waited.total_seconds():g}s{waiting}",
        retry_after,
    )


def ledger_unreachable(agent: str, error: BaseException) -> ApplicationError:
    """No answer from the ledger: the run does not go on without a permit (the pool is a
    limit the agent's resources need), it is retried like a full pool."""
    log.warning("agent ledger unreachable for a permit", agent=agent, error=repr(error))
    return turned_away(agent, f"its ledger did not grant a pool permit ({error!r})")


def turned_away(agent: str, why: str, retry_after: timedelta | None = None) -> ApplicationError:
    """`pool_full`: the agent was not called; retried after `retry_after`, else about
    POOL_RETRY."""
    return failure(
        FailureType.POOL_FULL,
        f"agent {agent!r}: {why}; the run did not call the agent",
        non_retryable=False,
        retry_after=retry_after or POOL_RETRY * random.uniform(0.5, 1.5),
    )


class AgentPools:
    """The pools of the agents a worker declares with max_concurrent, against the ledgers of the
    deployment named by its coordinator queue `home`."""

    def __init__(self, client: Client, home: str, registry: AgentRegistry) -> None:
        self._client = client
        self._home = home
        self._registry = registry

    def holding(self, request: AgentRequest) -> contextlib.AbstractAsyncContextManager[float]:
        """A permit of the request's agent's pool around its run, giving the seconds the run
        waited in line for it (on its agent's queue, `queued`, then in its ledger); nothing (no
        wait) for an agent without max_concurrent, or declared inline (no queue, no ledger, of
        its own)."""
        size = self._size(request)
        if size is None:
            return contextlib.nullcontext(0.0)
        share = PATIENCE_SHARE if request.gates_return else 2
        return self._permit(request.agent, size, share)

    def _size(self, request: AgentRequest) -> int | None:
        if request.config is not None or request.agent not in self._registry:
            return None
        return self._registry.max_concurrent(request.agent)

    @contextlib.asynccontextmanager
    async def _permit(self, agent: str, size: int, share: int) -> AsyncIterator[float]:
        ledger = self._ledger(agent)
        run = run_key(activity.info())
        try:
            waited = queued(activity.info()) + await self._acquire(ledger, agent, run, size, share)
        except BaseException:
            await _release(ledger, run)  # leaves the line (a retry is another attempt)
            raise
        renewing = asyncio.create_task(_renew(ledger, run, size))
        try:
            yield waited
        finally:
            renewing.cancel()
            await asyncio.wait({renewing})  # not raising: its cancel is not this run's
            metrics.pool_seen(agent, await _release(ledger, run))

    async def _acquire(
        self, ledger: LedgerClient, agent: str, run: str, size: int, share: int
    ) -> float:
        """A permit for `run`, waiting in line at most POOL_PATIENCE and 1/`share` of the run's
        time limit (the seconds it waited); then `pool_full`."""
        info = activity.info()
        started = datetime.now(UTC)
        left = time_left(info, started)
        patience = min(POOL_PATIENCE, left / share) if left is not None else POOL_PATIENCE
        while True:
            leased = lease(info, datetime.now(UTC)).total_seconds()
            asked = time.monotonic()
            remaining = (patience - (datetime.now(UTC) - started)).total_seconds()
            asking = answered(ledger.acquire_permit, run, size, leased)
            try:
                grant = await _within(remaining, _heartbeating(asking, info))
            except Exception as error:  # any failure to be answered: the run does not go on
                raise ledger_unreachable(agent, error) from None
            if grant is not None and grant.granted:
                metrics.pool_seen(agent, grant.pool)
                return (datetime.now(UTC) - started).total_seconds()
            activity.heartbeat()
            waited = datetime.now(UTC) - started
            if waited >= patience:
                pool = grant.pool if grant is not None else None
                again = RETURNED_RETRY if share == PATIENCE_SHARE else None
                raise pool_full(agent, size, waited, pool, again)
            if time.monotonic() - asked < REASK_PAUSE:
                await asyncio.sleep(REASK_PAUSE)  # answered at once: the ledger is moving on

    def _ledger(self, agent: str) -> LedgerClient:
        declaration = self._registry.declarations.get(agent)
        config = declaration.breaker if declaration is not None else BreakerConfig()
        queue = agent_task_queue(agent, self._home)
        return LedgerClient(self._client, queue, self._home, config, self._client.identity)


async def _within(seconds: float, asking: Awaitable[T]) -> T | None:
    """`asking`'s answer, or None when it takes longer than `seconds` (the run's patience ends
    first; a permit granted meanwhile is given back with the run's release)."""
    try:
        return await asyncio.wait_for(asking, max(seconds, REASK_PAUSE))
    except TimeoutError:
        return None


async def _heartbeating(asking: Awaitable[T], info: activity.Info) -> T:
    """`asking`'s answer, the run heartbeating meanwhile every third of its heartbeat timeout.
    The ledger holds an ask up to POOL_WAIT (and longer when the server is slow), as long as a
    short heartbeat timeout: a run heartbeating only between answers timed out while it waited
    in line and was retried, and an attempt timed out in line could still take a permit and
    run the agent beside its retry."""
    every = (info.heartbeat_timeout or RENEWED_LEASE).total_seconds() / HEARTBEATS_PER_TIMEOUT
    return await beating(asking, every, activity.heartbeat)


async def answered(ask: Callable[..., Awaitable[T]], *args: Any) -> T:
    """The ledger's answer to `ask(*args)`, asked again while it fails (the ledger refuses
    messages for a moment while it continues as new), for at most ASK_TIMEOUT. Asking again
    is safe: requests and releases name their run attempt."""
    deadline = time.monotonic() + ASK_TIMEOUT.total_seconds()
    while True:
        try:
            return await asyncio.wait_for(ask(*args), deadline - time.monotonic())
        except Exception:
            if time.monotonic() + REASK_PAUSE >= deadline:
                raise
        await asyncio.sleep(REASK_PAUSE)


async def _renew(ledger: LedgerClient, run: str, size: int) -> None:
    """While the run goes on, asks for its permit again every third of its lease: a holder is
    granted at once, its lease running from now. When the worker dies the renewals stop and
    the lease ends on its own."""
    info = activity.info()
    every = lease_span(info).total_seconds() / RENEWALS_PER_LEASE
    while True:
        await asyncio.sleep(every)
        leased = lease(info, datetime.now(UTC)).total_seconds()
        try:
            grant = await answered(ledger.acquire_permit, run, size, leased)
        except Exception as error:
            log.warning("agent ledger unreachable for a lease renewal", run=run, error=repr(error))
            continue
        if not grant.granted:
            log.warning("a run's permit lapsed before its renewal; it runs on", run=run)


async def _release(ledger: LedgerClient, run: str) -> PoolState | None:
    """Gives the permit back, waiting a bounded time for the ledger's answer (the pool after,
    None without one); the release goes on if this run is cancelled meanwhile. When the ledger
    cannot be reached, the lease ends on its own."""
    releasing = asyncio.ensure_future(answered(ledger.release_permit, run))
    releasing.add_done_callback(_log_failed_release)
    await asyncio.wait({releasing}, timeout=ASK_TIMEOUT.total_seconds())
    if not releasing.done() or releasing.cancelled() or releasing.exception() is not None:
        return None
    return releasing.result().pool


def _log_failed_release(releasing: "asyncio.Future[Any]") -> None:
    error = None if releasing.cancelled() else releasing.exception()
    if releasing.cancelled() or error is not None:
        log.warning("agent ledger unreachable for a release; its lease will end", error=repr(error))
