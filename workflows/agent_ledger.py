"""The `AgentLedger` entity workflow: one per agent queue, holding the agent's circuit breaker and
its recent-window stats (`LedgerBook`, coord.models.agent_ledger), shared by every workflow that
uses the agent. Workers start it with update-with-start when they first report, never users.

Modelled on the safe-message-handlers sample: the state is built in `@workflow.init`, so the
first update finds it; every handler is a plain function that changes the book without
awaiting, so handlers never interleave and need no lock; malformed input is rejected by the
validators (a rejected update leaves no trace in history, and nothing can fail the workflow
task); before continuing as new (history bounded) the run waits for every handler to finish.

It sets no timers: the breaker and the window change only when a worker reports, and readers
bring the state up to their own time (`AgentLedgerState.at`: an open breaker past its window is
half-open, old buckets leave the window). So a ledger costs nothing while its agent is idle, and
never wakes on a queue whose workers are gone."""

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.agent_ledger import (
        AgentLedgerState,
        LedgerBook,
        LedgerStart,
        OutcomeReport,
        ProbeClaim,
        ProbeGrant,
        StatsReport,
    )
    from coord.models.contract import (
        AGENT_LEDGER_WORKFLOW,
        CLAIM_PROBE_UPDATE,
        LEDGER_QUERY,
        REPORT_OUTCOME_UPDATE,
        REPORT_STATS_UPDATE,
        FailureType,
        failure,
    )
    from coord.models.specs import SpecError
    from coord.workflows.arguments import SurplusStartArguments
    from coord.workflows.common import NO_INPUT, PlainInput, decode_input

MAX_HISTORY = 2000
"""History events after which the ledger continues as new (reports arrive every few seconds)."""


@workflow.defn(name=AGENT_LEDGER_WORKFLOW, sandboxed=False)
class AgentLedger(metaclass=SurplusStartArguments):
    """Not sandboxed: it runs for as long as its agent is used, answering updates every few
    seconds; it imports only pure models."""

    @workflow.init
    def __init__(self, raw_start: PlainInput = NO_INPUT) -> None:
        self._start_error: str | None = None
        try:
            start = decode_input(LedgerStart, raw_start, "ledger start")
        except SpecError as error:
            self._start_error = str(error)
            start = LedgerStart(agent_queue=workflow.info().workflow_id)
        self._book = start.book or LedgerBook(agent_queue=start.agent_queue, config=start.config)

    @workflow.run
    async def run(self, raw_start: PlainInput = NO_INPUT) -> AgentLedgerState:
        if self._start_error is not None:
            raise failure(FailureType.INVALID_INPUT, self._start_error, non_retryable=True)
        await workflow.wait_condition(self._history_full)
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(LedgerStart(agent_queue=self._book.agent_queue, book=self._book))

    @workflow.query(name=LEDGER_QUERY)
    def ledger(self) -> AgentLedgerState:
        return self._book.state(workflow.now())

    @workflow.update(name=REPORT_OUTCOME_UPDATE)
    def report_outcome(self, raw_report: PlainInput = NO_INPUT) -> AgentLedgerState:
        report = decode_input(OutcomeReport, raw_report, "outcome report")
        now = workflow.now()
        self._book.configure(report.config)
        if report.succeeded:
            self._book.succeeded(now, probe=report.probe)
        else:
            self._book.failed(report.failure_type or "", now, probe=report.probe)
        return self._book.state(now)

    @report_outcome.validator
    def _valid_outcome(self, raw_report: PlainInput = NO_INPUT) -> None:
        decode_input(OutcomeReport, raw_report, "outcome report")

    @workflow.update(name=CLAIM_PROBE_UPDATE)
    def claim_probe(self, raw_claim: PlainInput = NO_INPUT) -> ProbeGrant:
        claim = decode_input(ProbeClaim, raw_claim, "probe claim")
        now = workflow.now()
        self._book.configure(claim.config)
        granted = self._book.claim_probe(now)
        return ProbeGrant(granted=granted, state=self._book.state(now))

    @claim_probe.validator
    def _valid_claim(self, raw_claim: PlainInput = NO_INPUT) -> None:
        decode_input(ProbeClaim, raw_claim, "probe claim")

    @workflow.update(name=REPORT_STATS_UPDATE)
    def report_stats(self, raw_report: PlainInput = NO_INPUT) -> AgentLedgerState:
        report = decode_input(StatsReport, raw_report, "stats report")
        now = workflow.now()
        self._book.configure(report.config)
        self._book.add_stats(report.stats, now)
        return self._book.state(now)

    @report_stats.validator
    def _valid_stats(self, raw_report: PlainInput = NO_INPUT) -> None:
        decode_input(StatsReport, raw_report, "stats report")

    def _history_full(self) -> bool:
        info = workflow.info()
        suggested = info.is_continue_as_new_suggested()
        return suggested or info.get_current_history_length() > MAX_HISTORY
