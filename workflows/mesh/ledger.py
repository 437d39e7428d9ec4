"""The `AgentLedger` entity workflow: one per agent queue, holding the agent's circuit breaker and
its recent-window stats (`LedgerBook`, coord.models.mesh.ledger), shared by every workflow that
uses the agent. Workers start it with update-with-start when they first report, never users.

Modelled on the safe-message-handlers sample: the state is built in `@workflow.init`, so the
first update finds it; every handler is a plain function that changes the book without
awaiting, so handlers never interleave and need no lock; before continuing as new (history
bounded) the run waits for every handler to finish.

Nothing a message carries can fail the workflow task (which would leave the ledger refusing
every message while the task is retried): every field is bounded, each validator applies its
update to a copy of the book as the handler will (so an update the handler would raise on is
refused before it is accepted, leaving no trace in history), and a handler raising anyway fails
its update alone.

The breaker and the window set no timers: they change only when a worker reports, and readers
bring the state up to their own time (`AgentLedgerState.at`: an open breaker past its window is
half-open, old buckets leave the window). So a ledger costs nothing while its agent is idle, and
never wakes on a queue whose workers are gone.

The pool (an agent declaring max_concurrent) is the one exception: while permits are out or
runs wait for one, the ledger wakes when the next lease or wait ends (one timer, restarted only
for an earlier end), so a run whose worker died gives its permit to the next waiter even when
no other message comes. A request for a permit is an update that waits (boundedly) for one."""

from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from coord.models.mesh.ledger import (
        AgentLedgerState,
        LedgerBook,
        LedgerStart,
        OutcomeReport,
        PermitGrant,
        PermitPool,
        PermitRequest,
        ProbeClaim,
        ProbeGrant,
        StatsReport,
        lease_end,
    )
    from coord.models.wire.contract import (
        ACQUIRE_PERMIT_UPDATE,
        AGENT_LEDGER_WORKFLOW,
        CLAIM_PROBE_UPDATE,
        HANDLER_TEXT,
        LEDGER_QUERY,
        RELEASE_PERMIT_UPDATE,
        REPORT_OUTCOME_UPDATE,
        REPORT_STATS_UPDATE,
        FailureType,
        failure,
        ledger_home,
    )
    from coord.models.wire.versions import (
        LEDGER_PARKS_UNKNOWN_SIGNALS_PATCH,
        PERMIT_POOL_PATCH,
        SMALLEST_POOL_PATCH,
    )
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.common import NO_INPUT, PlainInput, decode_input, decode_start
    from coord.workflows._runtime.unknown_signals import ParksUnknownSignals

R = TypeVar("R")
MIN_TIMER = timedelta(milliseconds=1)
MAX_HISTORY = 2000
"""History events after which the ledger continues as new (reports arrive every few seconds)."""


@workflow.defn(name=AGENT_LEDGER_WORKFLOW, sandboxed=False)
class AgentLedger(
    ParksUnknownSignals,
    kind="an agent ledger",
    patch=LEDGER_PARKS_UNKNOWN_SIGNALS_PATCH,
    asked=True,
    metaclass=SurplusStartArguments,
):
    """Not sandboxed: it runs for as long as its agent is used, answering updates every few
    seconds; it imports only pure models. A signal (it takes none) is parked, on the
    deployment's coordinator queue (`_parking_queue`); waiting for every handler before it
    continues as new, the run carries none of them over unparked."""

    @workflow.init
    def __init__(self, raw_start: PlainInput = NO_INPUT) -> None:
        start, self._start_error = decode_start(LedgerStart, raw_start, "ledger start")
        if start is None:
            start = LedgerStart(agent_queue=workflow.info().workflow_id)
        self._book = start.book or LedgerBook(agent_queue=start.agent_queue, config=start.config)

    @workflow.run
    async def run(self, raw_start: PlainInput = NO_INPUT) -> AgentLedgerState:
        if self._start_error is not None:
            await self.parkings_landed()
            raise failure(FailureType.INVALID_INPUT, self._start_error, non_retryable=True)
        if workflow.patched(PERMIT_POOL_PATCH):
            await self._pool_on_time_until(self._history_full)
            await self._pool_on_time_until(workflow.all_handlers_finished)
        else:
            await workflow.wait_condition(self._history_full)
            await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(LedgerStart(agent_queue=self._book.agent_queue, book=self._book))

    @workflow.query(name=LEDGER_QUERY, description=HANDLER_TEXT[LEDGER_QUERY])
    def ledger(self) -> AgentLedgerState:
        return self._book.state(workflow.now())

    @workflow.update(name=REPORT_OUTCOME_UPDATE, description=HANDLER_TEXT[REPORT_OUTCOME_UPDATE])
    def report_outcome(self, raw_report: PlainInput = NO_INPUT) -> AgentLedgerState:
        return _refusing("outcome report", lambda: _outcome(self._book, raw_report))

    @report_outcome.validator
    def _valid_outcome(self, raw_report: PlainInput = NO_INPUT) -> None:
        _outcome(_draft(self._book), raw_report)

    @workflow.update(name=CLAIM_PROBE_UPDATE, description=HANDLER_TEXT[CLAIM_PROBE_UPDATE])
    def claim_probe(self, raw_claim: PlainInput = NO_INPUT) -> ProbeGrant:
        return _refusing("probe claim", lambda: _claim(self._book, raw_claim))

    @claim_probe.validator
    def _valid_claim(self, raw_claim: PlainInput = NO_INPUT) -> None:
        _claim(_draft(self._book), raw_claim)

    @workflow.update(name=REPORT_STATS_UPDATE, description=HANDLER_TEXT[REPORT_STATS_UPDATE])
    def report_stats(self, raw_report: PlainInput = NO_INPUT) -> AgentLedgerState:
        return _refusing("stats report", lambda: _stats(self._book, raw_report))

    @report_stats.validator
    def _valid_stats(self, raw_report: PlainInput = NO_INPUT) -> None:
        _stats(_draft(self._book), raw_report)

    @workflow.update(name=ACQUIRE_PERMIT_UPDATE, description=HANDLER_TEXT[ACQUIRE_PERMIT_UPDATE])
    async def acquire_permit(self, raw_request: PlainInput = NO_INPUT) -> PermitGrant:
        """Granted at once when a permit is free and nobody waits before; else waits its turn
        up to POOL_WAIT (not when the history is full: the ledger is about to continue as new)
        and answers whether it got one."""
        try:
            return await self._acquire(raw_request)
        except Exception as error:
            raise _refused("permit request", error) from None

    @acquire_permit.validator
    def _valid_acquire(self, raw_request: PlainInput = NO_INPUT) -> None:
        request = decode_input(PermitRequest, raw_request, "permit request")
        lease_end(workflow.now(), request.lease_s)

    async def _acquire(self, raw_request: PlainInput) -> PermitGrant:
        request = decode_input(PermitRequest, raw_request, "permit request")
        pool = self._book.pool
        now = workflow.now()
        granted = pool.acquire(
            request.run,
            request.size,
            request.lease_s,
            now,
            worker=request.worker,
            smallest=workflow.patched(SMALLEST_POOL_PATCH),
        )
        if not granted and self._history_full():
            pool.release(request.run, now)
        elif not granted:
            await workflow.wait_condition(lambda: not pool.asking(request.run))
        return PermitGrant(granted=pool.holds(request.run), pool=pool.state(workflow.now()))

    @workflow.update(name=RELEASE_PERMIT_UPDATE, description=HANDLER_TEXT[RELEASE_PERMIT_UPDATE])
    def release_permit(self, raw_request: PlainInput = NO_INPUT) -> PermitGrant:
        return _refusing("permit release", lambda: _release(self._book, raw_request))

    @release_permit.validator
    def _valid_release(self, raw_request: PlainInput = NO_INPUT) -> None:
        decode_input(PermitRequest, raw_request, "permit release")

    async def _pool_on_time_until(self, done: Callable[[], bool]) -> None:
        """Until `done`, brings the pool up to date whenever its next lease or wait ends (also
        while waiting for the handlers to finish: a waiting request ends only so)."""
        while not done():
            await self._pool_on_time(done)

    async def _pool_on_time(self, done: Callable[[], bool]) -> None:
        """Until `done` or the pool's next lease or wait ends (then brought up to date); a new
        earlier end restarts the wait, a later one does not."""
        pool = self._book.pool
        deadline = pool.next_deadline()

        def woken() -> bool:
            end = pool.next_deadline()
            return (end is not None and (deadline is None or end < deadline)) or done()

        timeout = None if deadline is None else max(deadline - workflow.now(), MIN_TIMER)
        try:
            await workflow.wait_condition(woken, timeout=timeout)
        except TimeoutError:
            pool.expire(workflow.now())

    def _parking_queue(self) -> str:
        """The coordinator queue of the ledger's deployment: the ledgers' worker runs no
        activity, so a park on their own queue would wait forever."""
        return ledger_home(workflow.info().task_queue)

    def _history_full(self) -> bool:
        info = workflow.info()
        suggested = info.is_continue_as_new_suggested()
        return suggested or info.get_current_history_length() > MAX_HISTORY


def _outcome(book: LedgerBook, raw_report: PlainInput) -> AgentLedgerState:
    report = decode_input(OutcomeReport, raw_report, "outcome report")
    now = workflow.now()
    book.report_outcome(report, now)
    return book.state(now)


def _claim(book: LedgerBook, raw_claim: PlainInput) -> ProbeGrant:
    claim = decode_input(ProbeClaim, raw_claim, "probe claim")
    now = workflow.now()
    book.configure(claim.config)
    granted = book.claim_probe(claim.run, now)
    return ProbeGrant(granted=granted, state=book.state(now))


def _stats(book: LedgerBook, raw_report: PlainInput) -> AgentLedgerState:
    report = decode_input(StatsReport, raw_report, "stats report")
    now = workflow.now()
    book.configure(report.config)
    book.add_stats(report.stats, now)
    return book.state(now)


def _release(book: LedgerBook, raw_request: PlainInput) -> PermitGrant:
    request = decode_input(PermitRequest, raw_request, "permit release")
    now = workflow.now()
    book.pool.release(request.run, now)
    return PermitGrant(granted=False, pool=book.pool.state(now))


def _draft(book: LedgerBook) -> LedgerBook:
    """A copy of the book for a validator to apply a breaker update to, as its handler will:
    an update whose handler would raise is refused before it is accepted. Without the pool,
    which breaker updates do not change (and whose requests' validators compute their lease
    ends instead: a pool with many runs waiting costs more to copy)."""
    return book.model_copy(update={"pool": PermitPool()}).model_copy(deep=True)


def _refusing(what: str, handle: Callable[[], R]) -> R:
    """The handler's answer; whatever it raises fails the update, never the workflow task
    (which would leave the ledger refusing every message while the task is retried)."""
    try:
        return handle()
    except Exception as error:
        raise _refused(what, error) from None


def _refused(what: str, error: Exception) -> ApplicationError:
    if isinstance(error, ApplicationError):
        return error
    workflow.logger.warning("ledger update refused", extra={"update": what, "error": repr(error)})
    return failure(FailureType.INVALID_INPUT, f"{what} refused: {error}", non_retryable=True)
