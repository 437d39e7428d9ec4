"""The `Vote` workflow: a consensus vote. The proposal goes to every voter agent at
once (one `run_agent` activity each, the proposal as its event's payload); each answer, failure
or timeout becomes a ballot, and as soon as the outcome is certain the runs still out are
cancelled. What the ballots decide is `VoteModel`'s (coord.models.vote.spec); this module is the
Temporal side: the start input, the runs, the deadline, cancellation, the query, search
attributes and details. The result is the record, every ballot listed."""

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from coord.models.events.envelope import EventEnvelope
    from coord.models.mesh.agents import AgentRequest, AgentResult
    from coord.models.vote.spec import VOTE_REQUESTED, VoteModel, VoteSpec, VoteState, VoteStatus
    from coord.models.wire.contract import (
        COORD_STATUS,
        HANDLER_TEXT,
        STATE_QUERY,
        VOTE_RECORD_MEMO,
        VOTE_WORKFLOW,
        Pattern,
        vote_id_of,
    )
    from coord.models.wire.durations import format_duration
    from coord.models.wire.sizes import json_size
    from coord.models.wire.versions import (
        AGENT_RUN_GATES_PATCH,
        VOTE_ANNOUNCES_PATCH,
        VOTE_ENDS_AFTER_ITS_RUNS_PATCH,
        VOTE_FAN_OUT_PATCH,
        VOTE_PATCHES,
        VOTE_PATCHES_2,
        VOTE_PATCHES_3,
        VOTE_PATCHES_4,
        VOTE_PATCHES_AT_ONCE_2_PATCH,
        VOTE_PATCHES_AT_ONCE_3_PATCH,
        VOTE_PATCHES_AT_ONCE_4_PATCH,
        VOTE_PATCHES_AT_ONCE_PATCH,
        VOTE_PLACES_VOTERS_PATCH,
        VOTE_REWIND_PATCH,
        VOTE_STATUS_FROM_START_PATCH,
    )
    from coord.models.wire.versions import VOTE_PARKS_UNKNOWN_SIGNALS_PATCH as PARKS
    from coord.workflows._runtime import metrics
    from coord.workflows._runtime.agent_runs import (
        Placements,
        RunSettings,
        outcomes_landed,
        start_agent_run,
    )
    from coord.workflows._runtime.announcements import ChainAnnouncements
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.common import (
        NO_INPUT,
        PlainInput,
        decode_start,
        ending_with,
        refused_start,
        show_details,
        task_error,
        uncancellable,
        upsert_search_attributes,
    )
    from coord.workflows._runtime.fan_out import FanOut
    from coord.workflows._runtime.patches import adopt_newest, in_force, patched
    from coord.workflows._runtime.unknown_signals import ParksUnknownSignals

VoterRun = asyncio.Task[AgentResult]

PATCH_BUNDLES = (
    (VOTE_PATCHES_AT_ONCE_4_PATCH, VOTE_PATCHES_4),
    (VOTE_PATCHES_AT_ONCE_3_PATCH, VOTE_PATCHES_3),
    (VOTE_PATCHES_AT_ONCE_2_PATCH, VOTE_PATCHES_2),
    (VOTE_PATCHES_AT_ONCE_PATCH, VOTE_PATCHES),
)
"""The vote's bundles of patches, newest first (`adopt_newest`)."""


def run_cancellation() -> workflow.ActivityCancellationType:
    """How a voter's run is cancelled once the outcome is known: its cancel is sent, and the run
    counts as ended once the server says it has (cancelled, failed, or answered anyway), so the
    vote ends in a workflow task during which no run's outcome can land. Runs recorded before
    VOTE_ENDS_AFTER_ITS_RUNS_PATCH counted it ended at once, and ended in the task that sent the
    cancels."""
    if in_force(VOTE_ENDS_AFTER_ITS_RUNS_PATCH):
        return workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
    return workflow.ActivityCancellationType.TRY_CANCEL


@workflow.defn(name=VOTE_WORKFLOW, sandboxed=False)
class Vote(ParksUnknownSignals, kind="a vote", patch=PARKS, metaclass=SurplusStartArguments):
    """A vote's Temporal side; its result is the vote's record.

    Not sandboxed, as the saga: a vote is short, and the sandbox would import this module
    afresh for every vote. The code touches only the workflow API and pure models (imported
    passed-through); what keeps it deterministic is the replay of its recorded histories
    (`tests/test_replay.py`)."""

    @workflow.init
    def __init__(self, raw_spec: PlainInput = NO_INPUT) -> None:
        """Decodes the spec here, so the query answers from the first task on; a spec that does
        not decode or validate is reported by `run` (nothing may fail the workflow task).
        The run's patches are asked first, at once (`PATCH_BUNDLES`)."""
        adopt_newest(PATCH_BUNDLES, on=self)
        spec, self._spec_error = decode_start(VoteSpec, raw_spec, "vote spec")
        start = workflow.info().workflow_start_time
        self._model = None if spec is None else VoteModel.begin(spec, start)
        self._shown: VoteStatus | None = None
        self._written: str | None = None
        """The status the run's search attribute holds: its start's, then each one written (a
        run recorded before VOTE_STATUS_FROM_START_PATCH wrote the start's again)."""
        if patched(VOTE_STATUS_FROM_START_PATCH, on=self):
            self._written = workflow.info().typed_search_attributes.get(COORD_STATUS)
        self._fan_out = FanOut(VOTE_FAN_OUT_PATCH)
        self._placements: Placements | None = None

    @workflow.run
    async def run(self, raw_spec: PlainInput = NO_INPUT) -> VoteState:
        """`raw_spec` is raw on purpose: a malformed spec sent as plain JSON (Temporal CLI, UI)
        fails the run `invalid_spec` naming the field, instead of wedging its task."""
        model = self._model
        if model is None:
            raise refused_start(Pattern.VOTE, self._spec_error or "")
        self._changed(model)
        correlation_id = model.spec.correlation_id
        self._announcements = announcements = ChainAnnouncements(correlation_id, in_order=True)
        if patched(VOTE_PLACES_VOTERS_PATCH):
            announcements.hold()  # until the voters' placements say whether the chain runs
        if patched(VOTE_ANNOUNCES_PATCH):
            model.start_announcing(announcements.send)
        if model.spec.rewind is not None and patched(VOTE_REWIND_PATCH):
            model.take_past(workflow.info().workflow_start_time)
            self._changed(model)
        await ending_with(self._vote(model), self._leave)
        return model.state

    async def _leave(self) -> None:
        """However the run ends: its events sent, the signals it took parked."""
        await self._announcements.flush()
        await self.parkings_landed()

    async def _vote(self, model: VoteModel) -> None:
        runs: dict[str, VoterRun] = {}
        ballots: list[asyncio.Task[None]] = []
        try:
            await self._start_voters(model, runs, ballots)
            await self._until_over(model)
        except asyncio.CancelledError:
            if patched(AGENT_RUN_GATES_PATCH):
                await outcomes_landed()
            if not model.over:  # an outcome taken in the same workflow task stands
                await self._cancelled(model, runs, ballots)
                raise
        await uncancellable(self._stop(model, runs, ballots))
        self._changed(model)
        self._log(model)

    async def _cancelled(
        self, model: VoteModel, runs: dict[str, VoterRun], ballots: list[asyncio.Task[None]]
    ) -> None:
        """A cancelled vote cancels its runs; its record, which no result carries, is kept in
        the memo."""
        model.cancel(workflow.now())
        await uncancellable(self._stop(model, runs, ballots))
        workflow.upsert_memo({VOTE_RECORD_MEMO: model.state})
        self._changed(model)

    @workflow.query(name=STATE_QUERY, description=HANDLER_TEXT[STATE_QUERY])
    def state(self) -> VoteState:
        if self._model is None:
            vote_id = vote_id_of(workflow.info().workflow_id)
            failed = VoteStatus.FAILED
            return VoteState(vote_id=vote_id, status=failed, summary=self._spec_error or "")
        return self._model.state

    async def _until_over(self, model: VoteModel) -> None:
        """Until the ballots decide, or the deadline (from the workflow's start) passes."""
        deadline = model.state.deadline
        assert deadline is not None
        try:
            await workflow.wait_condition(
                lambda: model.over,
                timeout=max(deadline - workflow.now(), timedelta()),
                timeout_summary=f"deadline: {deadline:%Y-%m-%d %H:%M:%S} UTC "
                f"({format_duration(model.spec.deadline)} after start)",
            )
        except TimeoutError:
            model.deadline_passed(workflow.now())

    async def _start_voters(
        self, model: VoteModel, runs: dict[str, VoterRun], ballots: list[asyncio.Task[None]]
    ) -> None:
        """Every voter's run, in as many workflow tasks as the budget needs (the ballots of the
        first are counted meanwhile); once the outcome is known the rest never start. A rewound
        copy's voters whose ballots it took from its original are not asked again. Their
        worker is asked first where they run (`Placements`), never locally: a local run would
        not hear the cancel the vote sends the runs still out once its outcome is certain. The
        same question asks whether the correlation's chain runs, which releases the vote's
        events (or drops them)."""
        voters = model.to_ask()
        if patched(VOTE_PLACES_VOTERS_PATCH):
            self._placements = Placements(local=False)
            await self._placements.learn(voters, chain_of=model.spec.correlation_id)
            self._announcements.chain_known(self._placements.chain_runs)
        for voter in voters:
            if model.over:
                return
            runs[voter] = run = await self._start_voter(model, voter)
            ballots.append(asyncio.create_task(self._ballot(model, voter, run)))

    async def _start_voter(self, model: VoteModel, voter: str) -> VoterRun:
        spec = model.spec
        info = workflow.info()
        request = AgentRequest(
            agent=voter,
            event=EventEnvelope.new(
                VOTE_REQUESTED,
                f"/vote/{spec.vote_id}",
                payload=spec.proposal,
                correlation_id=spec.correlation_id,
            ),
            retry_on=spec.retry.retry_on,
            config=spec.agents.get(voter),
            idempotency_key=f"{info.workflow_id}/{info.first_execution_run_id}/{voter}",
            inputs={"vote": {"vote_id": spec.vote_id, "needed": spec.needed}},
        )
        await self._fan_out.room(json_size(request))
        settings = RunSettings(
            summary=f"ballot: {voter}",
            retry=spec.retry,
            schedule_to_close=spec.timeout,
            heartbeat_timeout=spec.heartbeat_timeout,
            schedule_to_start=spec.schedule_to_start_timeout,
            inline_agents=spec.agents,
            room=self._fan_out.room,
            placements=self._placements,
            cancellation=run_cancellation(),
        )
        return start_agent_run(request, settings)

    async def _ballot(self, model: VoteModel, voter: str, run: VoterRun) -> None:
        """The voter's run to its end, as a ballot (or as cancelled); never raises."""
        try:
            result = await run
        except ActivityError as error:
            if is_cancelled_exception(error):
                model.run_cancelled(voter)
            else:
                failed = task_error(error)
                model.failed(voter, failed.type, failed.message, workflow.now())
        except asyncio.CancelledError:
            model.run_cancelled(voter)
        else:
            model.answered(voter, result.data, workflow.now())
        self._changed(model)

    async def _stop(
        self, model: VoteModel, runs: dict[str, VoterRun], ballots: list[asyncio.Task[None]]
    ) -> None:
        """Cancels the runs still out (the outcome is known: their answers can change nothing)
        and waits until each has ended (`run_cancellation`); a voter never asked is cancelled."""
        for run in runs.values():
            if not run.done():
                run.cancel()
        await asyncio.gather(*ballots)
        for voter in model.spec.voters:
            if voter not in runs:
                model.run_cancelled(voter)

    def _changed(self, model: VoteModel) -> None:
        """Republishes the details; upserts the search attributes when the status moved."""
        status = model.state.status
        if status != self._shown:
            self._shown = status
            metrics.vote_status(status)
            if status != self._written:
                upsert_search_attributes(model.state.search_attributes())
                self._written = status
        show_details(model.details())

    def _log(self, model: VoteModel) -> None:
        workflow.logger.info(
            "vote ended",
            extra={
                "vote_id": model.state.vote_id,
                "status": model.state.status.value,
                "summary": model.state.summary,
            },
        )
