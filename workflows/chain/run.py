"""A chain's run as a workflow of its own, `ChainRun`: it runs the subscription's agent (through
`start_agent_run`, as every workflow does) or holds its vote, then signals the outcome, with the
run's detours, to the chain by the chain's workflow id (`run_outcome`). It is started with
`ParentClosePolicy.ABANDON`, so it outlives the chain's run: a chain near its history budget
continues as new without waiting for a slow agent, carrying the run as in flight, and the
outcome reaches whichever run is current then. A signal sent to it (it takes none) is parked,
by its chain's correlation, and the run ends only once it is."""

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from coord.models.chain.run import ChainRunInput, Detoured, RunFailure, RunOutcome, noted
    from coord.models.mesh.assignment import Assignment
    from coord.models.mesh.runs import RunDetour
    from coord.models.vote.spec import VoteSpec, VoteState
    from coord.models.wire.contract import (
        CHAIN_RUN_WORKFLOW,
        RUN_OUTCOME_SIGNAL,
        FailureType,
        failure,
        failure_message,
        failure_type_of,
    )
    from coord.models.wire.versions import CHAIN_RUN_PARKS_UNKNOWN_SIGNALS_PATCH
    from coord.workflows._runtime.agent_runs import declared_settings, start_agent_run
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.child_votes import VOTE_FAILED, hold_vote, vote_failure
    from coord.workflows._runtime.common import (
        NO_INPUT,
        InvalidInput,
        PlainInput,
        attempts,
        decode_joined,
        ending_with,
    )
    from coord.workflows._runtime.unknown_signals import ParksUnknownSignals

SIGNAL_LIMIT_MESSAGE = "signal limit"
"""What a signal refused by the server's limit of signals per run says (Core: "The per-workflow
signal limit was exceeded"): the chain is about to continue as new, so the outcome is sent
again, to the new run."""
REPORT_RETRY = timedelta(seconds=1)
REPORT_RETRY_MAX = timedelta(seconds=30)


@workflow.defn(name=CHAIN_RUN_WORKFLOW, sandboxed=False)
class ChainRun(
    ParksUnknownSignals,
    kind="a chain's run",
    patch=CHAIN_RUN_PARKS_UNKNOWN_SIGNALS_PATCH,
    asked=True,
    metaclass=SurplusStartArguments,
):
    """Not sandboxed, as the chain: one is started for every run of every chain, and the sandbox
    costs each its own module imports. The code touches only the workflow API and its models."""

    @workflow.init
    def __init__(self, raw_input: PlainInput = NO_INPUT) -> None:
        """Only chains start it, with its large event payloads sent apart (`started_apart`),
        joined back here; an input that does not validate fails the run, not its tasks."""
        self._input: ChainRunInput | None = None
        self._input_error = ""
        try:
            self._input = decode_joined(ChainRunInput, raw_input, "chain run input")
        except InvalidInput as error:
            self._input_error = str(error)
        self._detours: list[Detoured] = []

    @workflow.run
    async def run(self, raw_input: PlainInput = NO_INPUT) -> RunOutcome:
        """However the run ends, the signals it took are parked first (`parkings_landed`)."""
        return await ending_with(self._run(), self.parkings_landed)

    async def _run(self) -> RunOutcome:
        run_input = self._input
        if run_input is None:
            raise failure(FailureType.INVALID_INPUT, self._input_error, non_retryable=True)
        if run_input.vote is not None:
            outcome = await self._vote(run_input.seq, run_input.vote, run_input.summary)
        else:
            outcome = await self._agent(run_input)
        outcome.detours = self._detours
        await report(run_input.chain_id, outcome)
        return outcome

    async def _agent(self, run_input: ChainRunInput) -> RunOutcome:
        """The subscription's agent, run as its settings say: its result, or how it failed
        for good."""
        assert run_input.request is not None  # ChainRunInput holds exactly one
        subscription = run_input.subscription
        settings = declared_settings(
            subscription, run_input.summary, inline_agents=run_input.inline_agents
        )
        try:
            result = await start_agent_run(run_input.request, settings, self._detoured)
        except ActivityError as error:
            retry_policy = subscription.retry.to_retry_policy()
            failed = RunFailure(
                failure_type=failure_type_of(error),
                message=failure_message(error),
                attempts=attempts(error, retry_policy),
            )
            return RunOutcome(seq=run_input.seq, failure=failed)
        return RunOutcome(seq=run_input.seq, result=result)

    def _detoured(self, detour: RunDetour, assignment: Assignment | None) -> None:
        self._detours = noted(self._detours, detour, assignment)

    async def _vote(self, seq: int, vote: VoteSpec, summary: str) -> RunOutcome:
        """A vote subscription's run: the child `Vote`'s record, or why it gave no outcome."""
        try:
            state: VoteState = await hold_vote(vote, summary)
        except VOTE_FAILED as error:
            kind, message = vote_failure(error)
            return RunOutcome(seq=seq, failure=RunFailure(failure_type=kind, message=message))
        return RunOutcome(seq=seq, vote=state)


async def report(chain_id: str, outcome: RunOutcome) -> None:
    """Signals the outcome to the chain's current run. Refused at the server's limit of signals
    per run, it is sent again (the chain continues as new at a fraction of that limit); a chain
    that no longer runs (terminated from outside) keeps nothing: the outcome stays this
    workflow's result."""
    delay = REPORT_RETRY
    while True:
        try:
            await workflow.get_external_workflow_handle(chain_id).signal(
                RUN_OUTCOME_SIGNAL, outcome.model_dump(mode="json")
            )
            return
        except ApplicationError as error:
            if SIGNAL_LIMIT_MESSAGE not in str(error).lower():
                workflow.logger.warning("the chain did not take the run's outcome: %s", error)
                return
        await workflow.sleep(delay, summary="the chain is full: report again")
        delay = min(delay * 2, REPORT_RETRY_MAX)
