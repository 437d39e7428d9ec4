"""The `TaskGraph` workflow: a plan (seeds 003 and 004), a dependency graph of agent tasks run
under a worker cap, each task started as soon as its dependencies have succeeded.

What the plan decides (which tasks may start, who gets a slot, the record, isolation, the
outcome) is in `PlanModel` (coord.models.plan.model) and its parts; one task's lifecycle is
`TaskRun` (coord.workflows.plan.task), and the loop that starts tasks `TaskSchedule`
(coord.workflows.plan.schedule). This module is the Temporal side: the start input,
cancellation, queries, search attributes and memo (the details and the progress polling of runs
recorded before it was left to whoever asks: `views`).
"""

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.plan.model import PlanModel
    from coord.models.plan.planner import AddedTasks
    from coord.models.plan.report import memo_record
    from coord.models.plan.spec import (
        ApprovalDecision,
        PlanProgress,
        PlanSpec,
        PlanState,
        PlanStatus,
    )
    from coord.models.wire.contract import (
        APPROVE_UPDATE,
        HANDLER_TEXT,
        MEMBER_SENT_SIGNAL,
        PLAN_RECORD_MEMO,
        PLAN_WORKFLOW,
        PROGRESS_QUERY,
        STATE_QUERY,
        FailureType,
        Pattern,
        failure,
        plan_id_of,
    )
    from coord.models.wire.versions import (
        APPROVER_IDENTITY_PATCH,
        PLAN_ANNOUNCES_PATCH,
        PLAN_PATCHES,
        PLAN_PATCHES_2,
        PLAN_PATCHES_3,
        PLAN_PATCHES_4,
        PLAN_PATCHES_AT_ONCE_2_PATCH,
        PLAN_PATCHES_AT_ONCE_3_PATCH,
        PLAN_PATCHES_AT_ONCE_4_PATCH,
        PLAN_PATCHES_AT_ONCE_PATCH,
        PROGRESS_ON_DEMAND_PATCH,
        SLOTS_GRANTED_BY_THE_PLAN_PATCH,
    )
    from coord.models.wire.versions import PLAN_FAN_OUT_PATCH as FAN_OUT_PATCH
    from coord.models.wire.versions import PLAN_PARKS_UNKNOWN_SIGNALS_PATCH as PARKS
    from coord.workflows._runtime import metrics
    from coord.workflows._runtime.announcements import ChainAnnouncements
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.common import (
        NO_INPUT,
        PlainInput,
        decode_start,
        refused_start,
        uncancellable,
        upsert_search_attributes,
    )
    from coord.workflows._runtime.fan_out import FanOut
    from coord.workflows._runtime.patches import adopt_newest, patched
    from coord.workflows._runtime.unknown_signals import ParksUnknownSignals
    from coord.workflows.plan.gates import apply_approval, checked_approval, decide_approval
    from coord.workflows.plan.placing import PlanPlacing
    from coord.workflows.plan.planning import (
        checked_request,
        checked_tasks,
        plan_tasks,
        planning_now,
    )
    from coord.workflows.plan.schedule import TaskSchedule
    from coord.workflows.plan.scratchpad import Scratchpad
    from coord.workflows.plan.task import WorkerSlots
    from coord.workflows.plan.team import TeamRoom, refused_member_message
    from coord.workflows.plan.views import Details, watch_progress

PLAN_PATCH_BUNDLES = (
    (PLAN_PATCHES_AT_ONCE_4_PATCH, PLAN_PATCHES_4),
    (PLAN_PATCHES_AT_ONCE_3_PATCH, PLAN_PATCHES_3),
    (PLAN_PATCHES_AT_ONCE_2_PATCH, PLAN_PATCHES_2),
    (PLAN_PATCHES_AT_ONCE_PATCH, PLAN_PATCHES),
)
"""The plan's bundles of patches, newest first (`adopt_newest`)."""


@workflow.defn(name=PLAN_WORKFLOW, sandboxed=False)
class TaskGraph(ParksUnknownSignals, kind="a plan", patch=PARKS, metaclass=SurplusStartArguments):
    """A plan's Temporal side; its result is the final record (the final report).

    Not sandboxed, as the chain, the ledger and the dead-letter entry: the sandbox cost a plan
    about 15% of its throughput (`bench/plan_bench.py`). Every payload of a workflow task is
    visited three times and each visit runs code inside the sandbox to pick its serialization
    context: four entries for each payload, an agent run's input and its summary alike, besides
    the activations themselves.
    The code touches only the workflow API and pure models (imported passed-through, so the
    sandbox never re-imported them anyway); what keeps it deterministic is the replay of its
    recorded histories (`tests/test_replay.py`)."""

    @workflow.init
    def __init__(self, raw_spec: PlainInput = NO_INPUT) -> None:
        """Decodes the spec here, so queries answer from the first task on; a spec that does
        not decode or validate is reported by `run` (nothing may fail the workflow task).
        The run's patches are asked first, at once (the newest bundle it takes)."""
        adopt_newest(PLAN_PATCH_BUNDLES, on=self)
        spec, self._spec_error = decode_start(PlanSpec, raw_spec, "plan spec")
        self._model = None if spec is None else PlanModel.begin(spec, workflow.now())
        self._team: TeamRoom | None = None
        self._open = True
        """Whether the loop that starts tasks still runs: a task added once it has returned
        would never start, so `add_tasks` is refused from then on."""
        self._details = Details(self._model)
        self._placing: PlanPlacing | None = None

    @workflow.run
    async def run(self, raw_spec: PlainInput = NO_INPUT) -> PlanState:
        """`raw_spec` is raw on purpose: a malformed spec sent as plain JSON (Temporal CLI, UI)
        fails the run `invalid_spec` naming the field, instead of wedging its task."""
        if self._model is None:
            raise refused_start(Pattern.PLAN, self._spec_error or "")
        model = self._model
        self._announcements = ChainAnnouncements(model.spec.correlation_id)
        self._placing = PlanPlacing(self._announcements)
        if model.spec.planner is not None:
            model = await self._planned(model)
        if patched(PLAN_ANNOUNCES_PATCH):
            model.announce_to(self._announcements.send)
        slots = WorkerSlots(model, by_the_plan=patched(SLOTS_GRANTED_BY_THE_PLAN_PATCH))
        fan_out = FanOut(FAN_OUT_PATCH)
        placements = await self._placing.place(model)
        self._upsert_status()
        self._details.changed()
        self._scratchpad = Scratchpad(model.spec, model.state, fan_out)
        self._scratchpad.task_plan()
        self._team = TeamRoom(model)
        await self._team.start_members()
        self._schedule = TaskSchedule(
            slots,
            self._scratchpad,
            changed=self._details.changed,
            fan_out=fan_out,
            team=self._team,
            placements=placements,
        )
        polling = not patched(PROGRESS_ON_DEMAND_PATCH)
        watcher = asyncio.create_task(watch_progress(model, self._details)) if polling else None
        try:
            await self._schedule.run()
            self._open = False
        except asyncio.CancelledError:
            await self._cancelled(model)
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
        return await self._ended(model)

    async def _planned(self, model: PlanModel) -> PlanModel:
        """The planner's graph, the plan's from now on (its record says how it was planned);
        an answer refused ends the plan `planning_failed`, saying why, before any task ran; a
        plan cancelled while its planner plans ends `cancelled`, its record in the memo."""
        try:
            planned, planning = await plan_tasks(model.spec, model.state)
        except asyncio.CancelledError:
            self._open = False
            self._published(model.finish(workflow.now(), cancelled=True))
            raise
        if planned is None:
            self._open = False
            state = model.planning_refused(planning, workflow.now())
            self._published(state)
            await workflow.wait_condition(workflow.all_handlers_finished)
            error = planning.error or ""
            raise failure(FailureType.PLANNING_FAILED, error, state, non_retryable=True)
        fresh = PlanModel.begin(planned, workflow.now())
        fresh.state.planning = planning
        fresh.state.started_at = model.state.started_at
        fresh.state.tokens = model.state.tokens
        self._model = self._details.model = fresh
        return fresh

    async def _cancelled(self, model: PlanModel) -> None:
        """The run was cancelled: its tasks are, and it keeps its record in the memo. A
        decision accepted before the cancel is checked and recorded first (it came first)."""
        if model.decisions.any():
            await uncancellable(workflow.wait_condition(lambda: not model.decisions.any()))
        await uncancellable(self._schedule.stop("plan cancelled"))
        self._end(model, cancelled=True)
        await uncancellable(self._scratchpad.flush())
        await self._announcements.flush()
        await self.parkings_landed()

    async def _ended(self, model: PlanModel) -> PlanState:
        """Every task has ended, or `fail_fast` stopped the plan: the final record. What it
        still awaits is shielded from a cancel: a plan that has ended keeps its outcome."""
        if model.stopping is not None:
            await uncancellable(self._schedule.stop(model.stopping))
        if self._team is not None and self._team.busy():
            await uncancellable(self._team.close())
        state = self._end(model)
        await uncancellable(self._scratchpad.flush())
        await self._announcements.flush()
        await uncancellable(workflow.wait_condition(workflow.all_handlers_finished))
        if model.stopping is not None:
            raise failure(FailureType.PLAN_FAILED, state.summary, state, non_retryable=True)
        return state

    @workflow.query(name=STATE_QUERY, description=HANDLER_TEXT[STATE_QUERY])
    def state(self) -> PlanState:
        if self._model is None:
            plan_id = plan_id_of(workflow.info().workflow_id)
            return PlanState(plan_id=plan_id, status=PlanStatus.FAILED, summary=self._spec_error)
        return self._model.state

    @workflow.query(name=PROGRESS_QUERY, description=HANDLER_TEXT[PROGRESS_QUERY])
    def progress(self) -> PlanProgress:
        return self._model_or_fail().view.progress(workflow.now())

    @workflow.update(name=APPROVE_UPDATE, description=HANDLER_TEXT[APPROVE_UPDATE])
    async def approve(self, raw: PlainInput = NO_INPUT) -> ApprovalDecision:
        """Approve or reject a task waiting for a person (`ApprovalRequest`), by the caller's
        client identity (`decide_approval`). Raw on purpose, so a malformed request is refused
        by the validator in one line naming the field."""
        if not patched(APPROVER_IDENTITY_PATCH):
            return apply_approval(self._model, raw, self._details.changed)
        return await decide_approval(self._model, raw, self._details.changed)

    @workflow.signal(name=MEMBER_SENT_SIGNAL, description=HANDLER_TEXT[MEMBER_SENT_SIGNAL])
    async def member_sent(self, raw: PlainInput = NO_INPUT) -> None:
        """What a long-lived team member's run asked to send; what the plan refuses is parked
        (`refused_member_message`)."""
        if (refused := refused_member_message(self._team, raw)) is not None:
            await self.park_refused(*refused)

    @approve.validator
    def _validate_approval(self, raw: PlainInput = NO_INPUT) -> None:
        checked_approval(self._model, raw)

    @workflow.update  # named `add_tasks` (ADD_TASKS_UPDATE) by the method (tests/test_contract.py)
    async def add_tasks(self, raw: PlainInput = NO_INPUT) -> AddedTasks:
        """More tasks for the running plan (`AddTasks`), checked against its graph as it is
        now (a cycle, a repeated id, an unknown dependency or one that already ended without
        succeeding, the caps, a plan that has ended): a refusal names the field. A new task
        whose dependencies have all succeeded starts at once. Tasks sent while the planner
        plans wait for its graph, and are checked against it."""
        if planning_now(self._model, self._open):
            await workflow.wait_condition(lambda: not planning_now(self._model, self._open))
        tasks = checked_tasks(self._model, raw, open=self._open)
        if self._placing and await self._placing.place_added(tasks):
            tasks = checked_tasks(self._model, raw, open=self._open)  # it may have moved on
        assert self._model is not None
        self._model.add_tasks(tasks, workflow.now())
        self._details.changed()
        return AddedTasks(added=[task.id for task in tasks], total=len(self._model.spec.tasks))

    @add_tasks.validator
    def _validate_tasks(self, raw: PlainInput = NO_INPUT) -> None:
        if planning_now(self._model, self._open):
            checked_request(raw)
        else:
            checked_tasks(self._model, raw, open=self._open)

    def _model_or_fail(self) -> PlanModel:
        if self._model is None:
            raise failure(FailureType.INVALID_SPEC, self._spec_error or "", non_retryable=True)
        return self._model

    def _end(self, model: PlanModel, *, cancelled: bool = False) -> PlanState:
        self._open = False
        state = model.finish(workflow.now(), cancelled=cancelled)
        self._published(state)
        self._scratchpad.plan_ended(state)
        ended = {"plan_id": state.plan_id, "status": state.status.value, "summary": state.summary}
        workflow.logger.info("plan ended", extra=ended)
        return state

    def _published(self, state: PlanState) -> None:
        """The ended plan's status, memo, metrics and details."""
        metrics.plan_ended(state)
        self._upsert_status()
        workflow.upsert_memo({PLAN_RECORD_MEMO: memo_record(state)})
        self._details.publish_now()

    def _upsert_status(self) -> None:
        if self._model is not None:
            upsert_search_attributes(self._model.state.search_attributes())
