"""The `Saga` workflow: ordered agent steps with a compensation stack.

A thin shell over `coord.models.saga.model.SagaModel`, which holds the saga's state and decides
everything (the stack, the unwinding order, the pivot, what a cancel does, the record). This
keeps the Temporal part: each step and compensation is an agent run (`start_agent_run`), a
cancel is caught where it lands and the unwinding is shielded from it, a compensation that fails
for good is parked in the dead-letter queue, the saga's events go to its correlation's chain, and
the record is published (search attributes, current details, and the memo of a cancelled run).

Not sandboxed, as the chain and the plan: the sandbox imports a sandboxed workflow's module
afresh for every run, and a saga is short: in a profile of a worker running served sagas, that
import took a quarter of its on-CPU samples. The code touches only the workflow API and pure
models (imported passed-through, so the sandbox never re-imported them anyway); what keeps it
deterministic is the replay of its recorded histories (`tests/test_replay.py`).
"""

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.events.envelope import EventEnvelope
    from coord.models.mesh.agents import AgentRequest, AgentResult
    from coord.models.mesh.assignment import Assignment
    from coord.models.mesh.attempts import attempt_times, ran_until
    from coord.models.mesh.batches import BatchedRun
    from coord.models.mesh.placement import MAX_PLACED, Placement, PlacementAnswer, claimable
    from coord.models.mesh.runs import RunDetour
    from coord.models.mesh.usage import TokenMeter
    from coord.models.saga.ahead import steps_ahead, steps_to_pivot
    from coord.models.saga.budget import TAKEN_BEFORE, HistoryBudget
    from coord.models.saga.model import SagaEnd, SagaModel
    from coord.models.saga.spec import (
        CancelEffect,
        SagaSpec,
        SagaState,
        SagaStep,
        StackEntry,
    )
    from coord.models.wire.contract import (
        COORD_STATUS,
        EVENT_SIGNAL,
        HANDLER_TEXT,
        SAGA_HISTORY_BUDGET_MEMO,
        SAGA_PLACEMENTS_MEMO,
        SAGA_RECORD_MEMO,
        SAGA_VERSION_MEMO,
        SAGA_WORKFLOW,
        STATE_QUERY,
        FailureType,
        failure,
        failure_message,
        failure_type_of,
        saga_id_of,
    )
    from coord.models.wire.specs import SpecError
    from coord.models.wire.versions import (
        CHAIN_SEND_ONCE_PATCH,
        DEAD_LETTER_PATCH,
        SAGA_ASKS_CHAIN_ONCE_PATCH,
        SAGA_CHAIN_WITH_PLACEMENTS_PATCH,
        SAGA_EVENTS_PATCH,
        SAGA_HISTORY_BUDGET_PATCH,
        SAGA_PARKS_UNKNOWN_SIGNALS_PATCH,
        SAGA_PATCHES,
        SAGA_PATCHES_2,
        SAGA_PATCHES_3,
        SAGA_PATCHES_4,
        SAGA_PATCHES_5,
        SAGA_PATCHES_6,
        SAGA_PATCHES_7,
        SAGA_PATCHES_AT_ONCE_2_PATCH,
        SAGA_PATCHES_AT_ONCE_3_PATCH,
        SAGA_PATCHES_AT_ONCE_4_PATCH,
        SAGA_PATCHES_AT_ONCE_5_PATCH,
        SAGA_PATCHES_AT_ONCE_6_PATCH,
        SAGA_PATCHES_AT_ONCE_7_PATCH,
        SAGA_PATCHES_AT_ONCE_PATCH,
        SAGA_PATCHES_BY_VERSION,
        SAGA_PLACEMENTS_FROM_START_PATCH,
        SAGA_RUNS_STEPS_AHEAD_PATCH,
        SAGA_SENDS_IN_ORDER_PATCH,
        SAGA_STATUS_FROM_START_PATCH,
    )
    from coord.workflows._runtime import calls, metrics
    from coord.workflows._runtime.agent_runs import (
        Detoured,
        Placements,
        RunSettings,
        assign_agent,
        batched_first_attempt,
        declared_settings,
        outcomes_landed,
        start_agent_run,
        start_batched_run,
    )
    from coord.workflows._runtime.common import (
        NO_INPUT,
        PlainInput,
        attempts,
        decode_input,
        ending_with,
        failed_at,
        park,
        reported,
        show_details,
        signal_chain,
        uncancellable,
        upsert_search_attributes,
    )
    from coord.workflows._runtime.local_batches import RunsAhead
    from coord.workflows._runtime.patches import adopt_newest, in_force, patched, take
    from coord.workflows._runtime.unknown_signals import ParksUnknownSignals

WAIT_FOR_CANCEL = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
SAGA_PATCH_BUNDLES = (
    (SAGA_PATCHES_AT_ONCE_7_PATCH, SAGA_PATCHES_7),
    (SAGA_PATCHES_AT_ONCE_6_PATCH, SAGA_PATCHES_6),
    (SAGA_PATCHES_AT_ONCE_5_PATCH, SAGA_PATCHES_5),
    (SAGA_PATCHES_AT_ONCE_4_PATCH, SAGA_PATCHES_4),
    (SAGA_PATCHES_AT_ONCE_3_PATCH, SAGA_PATCHES_3),
    (SAGA_PATCHES_AT_ONCE_2_PATCH, SAGA_PATCHES_2),
    (SAGA_PATCHES_AT_ONCE_PATCH, SAGA_PATCHES),
)
"""The saga's bundles of patches, newest first (`adopt_newest`)."""
CHAIN_CHECK_TIMEOUT = timedelta(seconds=10)
CHAIN_CHECK_RETRY = RetryPolicy(maximum_attempts=2)
"""Whether the chain runs is one read of the server; unanswered, the saga sends as before."""


class StepFailed(Exception):
    """A step failed for good (the model has recorded how): the saga unwinds or fails."""


@workflow.defn(name=SAGA_WORKFLOW, sandboxed=False)
class Saga(ParksUnknownSignals, kind="a saga", patch=SAGA_PARKS_UNKNOWN_SIGNALS_PATCH):
    def __init__(self) -> None:
        self._model = SagaModel(saga_id_of(workflow.info().workflow_id))
        self._status = StatusWrites(self._model)
        self._sends = ChainSends(self._model)
        self._placements = Placements()  # where its agents run: asked before the first step
        self._ahead = StepsAhead()
        self._room = HistoryRoom(self._model, self._sends, self._ahead)
        self._options: dict[str, Any] = {
            "cancellation": WAIT_FOR_CANCEL,
            "placements": self._placements,
        }
        """What every run of the saga is started with besides its own settings."""

    @workflow.run
    async def run(self, raw_spec: PlainInput = NO_INPUT) -> SagaState:
        """`raw_spec` is raw on purpose: a malformed spec sent as plain JSON (Temporal CLI, UI),
        even one that does not decode, fails the run with a message naming the field."""
        self._status.adopt_patches()
        self._sends.announcing = patched(SAGA_EVENTS_PATCH)
        try:
            spec = decode_input(SagaSpec, raw_spec, "saga spec", context=spec_context())
        except SpecError as error:
            raise self._ended(self._model.refuse(str(error))) from None
        info = workflow.info()
        self._model.begin(
            spec, workflow_id=info.workflow_id, first_run_id=info.first_execution_run_id
        )
        self._options["inline_agents"] = spec.agents
        self._options["tokens"] = TokenMeter(self._model.state.tokens, spec.budget)
        self._publish()
        return await ending_with(self._outcome(), self._leave)

    async def _leave(self) -> None:
        """However the run ends: its status written, its events sent, its signals parked."""
        self._status.write()
        late = partial(self._note_cancel, "ended")
        await uncancellable(asyncio.gather(*self._sends.pending, self.parkings_landed()), late)

    async def _outcome(self) -> SagaState:
        try:
            await learn_placements(self._placements, self._model, self._sends)
            self._sends.ask_first(self._status.per_task, self._placements)
            for index, step in self._room.steps():
                await self._ahead.run_from(index, self._model, self._placements, self._options)
                await self._run_step(index, step)
        except StepFailed:
            end = self._model.after_failure()  # None: before the pivot, so the stack is unwound
            if end is None:
                compensating = partial(self._note_cancel, "compensating")
                await uncancellable(self._compensate(cancelled=False), compensating)
                end = self._model.compensated_end()
            raise self._ended(end) from None
        except asyncio.CancelledError:
            await uncancellable(self._compensate(cancelled=True))
            if self._sends.announcing:  # a cancelled run has no result: the memo keeps the record
                workflow.upsert_memo({SAGA_RECORD_MEMO: self._model.state})
            raise
        self._model.completed()
        self._publish()
        return self._model.state

    @workflow.query(name=STATE_QUERY, description=HANDLER_TEXT[STATE_QUERY])
    def state(self) -> SagaState:
        return self._model.state

    async def _run_step(self, index: int, step: SagaStep) -> None:
        retry = self._model.step_started(index, step)
        self._publish()
        try:
            if step.route is not None:
                self._status.write()
            agent = self._model.step_agent(step, await assign_agent(step.route, step.name))
            self._publish()
            settings = declared_settings(step, step.name, retry=retry, **self._options)
            request = self._model.step_request(step, agent, retry)
            self._status.before_run(settings, request)
            detoured = partial(self._detoured, step.name)
            running = self._ahead.start(index, request, settings, detoured)
            result = await self._await_step(running)
        except asyncio.CancelledError:
            self._model.step_cancelled(step)
            raise
        except ActivityError as error:
            if is_cancelled_exception(error):
                self._model.step_cancelled(step)
                raise asyncio.CancelledError from error
            failed = (failure_type_of(error), failure_message(error))
            self._sends.send(self._model.step_failed(index, step, *failed, failed_at(error)))
            if self._model.unwinding:
                raise asyncio.CancelledError from error
            raise StepFailed from error
        self._sends.send(self._model.step_succeeded(index, step, result.data, ran_until(result)))
        completed = {"step": step.name, "event": step.on_success, "pivot": step.pivot}
        log(self._model.state, "step completed", **completed)
        if self._model.unwinding:
            raise asyncio.CancelledError

    async def _await_step(self, running: "asyncio.Task[AgentResult]") -> AgentResult:
        """The step's result, whatever a cancel does meanwhile. Before the pivot a cancel is
        passed on to the agent, which may honour it or ignore it (no heartbeat, or done inside the
        heartbeat throttle): a result is kept either way, even one arriving in the same workflow
        task as the cancel, and the stack is unwound after it. After the pivot the step runs on."""
        try:
            await workflow.wait([running])
        except asyncio.CancelledError:
            effect = self._model.cancel_effect()
            self._note_cancel(effect)
            await outcomes_landed()  # a result resolved in this workflow task lands first
            if not running.done() and effect == "unwind":
                running.cancel()
        return await uncancellable(running)

    def _note_cancel(self, effect: CancelEffect) -> None:
        if self._model.cancel_requested(effect, workflow.now()):
            log(self._model.state, "cancel requested", effect=effect)
            self._publish()

    async def _compensate(self, *, cancelled: bool) -> None:
        pending = self._model.compensating(cancelled=cancelled)
        self._publish()
        if self._model.spec.parallel_compensation:
            await asyncio.gather(*(self._undo(entry) for entry in pending))
        else:
            for entry in pending:
                if not self._model.goes_on(await self._undo(entry)):
                    break
        end = self._model.compensation_ended()
        if end is not None:
            raise self._ended(end) from None
        self._publish()

    async def _undo(self, entry: StackEntry) -> bool:
        """Run one compensation; one that fails for good is parked for a person."""
        step, request = self._model.undo_request(entry)
        metrics.saga_compensation(entry.compensate)
        settings = RunSettings(
            f"compensate: {entry.compensate}",
            step.compensation_retry,
            step.compensation_timeout,
            schedule_to_start=step.schedule_to_start_timeout,
            **self._options,
        )
        detoured = partial(self._detoured, f"{step.name}/undo")
        self._status.before_run(settings, request)
        try:
            result = await start_agent_run(request, settings, detoured)
        except ActivityError as error:
            message = self._model.undo_failed(entry, failure_message(error))
            self._publish()
            spent = attempts(error, step.compensation_retry.to_retry_policy())
            await self._dead_letter(entry, request, message, spent, error)
            return False
        self._sends.send(self._model.undone(entry, result.data, ran_until(result)))
        self._publish()
        return True

    async def _dead_letter(
        self, entry: StackEntry, run: AgentRequest, why: str, spent: int, failed: ActivityError
    ) -> None:
        """Parked (replayable as the same run, dated by its attempts), announced to the chain."""
        if not patched(DEAD_LETTER_PATCH):
            return
        self._status.write()
        await park(
            FailureType.COMPENSATION_FAILED,
            why,
            event=self._model.command(entry.compensate),
            target_agent=entry.compensate,
            attempt_count=spent,
            failed_attempts=attempt_times(reported(failed)),
            replay="run_agent",
            idempotency_key=run.idempotency_key,
            inputs=run.inputs,
        )
        notice = self._model.undo_failed_notice(entry, why, recorded=self._sends.announcing)
        if self._sends.announcing:
            self._sends.send(notice)
        else:
            await self._sends.signal(notice)

    def _detoured(self, step: str, detour: RunDetour, assignment: Assignment | None) -> None:
        """A detour may wait (a timer, another agent's queue): the status is written first."""
        self._model.detoured(step, detour, assignment)
        self._publish()
        self._status.write()

    def _ended(self, end: SagaEnd) -> ApplicationError:
        """Business outcomes end the run as typed failures carrying the final record."""
        self._publish()
        self._status.write()
        return failure(end.failure_type, end.message, self._model.state, non_retryable=True)

    def _publish(self) -> None:
        """After every change: the status as a search attribute (`StatusWrites`), the details."""
        state = self._model.state
        if self._status.changed():
            metrics.saga_status(state.status)
            log(state, "saga status", status=state.status.value, reason=state.failure_reason)
        show_details(self._model.details())


def log(state: SagaState, message: str, **fields: Any) -> None:
    """A line of the saga's log, with its ids."""
    extra = {"correlation_id": state.correlation_id, "saga_id": state.saga_id, **fields}
    workflow.logger.info(message, extra=extra)


def may_run_locally(model: SagaModel) -> bool:
    """Whether the spec lets every step and compensation run as a local activity (named agents,
    not declared inline, no route, no heartbeat timeout): the worker's placements decide."""
    spec = model.spec
    declared = all(s.route is None and s.heartbeat_timeout is None for s in spec.steps)
    return declared and not any(agent in spec.agents for agent in spec.agents_run())


def all_local(model: SagaModel, placements: Placements) -> bool:
    """Whether every step and compensation runs as a local activity: the saga then ends in the
    workflow task it began in, unless something it sent is awaited (`ChainSends`)."""
    return may_run_locally(model) and all(
        placements.local(agent) for agent in model.spec.agents_run()
    )


class StepsAhead:
    """The first attempts of a saga's steps, all local, run ahead in one local activity, in
    order, each handed the results of those before it (`RunsAhead`): a five-step saga takes one
    marker and one round trip to its agents, not five. Each step then takes its outcome in turn,
    as its run's first attempt, and goes on from there as it would have (its retries, detours
    and failure); the steps after one that did not succeed run ahead again once it ends.

    A batch ends before the pivot (the pivot begins the next), and a cancel landing while a
    batch runs is recorded when it ends, as landing while its last step ran: the results are
    kept and, before the pivot, the stack is unwound after them, so a cancel still keeps the
    pivot from running. Meanwhile the saga's record shows the steps before the batch. Runs
    recorded before SAGA_RUNS_STEPS_AHEAD_PATCH ran each step alone."""

    def __init__(self) -> None:
        self.lane = RunsAhead()
        self._reached: set[int] = set()
        self._last = 0
        """The last step the latest batch reached, when a cancel landed while it ran."""
        self._off = False
        """The steps left run alone: not all local, or a batch reached none (it failed as a
        whole), or the run does not take the patch."""

    async def run_from(
        self, index: int, model: SagaModel, placements: Placements, options: dict[str, Any]
    ) -> None:
        """Runs ahead the steps from `index` to the pivot after it, unless a batch reached it
        already; only two steps or more, every run local, no token budget to spend (each run is
        sent what is left of it), in a run that takes the patch."""
        if self._off or index in self._reached or model.spec.budget is not None:
            return
        if not all_local(model, placements):  # learned once, before the first step
            self._off = True
            return
        steps = steps_to_pivot(model, index)
        if len(steps) < 2:
            return
        if not patched(SAGA_RUNS_STEPS_AHEAD_PATCH):
            self._off = True
            return
        ahead = steps_ahead(model, steps)
        runs = []
        for run in ahead:
            settings = declared_settings(run.step, run.step.name, retry=run.retry, **options)
            first = batched_first_attempt(run.request, settings)
            timeout = run.step.timeout.total_seconds()
            runs.append(BatchedRun(request=first, timeout_s=timeout, result_as=run.step.name))
        landed: list[bool] = []
        await uncancellable(self.lane.run_all(runs), partial(landed.append, True))
        reached = [run.index for run in ahead if self.lane.reached(run.request)]
        self._reached.update(reached)
        self._off = not reached
        if landed and not reached:
            raise asyncio.CancelledError  # as a cancel landing before the step
        self._last = max(reached) if landed else 0

    def ran(self, index: int) -> bool:
        """Whether a batch reached the step: it ran, and takes its outcome whatever else holds."""
        return index in self._reached

    def start(
        self, index: int, request: AgentRequest, settings: RunSettings, on_detour: Detoured
    ) -> "asyncio.Task[AgentResult]":
        """The step's run: from its first attempt's outcome when a batch reached it. A cancel
        that landed while the batch ran is delivered as the last step it reached starts: the
        saga's task is cancelled, so it lands as the saga awaits that step's result, as a cancel
        landing while the step ran would have."""
        if index == self._last:
            self._last = 0
            saga = asyncio.current_task()
            assert saga is not None
            saga.cancel()
        if self.lane.reached(request):
            return start_batched_run(request, settings, self.lane, on_detour)
        return start_agent_run(request, settings, on_detour)


class HistoryRoom:
    """The saga's steps while its history has room for them and for compensating those before
    them (`budget.HistoryBudget`), in a run taking SAGA_HISTORY_BUDGET_PATCH (never asked
    mid-run: `in_force`). Before each step not yet run ahead, the history's size and length as
    the SDK reports them: those recorded in the started event of the workflow task, so replay
    sees what the run saw. Past the budget the step fails unrun (`StepFailed`), announced as
    any failed step, and the saga unwinds."""

    def __init__(self, model: SagaModel, sends: "ChainSends", ahead: StepsAhead) -> None:
        self._model = model
        self._sends = sends
        self._ahead = ahead

    def steps(self) -> Iterator[tuple[int, SagaStep]]:
        budget = history_budget() if in_force(SAGA_HISTORY_BUDGET_PATCH) else None
        info = workflow.info()
        for index, step in self._model.steps():
            if budget is not None and not self._ahead.ran(index):
                size, length = info.get_current_history_size(), info.get_current_history_length()
                if budget.passed(size, length):
                    why = budget.reason(size, length)
                    log(self._model.state, "history budget passed", step=step.name, reason=why)
                    failed = self._model.step_failed(
                        index, step, FailureType.HISTORY_BUDGET, why, None
                    )
                    self._sends.send(failed)
                    raise StepFailed
            yield index, step


def spec_context() -> dict[str, bool] | None:
    """How the run validates its spec: a run taking SAGA_HISTORY_BUDGET_PATCH holds it to what
    its runs may carry (`budget.carried_problem`); one recorded before took it without."""
    return None if in_force(SAGA_HISTORY_BUDGET_PATCH) else TAKEN_BEFORE


def history_budget() -> HistoryBudget:
    """The run's budget: the default, or a smaller one its start carries (a test's,
    SAGA_HISTORY_BUDGET_MEMO), read once per run."""
    try:
        return HistoryBudget.lowered(workflow.memo_value(SAGA_HISTORY_BUDGET_MEMO, None))
    except (TypeError, ValueError) as error:
        workflow.logger.warning("saga history budget unreadable, default kept: %s", error)
        return HistoryBudget()


class StatusWrites:
    """The saga's status as a search attribute, written once per change of status: at once
    (runs recorded before SAGA_PATCHES_AT_ONCE_PATCH), or, `per_task`, once per workflow task:
    before the workflow waits on anything but a local run, and when it ends. A local run holds
    its task, which the next status replaces, so a saga whose runs are all local writes
    `in_progress` only if it waits on something else. `per_task` runs also ask whether their
    chain runs before they send, when their runs are all local (`ChainSends.asks_first`)."""

    def __init__(self, model: SagaModel) -> None:
        self._model = model
        self._shown = model.state.status
        self._unwritten = False
        self._skips_carried = False
        """A write of the status the run's search attribute holds is skipped (as the start set
        it, or as last written: SAGA_STATUS_FROM_START_PATCH)."""
        self.per_task = False

    def adopt_patches(self) -> None:
        """The run's patches: those of the version its start carries (`started_patches`),
        taken without asking, else its bundle, asked first: the newest it takes
        (`_runtime.patches`); either makes the status written once per workflow task
        (`per_task`). Replayed, a run whose start carries a version asks the bundles first
        all the same: a worker older than the version ignored it and asked its bundle, whose
        marker replay then meets (a worker that read the version recorded none, and the asks
        find nothing and issue nothing), so a starter upgraded before the workers is safe."""
        covered = started_patches()
        if covered is not None and not workflow.unsafe.is_replaying():
            take(covered)
            self.per_task = True
        else:
            self.per_task = adopt_newest(SAGA_PATCH_BUNDLES)
            if covered is not None and not self.per_task:
                take(covered)
                self.per_task = True
        self._skips_carried = patched(SAGA_STATUS_FROM_START_PATCH)

    def changed(self) -> bool:
        """Whether the status changed since last asked; written at once unless `per_task`."""
        status = self._model.state.status
        if status == self._shown:
            return False
        self._shown, self._unwritten = status, True
        if not self.per_task:
            self.write()
        return True

    def before_run(self, settings: RunSettings, request: AgentRequest) -> None:
        """A run that is not local may end the workflow task: the status is written first."""
        if settings.placement(request) != Placement.LOCAL:
            self.write()

    def write(self) -> None:
        """The status, if it changed since it was last written."""
        status = self._model.state.status
        carried = workflow.info().typed_search_attributes.get(COORD_STATUS) == status
        if self._unwritten and not (self._skips_carried and carried):
            upsert_search_attributes(self._model.state.search_attributes())
        self._unwritten = False


def started_patches() -> frozenset[str] | None:
    """The patches of the saga runtime version the run's starter wrote into its start
    (SAGA_VERSION_MEMO, SAGA_PATCHES_BY_VERSION); None without one, or with one this code does
    not know, or anything else there (a start is not trusted): the run then asks its bundle."""
    try:
        version = workflow.memo_value(SAGA_VERSION_MEMO, None)
    except (TypeError, ValueError) as error:
        workflow.logger.warning("saga version unreadable, patches asked: %s", error)
        return None
    return SAGA_PATCHES_BY_VERSION.get(version) if type(version) is int else None


async def learn_placements(placements: Placements, model: SagaModel, sends: "ChainSends") -> None:
    """Where the saga's agents run, and whether its chain runs, before its first step: as its
    start says (`started_placements`), else asked of its worker once."""
    agents = model.spec.agents_run()
    started = started_placements(agents)
    if started is not None:
        placements.take(started)
    await placements.learn(agents, sends.chain_of())


def started_placements(agents: list[str]) -> PlacementAnswer | None:
    """Where the run's start says its `agents` run, and whether its chain runs
    (SAGA_PLACEMENTS_MEMO), in a run taking SAGA_PLACEMENTS_FROM_START_PATCH: only an answer
    for every one of them, none local (`claimable`); else None, and the run asks its worker
    (a start is not trusted: anything else there is ignored)."""
    if not in_force(SAGA_PLACEMENTS_FROM_START_PATCH):
        return None
    try:
        raw = workflow.memo_value(SAGA_PLACEMENTS_MEMO, None)
        answer = None if raw is None else PlacementAnswer.model_validate(raw)
    except (TypeError, ValueError) as error:  # a ValidationError is a ValueError
        workflow.logger.warning("placements in the start unreadable, asked: %s", error)
        return None
    if answer is None or len(answer.agents) > MAX_PLACED or not claimable(answer):
        return None
    return answer if set(agents) <= answer.agents.keys() else None


class ChainSends:
    """The saga's events on their way to its correlation's chain, each sent in the background
    (`pending`, which the run awaits before it ends). `announcing`: the run sends its own
    events (runs recorded before sent only a failed compensation's notice). `asks_first`:
    the first send asks whether the chain runs before it signals (`_chain_runs`), for a saga
    whose runs are all local: the question holds the workflow task it is asked in, which for
    a saga with activity tasks would delay its next step's dispatch, while a failed signal's
    answer lands in one of the tasks its later steps take anyway."""

    def __init__(self, model: SagaModel) -> None:
        self._model = model
        self.announcing = False
        self.asks_first = False
        self.pending: list[asyncio.Task[None]] = []
        self._chain_reachable = True
        """False once a send found no chain: a saga without one pays one failed signal."""
        self._waits_for_first: bool | None = None

    def chain_of(self) -> str | None:
        """The correlation whose chain the placements' look-up is asked about too, for a saga
        that may run all its agents locally (SAGA_CHAIN_WITH_PLACEMENTS_PATCH): its answer
        then settles whether the saga sends, and no send asks again."""
        if not may_run_locally(self._model) or not patched(SAGA_CHAIN_WITH_PLACEMENTS_PATCH):
            return None
        return self._model.state.correlation_id

    def ask_first(self, per_task: bool, placements: Placements) -> None:
        """The first send asks whether the chain runs, in a run that writes its status once
        per task (`StatusWrites.per_task`) and whose runs are all local, unless the
        placements' look-up answered it (`Placements.chain_runs`): a saga without a running
        chain then sends nothing."""
        if placements.chain_runs is not None:
            self._chain_reachable = placements.chain_runs
            return
        self.asks_first = per_task and all_local(self._model, placements)

    def send(self, envelope: EventEnvelope) -> None:
        """To the correlation's chain, in the background (the run waits for it before it ends),
        once the send it follows has landed (`_follows`)."""
        if not (self.announcing and self._chain_reachable):
            return
        self.pending.append(asyncio.create_task(self._announce(envelope, self._follows())))

    def _follows(self) -> "asyncio.Task[None] | None":
        """The send a new one waits for: the one before it (SAGA_SENDS_IN_ORDER_PATCH), so the
        chain takes the saga's events in the order it made them, one signal at a time (a
        saga's few events cost a round trip each, and only where a chain runs); in runs
        recorded before, the first, once it has found the chain (SAGA_ASKS_CHAIN_ONCE_PATCH),
        or none."""
        if not self.pending:
            return None
        if in_force(SAGA_SENDS_IN_ORDER_PATCH):
            return self.pending[-1]
        return self.pending[0] if self._after_first() else None

    def _after_first(self) -> bool:
        """Whether sends after the first wait for its answer: asked once, at the second send
        (by the order of the sends, never by when an answer came)."""
        if self._waits_for_first is None:
            self._waits_for_first = patched(SAGA_ASKS_CHAIN_ONCE_PATCH)
        return self._waits_for_first

    async def _announce(self, envelope: EventEnvelope, before: "asyncio.Task[None] | None") -> None:
        if before is not None:
            await workflow.wait([before])
            if not self._chain_reachable:
                return
        elif self.asks_first and not await self._chain_runs():
            self._chain_reachable = False
            return
        await self.signal(envelope)

    async def _chain_runs(self) -> bool:
        """Whether the correlation's chain runs, asked in a local activity: a saga without one
        then sends nothing. A signal to a chain that does not run fails in a workflow task of
        its own, which a saga of local runs waits for before it ends (a server round trip after
        its last step, and five events); the local activity is one marker in its task. A
        chain started after the question misses the saga's events, as one started after a
        failed first signal did. Unanswered (a worker without the activity), the saga sends."""
        try:
            running: bool = await calls.execute_local(
                refs.CHAIN_RUNNING,
                self._model.state.correlation_id,
                start_to_close_timeout=CHAIN_CHECK_TIMEOUT,
                retry_policy=CHAIN_CHECK_RETRY,
                summary="does the correlation's chain run?",
            )
        except (FailureError, ValueError) as error:  # a local activity's own failure too
            workflow.logger.warning("chain not looked up, sending: %s", error)
            return True
        return running

    async def signal(self, envelope: EventEnvelope) -> None:
        """Into the correlation's chain; when none runs, the saga's own record has the event."""
        raw = envelope.model_dump(mode="json")
        if not await signal_chain(self._model.state.correlation_id, EVENT_SIGNAL, raw):
            self._chain_reachable = not patched(CHAIN_SEND_ONCE_PATCH)
