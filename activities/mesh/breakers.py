"""The circuit breaker around `run_agent`, as one worker sees it: a local view of each agent's
ledger (the `AgentLedger` workflow), refreshed by query about once a second.

While the view says open, a run fails fast with `circuit_open` without calling the agent (its
next retry at the end of the open window); when the window has passed, the run asks the ledger
for one of the probes. Each run that ends is judged by the breaker's rules
(coord.models.mesh.breaker: does its failure count against the agent?), a run Temporal timed
out included (the SDK's cancellation details tell it from a cancel), and counted into a batch
sent every STATS_INTERVAL, or at once when it holds a failure that counts (one report in flight
at a time, however many runs fail). Probes report how they ended as they end. The ledger being
unreachable never fails a run: the breaker then lets runs through (and the miss is logged).

A quiet breaker (closed, no failure counted against the agent in its window: the healthy agent's
usual state) is watched less often: its view is trusted for QUIET_REFRESH and its batches of
runs that did not count are sent every QUIET_STATS. What the breaker does is unchanged: this
worker's own counted failure is still sent at once, and its answer brings the breaker back;
only a breaker opened by other workers' runs is seen up to QUIET_REFRESH later, and the view
turning un-quiet (failures counted elsewhere) sends the batch held here at once, so that the
ledger judges those failures with this worker's successes. On a busy worker this takes the
ledger's messages from about one a second per agent to about one in four seconds."""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from coord.activities import metrics
from coord.activities.mesh.pools import run_key
from coord.infra.ledgers import LedgerClient
from coord.infra.logs import get_logger
from coord.models.mesh.agents import AgentRegistry, AgentRequest
from coord.models.mesh.breaker import (
    SUCCEEDED,
    CancelCause,
    Verdict,
    cancel_verdict,
    failure_verdict,
)
from coord.models.mesh.ledger import HALF_OPEN_RETRY, AgentLedgerState, BreakerConfig, RunStats
from coord.models.wire.contract import (
    FailureType,
    agent_task_queue,
    failure,
    failure_type_of,
    health_of,
)

REFRESH_INTERVAL = 1.0
"""Seconds a worker trusts its view of a ledger before it queries again."""
MAX_STALE = 5.0
"""Seconds after which runs wait for the view's refresh instead of going on with it."""
STATS_INTERVAL = 2.0
"""Seconds between a worker's batched stats reports of an agent."""
QUIET_REFRESH = 4.0
"""REFRESH_INTERVAL of a quiet breaker's view (below MAX_STALE: runs never wait for it)."""
QUIET_STATS = 8.0
"""STATS_INTERVAL of a quiet breaker's batch holding no failure that counts."""
LEDGER_TIMEOUT = 5.0
"""Seconds a ledger query or update may take before the run goes on without it."""
MIN_RETRY = timedelta(milliseconds=100)

T = TypeVar("T")
log = get_logger("breaker")


def circuit_open(agent: str, retry_after: timedelta, until: datetime | None) -> ApplicationError:
    when = f" until {until:%H:%M:%S} UTC" if until else " (probe runs are testing it)"
    return failure(
        FailureType.CIRCUIT_OPEN,
        f"agent {agent!r}: circuit breaker open{when}; the run did not call the agent",
        non_retryable=False,
        retry_after=max(retry_after, MIN_RETRY),
    )


class AgentBreaker:
    """One agent's breaker on this worker: the view, the probes, the reports, the batch."""

    def __init__(self, agent: str, ledger: LedgerClient, config: BreakerConfig) -> None:
        self.agent = agent
        self._ledger = ledger
        self._config = config
        self._view = AgentLedgerState(agent_queue=ledger.agent_queue)
        self._read_at = float("-inf")
        self._denied_until = float("-inf")
        """While other runs hold every probe, runs here fail fast without asking again."""
        self._refresh: asyncio.Task[None] | None = None
        self._stats = RunStats()
        self._flush: asyncio.Task[None] | None = None
        self._urgent = asyncio.Event()
        """The batch holds a failure that counts: send it now."""
        self._batch_sent: asyncio.Future[None] | None = None
        """Done when the batch being counted has been sent (or could not be)."""
        self._closed = False

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Around one run of the agent: fails fast while open, takes a probe when due, judges
        and records how the run ended."""
        probe = await self._admit()
        started = time.monotonic()
        try:
            yield
        except asyncio.CancelledError:
            await self._ended(self._cancel_verdict(), probe, started)
            raise
        except Exception as error:
            verdict = failure_verdict(self._config, failure_type_of(error), health_of(error))
            await self._ended(verdict, probe, started)
            raise
        await self._ended(SUCCEEDED, probe, started)

    async def _admit(self) -> str | None:
        """The run's key when it is a probe, else None; raises circuit_open when it may not
        run."""
        view = await self._current()
        now = datetime.now(UTC)
        state = view.breaker_at(now)
        if state == "closed":
            return None
        if state == "open" and view.open_until is not None:
            raise circuit_open(self.agent, view.open_until - now, view.open_until)
        if time.monotonic() < self._denied_until:
            raise circuit_open(self.agent, HALF_OPEN_RETRY, None)
        return await self._claim_probe(run_key(activity.info()), now)

    async def _claim_probe(self, run: str, now: datetime) -> str | None:
        grant = await self._quietly(self._ledger.claim_probe(run))
        if grant is None:
            return None
        self._seen(grant.state)
        if grant.granted:
            return run
        if grant.state.breaker == "closed":
            return None
        until = grant.state.open_until
        if until is None:
            self._denied_until = time.monotonic() + HALF_OPEN_RETRY.total_seconds()
        raise circuit_open(self.agent, until - now if until else HALF_OPEN_RETRY, until)

    def _cancel_verdict(self) -> Verdict:
        """A cancelled run: timed out by Temporal (a failure of the agent), or abandoned."""
        info = activity.info()
        return cancel_verdict(
            self._config,
            cancel_cause(activity.cancellation_details()),
            datetime.now(UTC) - info.started_time,
            info.start_to_close_timeout,
            info.heartbeat_timeout,
        )

    async def _ended(self, verdict: Verdict, probe: str | None, started: float) -> None:
        """Counts the run into the batch and reports a probe's outcome as it comes. A failure
        that counts is sent at once, and the run ends once the ledger has it: its retry, and
        every run here, then see the breaker it may have opened."""
        if verdict.ended != "abandoned":
            self._stats.record(verdict, (time.monotonic() - started) * 1000)
            sent = self._sending()
            self._schedule_flush(urgent=verdict.counted)
            if verdict.counted and probe is None and not self._closed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(sent), LEDGER_TIMEOUT)
        if probe is not None:
            await self._report(self._ledger.probe_ended(probe, verdict))

    def _sending(self) -> "asyncio.Future[None]":
        """Done when the batch now being counted has been sent."""
        if self._batch_sent is None:
            self._batch_sent = asyncio.get_running_loop().create_future()
        return self._batch_sent

    async def _current(self) -> AgentLedgerState:
        """The view, refreshed (once for all runs) when older than REFRESH_INTERVAL. Runs wait
        for the refresh only when the view is older than MAX_STALE (or was never read): in the
        steady state they go on with a view at most a refresh old, and no run waits on a
        query."""
        age = time.monotonic() - self._read_at
        if age >= (QUIET_REFRESH if self._view.quiet else REFRESH_INTERVAL):
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
        """The ledger's answer becomes the view; one no longer quiet sends the batch at once."""
        was_quiet, self._view = self._view.quiet, state
        metrics.breaker_seen(self.agent, state)
        self._read_at = time.monotonic()
        if was_quiet and not state.quiet and self._stats.runs:
            self._schedule_flush(urgent=True)

    def _schedule_flush(self, *, urgent: bool) -> None:
        if urgent:
            self._urgent.set()
        if not self._closed and (self._flush is None or self._flush.done()):
            self._flush = asyncio.create_task(self._flushing())

    async def _flushing(self) -> None:
        """Sends the batch every STATS_INTERVAL while runs end, at once when it holds a failure
        that counts; one report at a time (runs ending meanwhile go in the next)."""
        while self._stats.runs:
            interval = QUIET_STATS if self._view.quiet else STATS_INTERVAL
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._urgent.wait(), interval)
            self._urgent.clear()
            await self._send_stats()

    async def _send_stats(self) -> None:
        batch, self._stats = self._stats, RunStats()
        sent, self._batch_sent = self._batch_sent, None
        try:
            if batch.runs:
                await self._report(self._ledger.stats(batch))
        finally:
            if sent is not None and not sent.done():
                sent.set_result(None)

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


def cancel_cause(details: activity.ActivityCancellationDetails | None) -> CancelCause:
    """What the SDK says of a run's cancel, as the breaker's rules read it: a worker shutting
    down, or a caller cancelling, pausing or resetting the run, is no failure of the agent."""
    if details is None or details.worker_shutdown or details.cancel_requested:
        return "abandoned"
    if details.paused or details.reset:
        return "abandoned"
    if details.timed_out:
        return "timed_out"
    return "gone" if details.not_found else "abandoned"


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
                AgentBreaker(agent, self._ledger(agent, config), config) if config.enabled else None
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
