"""The circuit breaker around `run_agent`, as one worker sees it: a local view of each agent's
ledger (the `AgentLedger` workflow), refreshed by query about once a second.

While the view says open, a run fails fast with `circuit_open` without calling the agent (its
next retry at the end of the open window); when the window has passed, the run asks the ledger
for the one probe. Runs that go well while the breaker is closed cost no message of their own:
they are counted here and sent in one batch every STATS_INTERVAL. Only what changes the breaker
is reported as it happens: a failure of a retryable type, the success that ends a failure
streak, a probe's outcome. The ledger being unreachable never fails a run: the breaker then lets
runs through (and the miss is logged)."""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from coord.infra.ledgers import LedgerClient
from coord.infra.logs import get_logger
from coord.models.agent_ledger import HALF_OPEN_RETRY, AgentLedgerState, BreakerConfig, RunStats
from coord.models.agents import AgentRegistry, AgentRequest
from coord.models.contract import (
    NOT_RETRYABLE,
    FailureType,
    agent_task_queue,
    failure,
    failure_type_of,
)

REFRESH_INTERVAL = 1.0
"""Seconds a worker trusts its view of a ledger before it queries again."""
MAX_STALE = 5.0
"""Seconds after which runs wait for the view's refresh instead of going on with it."""
STATS_INTERVAL = 2.0
"""Seconds between a worker's batched stats reports of an agent."""
LEDGER_TIMEOUT = 5.0
"""Seconds a ledger query or update may take before the run goes on without it."""
MIN_RETRY = timedelta(milliseconds=100)

T = TypeVar("T")
log = get_logger("breaker")


def counts_against_breaker(error: BaseException) -> bool:
    """A failure of a retryable type, as the agent raised it (before a step's `retry_on`):
    what retrying cannot fix (bad input, no authorization) says nothing about the agent's
    health, and `circuit_open` is the breaker's own."""
    failure_type = failure_type_of(error)
    if isinstance(error, ApplicationError) and error.non_retryable:
        return False
    return failure_type not in NOT_RETRYABLE and failure_type != FailureType.CIRCUIT_OPEN


def circuit_open(agent: str, retry_after: timedelta, until: datetime | None) -> ApplicationError:
    when = f" until {until:%H:%M:%S} UTC" if until else " (a probe run is testing it)"
    return failure(
        FailureType.CIRCUIT_OPEN,
        f"agent {agent!r}: circuit breaker open{when}; the run did not call the agent",
        non_retryable=False,
        retry_after=max(retry_after, MIN_RETRY),
    )


class AgentBreaker:
    """One agent's breaker on this worker: the view, the probe, the reports, the batch."""

    def __init__(self, agent: str, ledger: LedgerClient) -> None:
        self.agent = agent
        self._ledger = ledger
        self._view = AgentLedgerState(agent_queue=ledger.agent_queue)
        self._read_at = float("-inf")
        self._denied_until = float("-inf")
        """While another run holds the probe, runs here fail fast without asking again."""
        self._refresh: asyncio.Task[None] | None = None
        self._stats = RunStats()
        self._flush: asyncio.Task[None] | None = None
        self._closed = False

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Around one run of the agent: fails fast while open, takes the probe when due,
        records the outcome."""
        probe = await self._admit()
        started = time.monotonic()
        try:
            yield
        except asyncio.CancelledError:
            if probe:  # else the half-open breaker would wait for the probe's lease to end
                await self._report(self._ledger.probe_abandoned())
            raise
        except Exception as error:
            await self._finished(error, probe, started)
            raise
        await self._finished(None, probe, started)

    async def _admit(self) -> bool:
        """Whether the run is the probe; raises circuit_open when it may not run."""
        view = await self._current()
        now = datetime.now(UTC)
        state = view.breaker_at(now)
        if state == "closed":
            return False
        if state == "open" and view.open_until is not None:
            raise circuit_open(self.agent, view.open_until - now, view.open_until)
        if time.monotonic() < self._denied_until:
            raise circuit_open(self.agent, HALF_OPEN_RETRY, None)
        grant = await self._quietly(self._ledger.claim_probe())
        if grant is None:
            return False
        self._seen(grant.state)
        if grant.granted or grant.state.breaker == "closed":
            return grant.granted
        until = grant.state.open_until
        if until is None:
            self._denied_until = time.monotonic() + HALF_OPEN_RETRY.total_seconds()
        raise circuit_open(self.agent, until - now if until else HALF_OPEN_RETRY, until)

    async def _finished(self, error: Exception | None, probe: bool, started: float) -> None:
        self._stats.record(error is None, (time.monotonic() - started) * 1000)
        self._schedule_flush()
        if error is None:
            if probe or self._view.consecutive_failures:
                await self._report(self._ledger.outcome(True, probe=probe))
        elif probe or counts_against_breaker(error):
            await self._report(
                self._ledger.outcome(False, failure_type=failure_type_of(error), probe=probe)
            )

    async def _current(self) -> AgentLedgerState:
        """The view, refreshed (once for all runs) when older than REFRESH_INTERVAL. Runs wait
        for the refresh only when the view is older than MAX_STALE (or was never read): in the
        steady state they go on with a view at most a refresh old, and no run waits on a
        query."""
        age = time.monotonic() - self._read_at
        if age >= REFRESH_INTERVAL:
            if self._refresh is None or self._refresh.done():
                self._refresh = asyncio.create_task(self._reread())
            if age >= MAX_STALE:
                await asyncio.shield(self._refresh)
        return self._view

    async def _reread(self) -> None:
        await self._report(self._ledger.read())

    async def _report(self, message: Awaitable[AgentLedgerState]) -> None:
        state = await self._quietly(message)
        if state is not None:
            self._seen(state)

    def _seen(self, state: AgentLedgerState) -> None:
        self._view = state
        self._read_at = time.monotonic()

    def _schedule_flush(self) -> None:
        if not self._closed and (self._flush is None or self._flush.done()):
            self._flush = asyncio.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(STATS_INTERVAL)
        await self._send_stats()

    async def _send_stats(self) -> None:
        batch, self._stats = self._stats, RunStats()
        if batch.runs:
            await self._report(self._ledger.stats(batch))

    async def close(self) -> None:
        """Sends what is counted now; runs ending later are not reported (the worker is
        shutting down, and the ledgers' workflows may soon have no worker)."""
        self._closed = True
        if self._flush is not None and not self._flush.done():
            self._flush.cancel()
            await self._send_stats()

    async def _quietly(self, message: Awaitable[T]) -> T | None:
        """The ledger's answer, or None (logged) when it cannot be had in time."""
        asked = asyncio.ensure_future(message)
        try:
            await asyncio.wait({asked}, timeout=LEDGER_TIMEOUT)
        finally:
            if not asked.done():
                asked.cancel()  # the SDK turns the cancel into its own error, read when it comes
                asked.add_done_callback(_read_outcome)
        if asked.done() and not asked.cancelled() and asked.exception() is None:
            return asked.result()
        self._read_at = time.monotonic()  # do not ask again for every run meanwhile
        log.warning("agent ledger unreachable", agent=self.agent, error=_outcome(asked))
        return None


def _read_outcome(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()


def _outcome(task: "asyncio.Future[Any]") -> str:
    if not task.done() or task.cancelled():
        return f"no answer within {LEDGER_TIMEOUT:g}s"
    return repr(task.exception())


class Breakers:
    """The breakers of the agents a worker declares (by its registry), against the ledgers of
    the deployment named by its coordinator queue `home`."""

    def __init__(self, client: Client, home: str, registry: AgentRegistry) -> None:
        self._client = client
        self._home = home
        self._registry = registry
        self._breakers: dict[str, AgentBreaker | None] = {}

    def watching(self, request: AgentRequest) -> contextlib.AbstractAsyncContextManager[None]:
        """The breaker around a run of the request's agent; none for an agent declared inline
        (it has no queue, so no ledger, of its own), unknown here, or whose breaker is off."""
        breaker = self._breaker(request.agent) if request.config is None else None
        return breaker.watching() if breaker else contextlib.nullcontext()

    def _breaker(self, agent: str) -> AgentBreaker | None:
        if agent not in self._breakers:
            config = self._config(agent)
            self._breakers[agent] = (
                AgentBreaker(agent, self._ledger(agent, config)) if config.enabled else None
            )
        return self._breakers[agent]

    def _config(self, agent: str) -> BreakerConfig:
        if agent not in self._registry:
            return BreakerConfig(enabled=False)
        declaration = self._registry.declarations.get(agent)
        return declaration.breaker if declaration is not None else BreakerConfig()

    async def close(self) -> None:
        """At the worker's shutdown: the last batches are sent, nothing after."""
        await asyncio.gather(*(b.close() for b in self._breakers.values() if b is not None))

    def _ledger(self, agent: str, config: BreakerConfig) -> LedgerClient:
        queue = agent_task_queue(agent, self._home)
        return LedgerClient(self._client, queue, self._home, config, self._client.identity)
