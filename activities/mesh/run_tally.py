"""How a run's attempts ended, counted by its workers so that only the agent's own failures
spend the step's retries (a request with a `budget`; models/retry.py).

The server counts every attempt alike, and ends one by a timeout when no worker reports it: the
attempts in flight when the server restarts after an outage (their heartbeat timeouts ran on its
clock while it was down) and those of a worker that died. Counted by the server, each of those
spent a retry of the step's, as an agent failure does. So a run that carries its budget has no
attempt limit on the server; its worker keeps a tally (`RunTally`) of the agent's failures and
of the gates' refusals in the last of every heartbeat's details, which the server hands to the
next attempt even when it timed the last one out. The worker fails the run for good when the
agent failed once more than `max_retries`, or when too many attempts ended without a report."""

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    Interceptor,
)

from coord.models.mesh.attempts import MAX_REPORTED, RUN_ATTEMPTS
from coord.models.mesh.retry import RunBudget, RunTally, agent_time_limit
from coord.models.wire.contract import FailureType, failure

T = TypeVar("T")


@dataclass
class _Carried:
    """The running attempt's tally, the details its agent last sent (sent again with a new
    tally, so that what it last said is not erased), and the run's attempts so far as their
    workers reported them (coord.models.mesh.attempts), for the next attempt to report on."""

    tally: RunTally
    details: tuple[Any, ...] = ()
    attempts: list[dict[str, Any]] = field(default_factory=list)

    def as_detail(self) -> dict[str, Any]:
        attempts = {RUN_ATTEMPTS: self.attempts} if self.attempts else {}
        return {**self.tally.as_detail(), **attempts}


_carried: contextvars.ContextVar[_Carried | None] = contextvars.ContextVar(
    "run_tally", default=None
)


def carried(details: Sequence[Any]) -> list[dict[str, Any]]:
    """The run's attempts the last heartbeat's details carried (none: not yet, or a worker
    before attempts were carried); read as data by the workflow, which leaves out what does not
    read."""
    last = details[-1] if details else None
    attempts = last.get(RUN_ATTEMPTS) if isinstance(last, dict) else None
    if not isinstance(attempts, list):
        return []
    return [each for each in attempts if isinstance(each, dict)][-MAX_REPORTED:]


class TallyCarrier(Interceptor):
    """Adds the running attempt's tally to every heartbeat of a run that counts its retries,
    whoever sends it (the agent through its context, `activity.heartbeat()`, a pool's wait)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _CarryingInbound(next)


class _CarryingInbound(ActivityInboundInterceptor):
    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_CarryingOutbound(outbound))


class _CarryingOutbound(ActivityOutboundInterceptor):
    def heartbeat(self, *details: Any) -> None:
        carried = _carried.get()
        if carried is None:
            super().heartbeat(*details)
            return
        carried.details = details
        super().heartbeat(*details, carried.as_detail())


class RunCounter:
    """One attempt's view of its run's tally (nothing to count for a request without a budget:
    the server's attempt limit holds, as before runs counted their own)."""

    def __init__(self, agent: str, budget: RunBudget | None, *, before: int = 0) -> None:
        """`before`: the agent's failures in earlier executions of the run (its workflow sent
        it again after a gate turned it away), which spend the same budget."""
        self._agent = agent
        self._budget = budget
        self._before = before
        self._carried: _Carried | None = None
        if budget is not None:
            info = activity.info()
            details = info.heartbeat_details
            self._carried = _Carried(RunTally.carried_in(details), attempts=carried(details))
            _carried.set(self._carried)
            self._refuse_if_lost_too_often(budget, self._carried.tally, info.attempt)
        self.attempt = self._attempt()
        """The run's attempt as its agent is told it, fixed as the attempt begins (what this
        attempt counts does not change it)."""

    def _attempt(self) -> int:
        """Counted in the agent's own failures when the run counts its retries (attempts lost
        or turned away are not the agent's), else the server's attempt; after the failures of
        its earlier executions."""
        if self._carried is None:
            return self._before + activity.info().attempt
        return self._before + self._carried.tally.failures + 1

    def _refuse_if_lost_too_often(self, budget: RunBudget, tally: RunTally, attempt: int) -> None:
        if budget.lost_too_often(tally, attempt):
            raise failure(
                FailureType.TIMEOUT,
                f"agent {self._agent!r}: the run ended {tally.lost(attempt)} times without a "
                "report from its worker (the server timed it out: the worker died or could not "
                "reach the server, or the agent stopped heartbeating)",
                {"attempt": attempt},
                non_retryable=True,
            )

    async def within_time_limit(self, call: Awaitable[T]) -> T:
        """The agent's call, ended as the agent's own `timeout` a little before the run's time
        limit: the server would end it as a lost attempt, which spends no retry of the step's.
        A heartbeat timeout stays the server's to measure: the worker heartbeats for agents
        that run long (shell, llm), so it means the worker, not the agent, went silent."""
        info = activity.info()
        if self._budget is None or info.start_to_close_timeout is None:
            return await call
        allowed = agent_time_limit(info.start_to_close_timeout)
        ends = info.started_time + allowed  # the server's clock: a worker taking it late
        left = min(ends - datetime.now(UTC), allowed)  # a server clock ahead (time-skipping)
        limit = asyncio.timeout(left.total_seconds())
        try:
            async with limit:
                return await call
        except TimeoutError:
            if not limit.expired():
                raise  # the agent's own
        raise failure(
            FailureType.TIMEOUT,
            f"agent {self._agent!r} ran past the run's time limit of "
            f"{info.start_to_close_timeout.total_seconds():g}s",
        )

    @property
    def earlier_attempts(self) -> list[dict[str, Any]]:
        """The run's attempts before this one as the heartbeats carried them (none for a run
        that does not count its retries: its attempts are not carried)."""
        return self._carried.attempts if self._carried is not None else []

    def carry_attempts(self, attempts: list[dict[str, Any]]) -> None:
        """The run's attempts, this one last, sent at once for the next attempt (`_count`)."""
        if self._carried is not None:
            self._carried.attempts = attempts
            activity.heartbeat(*self._carried.details)

    def turned_away(self) -> None:
        """A gate (breaker, pool) refused the run before its agent was called."""
        self._count(lambda tally: tally.refused())

    def failed(self, error: ApplicationError) -> ApplicationError:
        """The agent failed: counted, and not retried once the budget is spent. Its retry's
        delay is the one the failure carries (the backoff for that many of the agent's
        failures, spread by the run's jitter: `_classified` in run_agent.py)."""
        tally = self._count(lambda tally: tally.failed())
        if tally is None or self._budget is None:
            return error
        return failure(
            error.type or FailureType.TEMPORARY_FAILURE,
            error.message,
            *error.details,
            non_retryable=error.non_retryable or self._budget.spent(tally, self._before),
            retry_after=error.next_retry_delay,
        )

    def _count(self, step: Callable[[RunTally], RunTally]) -> RunTally | None:
        """The tally after `step`, sent at once: the SDK sends a failing attempt's last
        heartbeat before its failure, so the next attempt finds it."""
        if self._carried is None:
            return None
        self._carried.tally = step(self._carried.tally)
        activity.heartbeat(*self._carried.details)
        return self._carried.tally
