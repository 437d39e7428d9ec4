"""The `ReactiveChain` workflow: one durable chain per correlation id.

Events arrive as `event` signals (plain JSON envelopes). Each enters the chain's one queue once,
as the signal handler hands it to the model (`ChainIntake`), and is handed out once, when a
workflow task takes it in (`ChainModel.take_next`): deduplicated, checked, logged in order,
matched against the subscriptions (topic, type, CEL filter, join), which may queue agent runs.
An acknowledged publish (the `publish` update) is taken in at once instead, so that its answer
says what became of the event; its validator refuses what the intake would reject.
Runs start up to the spec's concurrency limit (`ChainRunner`); their results are published back
into the queue as new events, caused by the event that triggered them. What the chain decides is
its model's (coord.models.chain.model); this module is its Temporal side: signals and queries,
timers, starting runs, sending what the model decides (`Outbound`) and continue-as-new.

Why a run may be a workflow of its own (`ChainRun`, coord.workflows.chain.run). A chain
continues as new when its history reaches its budget, and an activity cannot cross that: a
chain running `run_agent` itself waits for its agents before it continues. Most agent runs are
short, and run here, as activities of the chain (the fast path: a child workflow and a signal
per run would cost most of the chain's throughput). Once continue-as-new is due, the chain
stops holding runs itself: it waits for those it holds, and meanwhile hands each run it starts
to a `ChainRun` started with `ParentClosePolicy.ABANDON`, so no queued run waits for a slow
agent; a subscription declaring `hand_over: true` (an agent that may run long) hands every run
over, so the chain never waits for it. A `ChainRun` runs the agent (`start_agent_run`, with the
subscription's timeouts, retries, gates and detours) or holds the vote (votes are always handed
over), and signals the outcome to the chain's workflow id (`run_outcome`), which reaches
whichever run is current. The chain keeps the run in flight (`ChainCarry.in_flight`, carried
across continue-as-new) until its outcome comes, so nothing is lost; the outcome names the run
by its queue number, so an outcome taken once is refused the second time, and each `ChainRun`
has an id of its own (`<chain id>/run-<n>`), so nothing runs twice. The run's detours (waits at
its agent's gates, reroutes) come back with its outcome. Runs recorded before the
`chain-runs-in-workflows-of-their-own` patch ran every agent here.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from coord.models.chain.boundary import Rejection, Undecodable
    from coord.models.chain.intake import TaskShare
    from coord.models.chain.model import ChainModel, standin_input
    from coord.models.chain.run import ChainRunInput, RunOutcome, started_apart
    from coord.models.chain.spec import (
        AgentRun,
        ChainInput,
        ChainState,
        ListenerId,
        RecordedEvents,
        RerunRequest,
        Subscription,
    )
    from coord.models.events.envelope import EventEnvelope
    from coord.models.events.timeline import TimelineEntry
    from coord.models.mesh.agents import AgentRequest, AgentResult
    from coord.models.mesh.assignment import Assignment
    from coord.models.mesh.attempts import attempt_times
    from coord.models.mesh.lifecycle import RunFailure
    from coord.models.mesh.placement import Placement
    from coord.models.mesh.runs import RunDetour
    from coord.models.vote.spec import VoteSpec, VoteState
    from coord.models.wire.contract import (
        AGENTS,
        ATTACH_SIGNAL,
        CHAIN_RUN_WORKFLOW,
        CHAIN_WORKFLOW,
        CLOSE_SIGNAL,
        DETACH_SIGNAL,
        EVENT_SIGNAL,
        HANDLER_TEXT,
        PUBLISH_UPDATE,
        RECORDED_SIGNAL,
        RERUN_SIGNAL,
        RUN_OUTCOME_SIGNAL,
        STATE_QUERY,
        TIMELINE_QUERY,
        UNKNOWN_SIGNAL,
        FailureType,
        PublishAnswer,
        agent_search_values,
        chain_run_workflow_id,
        chain_workflow_id,
        failure,
        failure_message,
        failure_type_of,
    )
    from coord.models.wire.sizes import json_size
    from coord.models.wire.specs import SpecError
    from coord.models.wire.versions import (
        AGENTS_ATTRIBUTE_PATCH,
        CHAIN_BATCHES_LOCAL_RUNS_PATCH,
        CHAIN_LOCAL_RUNS_PATCH,
        CHAIN_PARKS_UNKNOWN_SIGNALS_PATCH,
        CHAIN_PATCHES,
        CHAIN_PATCHES_2,
        CHAIN_PATCHES_3,
        CHAIN_PATCHES_4,
        CHAIN_PATCHES_5,
        CHAIN_PATCHES_AT_ONCE_2_PATCH,
        CHAIN_PATCHES_AT_ONCE_3_PATCH,
        CHAIN_PATCHES_AT_ONCE_4_PATCH,
        CHAIN_PATCHES_AT_ONCE_5_PATCH,
        CHAIN_PATCHES_AT_ONCE_PATCH,
        CHAIN_PLACES_BEFORE_ITS_BUDGET_PATCH,
        CHAIN_RUN_BUDGET_PATCH,
        DECODE_IN_TASK_PATCH,
        HAND_OVER_PATCH,
        KEEP_DISPATCHING_PATCH,
        LOG_POSITIONS_PATCH,
        LOG_SEGMENTS_PATCH,
        PARK_BEFORE_INVALID_INPUT_FAILS_PATCH,
        PARK_QUEUED_RUNS_PATCH,
        SETTLE_PATCH,
    )
    from coord.workflows._runtime import metrics
    from coord.workflows._runtime.agent_runs import (
        Placements,
        RunSettings,
        assign_agent,
        declared_settings,
        start_agent_run,
        start_batched_run,
    )
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.child_votes import VOTE_FAILED, hold_vote, vote_failure
    from coord.workflows._runtime.common import (
        NO_INPUT,
        PlainInput,
        attempts,
        decode_input,
        ending_with,
        reported,
        show_details,
        unknown_signal,
    )
    from coord.workflows._runtime.fan_out import NEXT_TASK
    from coord.workflows._runtime.local_batches import LocalBatches
    from coord.workflows._runtime.patches import adopt_newest, in_force, patched
    from coord.workflows.chain.boundary import (
        Outbound,
        WorkflowRun,
        acked_event,
        decoded,
        json_text,
        park_letter,
    )
    from coord.workflows.chain.log import write_log

M = TypeVar("M", bound=BaseModel)


def _patched_at_start(model: ChainModel, runner: "ChainRunner") -> None:
    """What the run does as runs recorded before its patches did not, asked once it starts."""
    model.pacing.keep_dispatching = patched(KEEP_DISPATCHING_PATCH)
    model.pacing.hands_over = patched(HAND_OVER_PATCH)
    model.log.enabled = patched(LOG_SEGMENTS_PATCH)
    model.intake.numbers_rows = patched(LOG_POSITIONS_PATCH)
    model.intake.budget.enabled = patched(CHAIN_RUN_BUDGET_PATCH)
    if patched(CHAIN_LOCAL_RUNS_PATCH):
        runner.run_locally()


RECORDING_TIMER = "local runs recorded first"
"""The summary of the 1 ms timer a run that ran agents locally takes before it continues as new
or ends (`_recorded`)."""

PATCH_BUNDLES = (
    (CHAIN_PATCHES_AT_ONCE_5_PATCH, CHAIN_PATCHES_5),
    (CHAIN_PATCHES_AT_ONCE_4_PATCH, CHAIN_PATCHES_4),
    (CHAIN_PATCHES_AT_ONCE_3_PATCH, CHAIN_PATCHES_3),
    (CHAIN_PATCHES_AT_ONCE_2_PATCH, CHAIN_PATCHES_2),
    (CHAIN_PATCHES_AT_ONCE_PATCH, CHAIN_PATCHES),
)
"""The chain's bundles of patches, newest first (`adopt_newest`)."""


@workflow.defn(name=CHAIN_WORKFLOW, sandboxed=False)
class ReactiveChain(metaclass=SurplusStartArguments):
    """The Temporal side of a chain: signals, queries, timers, runs and continue-as-new. Not
    sandboxed, as every workflow of the project (`coord.infra.workflow_runner` says why: a
    chain's replay under a flood took three times the CPU in the sandbox)."""

    @workflow.init
    def __init__(self, raw_input: PlainInput = NO_INPUT) -> None:
        """Parses the input here, before any signal of a signal-with-start is handled; a bad input
        is reported by `run`, since nothing may fail the workflow task."""
        adopt_newest(PATCH_BUNDLES, on=self)
        self._input_error: str | None = None
        try:
            chain_input = decode_input(ChainInput, raw_input, "chain input")
        except SpecError as error:
            self._input_error = str(error)
            chain_input = standin_input(workflow.info().workflow_id)
        self._model = ChainModel(chain_input, workflow.info().workflow_id, WorkflowRun(on=self))
        self._outbound = Outbound(self._model)
        self._runner = ChainRunner(self._model, self._outbound)
        self._facts = metrics.ChainFacts(self._model.spec, self._model.record.seq)

    @workflow.run
    async def run(self, raw_input: PlainInput = NO_INPUT) -> ChainState:
        if self._input_error:
            if patched(PARK_BEFORE_INVALID_INPUT_FAILS_PATCH):
                await workflow.wait_condition(lambda: not self._outbound.count)
            raise failure(FailureType.INVALID_INPUT, self._input_error, non_retryable=True)
        _patched_at_start(self._model, self._runner)
        self._outbound.upsert_status()
        self._runner.announce_agents()
        while not self._model.finished(self._outbound.count):
            if not await self._take_turn():
                break
        self._model.end()
        await write_log(self._model.log, to_the_end=True)
        if self._model.record.queue and patched(PARK_QUEUED_RUNS_PATCH):
            await asyncio.gather(*(park_letter(p) for p in self._model.runs.take_queued()))
        self._outbound.upsert_status()
        show_details(self._model.details())
        await self._settle()
        return self.state()

    async def _take_turn(self) -> bool:
        """One turn of the run's loop: wait for work, take in what arrived and dispatch it, and
        continue as new when the history is long. False when the chain has idled out."""
        pacing, idle = self._model.pacing, self._model.spec.idle_timeout
        wake = pacing.wake_in()
        try:
            timeout = idle if wake is None else min(wake, idle)
            await workflow.wait_condition(self._has_work, timeout=timeout)
        except TimeoutError:
            if wake is None and self._model.close_idle():
                return False
        pacing.note_time()
        more = self._take_in()
        self._facts.seen(self._model.record)
        self._runner.dispatch()
        await write_log(self._model.log)
        show_details(self._model.details())
        if pacing.continue_as_new_now(self._outbound.count):
            await self._recorded()
            workflow.continue_as_new(self._model.carry())
        if more:
            await workflow.sleep(NEXT_TASK, summary="more events in the next task")
        return True

    async def _recorded(self) -> None:
        """Quiet, in a workflow task recording no local run's outcome, as a run's last task
        (continue-as-new, the end) must be: the server refuses a last task when signals arrived
        meanwhile, markers and all, and those runs would run again (`outcomes_unrecorded`)."""
        await workflow.wait_condition(self._quiet)
        while unrecorded := self._model.pacing.outcomes_unrecorded():
            await workflow.sleep(NEXT_TASK, summary=RECORDING_TIMER)
            self._model.pacing.recorded(unrecorded)
            await workflow.wait_condition(self._quiet)

    def _take_in(self) -> bool:
        """Hands the waiting events to the model, a workflow task's share, one at a time, each
        one's sends sent before the next is taken; True when some are left for the next task."""
        share = TaskShare()
        while self._model.take_next(share):
            self._outbound.flush()
        return share.more

    def _has_work(self) -> bool:
        return self._model.has_work(self._outbound.count)

    def _quiet(self) -> bool:
        """No handler running, and every signal sent and every parking done."""
        return workflow.all_handlers_finished() and not self._outbound.count

    async def _settle(self) -> None:
        """Before the run ends: every send and parking is awaited, every local run's outcome is
        recorded (`_recorded`), and an event that arrived while the chain was ending is parked,
        never dropped. (Runs recorded before ended once their handlers had.)"""
        if not patched(SETTLE_PATCH):
            await workflow.wait_condition(workflow.all_handlers_finished)
            return
        await self._recorded()
        while self._model.intake.waiting():
            self._model.intake.refuse_waiting()
            self._outbound.flush()
            await self._recorded()

    @workflow.signal(name=EVENT_SIGNAL, description=HANDLER_TEXT[EVENT_SIGNAL])
    def event(self, raw: PlainInput = NO_INPUT) -> None:
        """Raw on purpose: an envelope that does not decode or validate is recorded and parked,
        never raised. A plain JSON one enters the queue as its text, decoded when a workflow
        task takes it, a bounded number a task: a worker that lost the run gets every signal
        since its last completed task in one activation, thousands under a flood, and each
        handler must stay cheap or that activation trips the deadlock detector on every
        attempt. (Runs recorded before decoded each as it came.)"""
        text = json_text(raw)
        closing = self._model.record.closing
        if text is not None and not closing and patched(DECODE_IN_TASK_PATCH):
            self._model.receive(text)
        else:
            self._model.receive(decoded(EventEnvelope, raw, "event"))
        self._outbound.flush()

    @workflow.update(name=PUBLISH_UPDATE, description=HANDLER_TEXT[PUBLISH_UPDATE])
    def publish(self, raw: PlainInput = NO_INPUT) -> PublishAnswer:
        """An acknowledged publish: the event is taken in at once, and the answer says what
        became of it (accepted with its timeline number, or a duplicate). Raw, as `event`; what
        the chain would reject is refused by the validator, so nothing is recorded or parked
        and the publisher learns why. A run overdue to continue as new fails it `chain_busy`
        (the validator may not ask the patch deciding it): the publisher tries the next run."""
        envelope = acked_event(raw, self._model, self._input_error)
        busy = self._model.busy(envelope)
        if busy is not None:
            raise failure(busy.kind, busy.reason)
        answer = self._model.take_acked(envelope, workflow.info().workflow_id)
        self._outbound.flush()
        return answer

    @publish.validator
    def _validate_publish(self, raw: PlainInput = NO_INPUT) -> None:
        acked_event(raw, self._model, self._input_error)

    @workflow.signal(name=RERUN_SIGNAL, description=HANDLER_TEXT[RERUN_SIGNAL])
    def rerun(self, raw: PlainInput = NO_INPUT) -> None:
        """A dead letter replayed: run the subscription's agent again on the (fixed) event, and
        continue the chain from there."""
        self._take(RerunRequest, raw, "rerun", FailureType.INVALID_RERUN, self._model.rerun)

    @workflow.signal(dynamic=True, description=HANDLER_TEXT[UNKNOWN_SIGNAL])
    def unknown(self, name: str, args: Sequence[RawValue]) -> None:
        """A signal no handler takes: parked (`park_unknown_signal`)."""
        park_unknown_signal(self._model, self._outbound, name, args)

    @workflow.signal(name=RECORDED_SIGNAL, description=HANDLER_TEXT[RECORDED_SIGNAL])
    def recorded(self, raw: PlainInput = NO_INPUT) -> None:
        """A rewound copy's past, in the original's order: taken in like events, but no agent
        runs for them (their results are among them, or re-delivered after them)."""
        invalid = FailureType.INVALID_RECORDED
        self._take(RecordedEvents, raw, RECORDED_SIGNAL, invalid, self._model.receive_recorded)

    @workflow.signal(name=ATTACH_SIGNAL, description=HANDLER_TEXT[ATTACH_SIGNAL])
    def attach(self, raw: PlainInput = NO_INPUT) -> None:
        """An aggregator of this correlation asks to receive every event the chain records."""
        invalid = FailureType.INVALID_ATTACH
        self._take(ListenerId, raw, ATTACH_SIGNAL, invalid, lambda w: self._model.attach(w.root))

    @workflow.signal(name=DETACH_SIGNAL, description=HANDLER_TEXT[DETACH_SIGNAL])
    def detach(self, raw: PlainInput = NO_INPUT) -> None:
        """A listener that has finished asks to receive no more events."""
        invalid = FailureType.INVALID_DETACH
        self._take(ListenerId, raw, DETACH_SIGNAL, invalid, lambda w: self._model.detach(w.root))

    @workflow.signal(name=RUN_OUTCOME_SIGNAL, description=HANDLER_TEXT[RUN_OUTCOME_SIGNAL])
    def run_outcome(self, raw: PlainInput = NO_INPUT) -> None:
        """A run handed to a `ChainRun` is over: its outcome, taken as a run's here would be."""
        invalid = FailureType.INVALID_RUN_OUTCOME
        self._take(RunOutcome, raw, RUN_OUTCOME_SIGNAL, invalid, self._runner.take_outcome)

    @workflow.signal(name=CLOSE_SIGNAL, description=HANDLER_TEXT[CLOSE_SIGNAL])
    def close(self) -> None:
        """Accept no more events; finish the work already started or queued, then end."""
        self._model.record.closing = True

    @workflow.query(name=STATE_QUERY, description=HANDLER_TEXT[STATE_QUERY])
    def state(self) -> ChainState:
        return self._model.snapshot()

    @workflow.query(name=TIMELINE_QUERY, description=HANDLER_TEXT[TIMELINE_QUERY])
    def timeline(self) -> list[TimelineEntry]:
        return self._model.record.timeline

    def _take(
        self, model: type[M], raw: RawValue, source: str, invalid: str, act: Callable[[M], None]
    ) -> None:
        """A signal's argument acted on, and what that decides sent; one that does not decode or
        validate (empty, null, anything else) is rejected and parked as `invalid` instead:
        acting on it could fail the workflow task."""
        value = decoded(model, raw, source)
        if isinstance(value, Undecodable):
            self._model.intake.reject(Rejection(invalid, value.reason), raw=value.raw)
        else:
            act(value)
        self._outbound.flush()


def park_unknown_signal(
    model: ChainModel, outbound: Outbound, name: str, args: Sequence[RawValue]
) -> None:
    """A signal the chain has no handler for (a misspelt name, one meant for another workflow):
    rejected and parked with what it carried, never left unread. Runs on a bundle older than
    CHAIN_PARKS_UNKNOWN_SIGNALS_PATCH's left it so."""
    if in_force(CHAIN_PARKS_UNKNOWN_SIGNALS_PATCH):
        reason, carried = unknown_signal(name, args, "a chain")
        model.intake.reject(Rejection(FailureType.INVALID_INPUT, reason), raw=carried)
        outbound.flush()


class ChainRunner:
    """Dispatches the model's queued runs and reports each one's stages to it."""

    def __init__(self, model: ChainModel, outbound: Outbound) -> None:
        self._model = model
        self._outbound = outbound
        self._announced: list[str] | None = None
        self._placements = Placements(local=False, ask_in_activity=True)
        """Where the chain's agents run, asked of its worker (in an activity) at its first run
        here: on the chain's own queue when its worker serves them, as local activities too
        once `run_locally`."""

        self._batches = LocalBatches()
        """The chain's local runs, taken together (`_run_here`)."""

    def run_locally(self) -> None:
        """Short in-process agents its worker serves run as local activities, as a saga's do
        (CHAIN_LOCAL_RUNS_PATCH); runs recorded before ran them on the chain's own queue."""
        self._placements = Placements(ask_in_activity=True)
        self._model.pacing.runs_locally = True

    def dispatch(self) -> None:
        dispatched = []
        while self._model.pacing.dispatchable():
            seq, run = self._model.runs.start_next()
            dispatched.append(run.agent)
            voting = self._model.spec.subscription(run.subscription).vote is not None
            run_work = self._run_vote if voting else self._run_agent
            asyncio.create_task(run_work(seq, run))  # noqa: RUF006 - tracked in the model
        metrics.chain_runs_dispatched(dispatched)

    async def _run_agent(self, seq: int, run: AgentRun) -> None:
        """The agent picked (by capability), its `on_start` published, then the agent run here
        (the fast path, and every run recorded before the hand-over), or handed to a `ChainRun`
        when its subscription says so or the chain is due to continue as new."""
        runs = self._model.runs
        subscription = self._model.spec.subscription(run.subscription)
        retry_policy = subscription.retry.to_retry_policy()
        try:
            try:
                await self._assign(run, subscription)
                runs.run_started(seq, workflow.now())
                request = runs.agent_request(run)
                if self._model.pacing.hands_over_run(subscription):
                    await self._hand_over(seq, self._run_input(seq, run, request=request))
                    return
                result = await self._run_here(run, subscription, request)
            except ActivityError as error:
                failed = RunFailure(
                    type=failure_type_of(error),
                    message=failure_message(error),
                    attempts=attempts(error, retry_policy),
                    times=attempt_times(reported(error)),
                )
                runs.run_failed(seq, workflow.now(), failed)
                await self._outbound.park_now()
                return
            runs.run_succeeded(seq, workflow.now(), result)
            self._outbound.flush()
        finally:
            runs.finish(seq)

    async def _placed_within_budget(self, size: int) -> None:
        """Where the chain's agents run, then room for a run's input in the workflow task's
        fan-out budget: the run then goes out in the task it was counted in. Runs recorded
        before counted it before the placements' answer, which could come in a later task
        (CHAIN_PLACES_BEFORE_ITS_BUDGET_PATCH, asked only while the answer is awaited)."""
        agents = self._model.spec.served_agents()
        if not self._placements.settled(agents) and patched(CHAIN_PLACES_BEFORE_ITS_BUDGET_PATCH):
            await self._placements.learn(agents)
            await self._outbound.fan_out.room(size)
            return
        await self._outbound.fan_out.room(size)
        await self._placements.learn(agents)

    async def _run_here(
        self, run: AgentRun, subscription: Subscription, request: AgentRequest
    ) -> AgentResult:
        """The agent run in the chain (the fast path): its result, or its ActivityError. Its
        ending is noted for continue-as-new (`ChainPacing.ran_here`).

        Local runs go one local activity at a time: the SDK hands a workflow the results of
        local activities ending in one workflow task one by one as they come, but on a replay
        it may hand several at once, and the chain, taking in each result's events before the
        next, would issue its commands in another order than it recorded (a nondeterminism
        error). Those that start together run side by side in one (a batch, `LocalBatches`,
        CHAIN_BATCHES_LOCAL_RUNS_PATCH): a workflow task stays open while a local activity
        runs, and the events arriving meanwhile wait for it to end."""
        await self._placed_within_budget(json_size(request))
        settings = declared_settings(
            subscription,
            f"{run.agent} ← {run.trigger.event.type}",
            inline_agents=self._model.spec.agents,
            room=self._outbound.fan_out.room,
            placements=self._placements,
        )
        local = self._placements.of(request) == Placement.LOCAL
        running: Awaitable[AgentResult]
        if settings.placement(request) == Placement.LOCAL and patched(
            CHAIN_BATCHES_LOCAL_RUNS_PATCH
        ):
            running = start_batched_run(
                request, settings, self._batches, partial(self._detoured, run)
            )
        else:
            running = self._alone(request, settings, run, local=local)
        return await ending_with(running, self._model.pacing.ran_here)

    async def _alone(
        self, request: AgentRequest, settings: RunSettings, run: AgentRun, *, local: bool
    ) -> AgentResult:
        """A run on its own: a local one after the one before it (runs recorded before batches
        ran each local run so), or an activity task on the chain's queue."""
        async with self._batches.one_local if local else contextlib.nullcontext():
            return await start_agent_run(request, settings, partial(self._detoured, run))

    async def _run_vote(self, seq: int, run: AgentRun) -> None:
        """A vote subscription's run: a `Vote` on the event's payload, counted as a run and
        handed to a `ChainRun` (runs recorded before held it here, and continue-as-new waited
        for it); its outcome is published. One that gives no outcome (its proposal refused,
        failed, or cancelled on its own) is published as the failure event and parked like a
        failed agent run, to be run again by a `rerun`."""
        runs = self._model.runs
        failed: tuple[str, str]
        try:
            runs.run_started(seq, workflow.now())
            try:
                vote = runs.vote_spec(run)
                if self._model.pacing.hands_over:
                    await self._hand_over(seq, self._run_input(seq, run, vote=vote))
                    return
                await self._outbound.fan_out.room(json_size(vote))
                outcome: VoteState = await hold_vote(vote, run.subscription)
            except SpecError as error:
                failed = (FailureType.INVALID_PAYLOAD, str(error))
            except VOTE_FAILED as error:
                failed = vote_failure(error)
            else:
                runs.run_succeeded(seq, workflow.now(), outcome)
                self._outbound.flush()
                return
            runs.run_failed(seq, workflow.now(), RunFailure(type=failed[0], message=failed[1]))
            await self._outbound.park_now()
        finally:
            runs.finish(seq)

    def take_outcome(self, outcome: RunOutcome) -> None:
        """A run handed to a `ChainRun` is over (this run or an earlier one of the chain handed
        it over): its detours and outcome are taken as a run's here would be; one naming no
        run in flight (sent twice, or by someone else) is rejected and parked."""
        run = self._model.runs.landed(outcome)
        if run is not None:
            for detoured in outcome.detours:
                self._detoured(run, detoured.detour, detoured.assignment)
            self._model.runs.take_outcome(outcome, workflow.now())
        self._outbound.flush()

    def _run_input(
        self,
        seq: int,
        run: AgentRun,
        *,
        request: AgentRequest | None = None,
        vote: VoteSpec | None = None,
    ) -> ChainRunInput:
        """What the run's `ChainRun` starts with. The chain's id comes from its correlation id
        (its input), not from where the run executes, so that its commands (the `ChainRun`'s
        id) are the same wherever its history is replayed."""
        summary = f"{run.agent} ← {run.trigger.event.type}" if request else run.subscription
        return ChainRunInput(
            chain_id=chain_workflow_id(self._model.record.state.correlation_id),
            seq=seq,
            subscription=self._model.spec.subscription(run.subscription),
            summary=summary,
            inline_agents=self._model.spec.agents,
            request=request,
            vote=vote,
        )

    async def _hand_over(self, seq: int, run_input: ChainRunInput) -> None:
        """The run goes to a `ChainRun` (abandoned when this run closes, so it outlives a
        continue-as-new), in flight from now, within the workflow task's budget of commands;
        continue-as-new waits only for its start. A `ChainRun` of this number already running
        (a chain reset) is the same run: its outcome will come. Its large event payloads go
        apart (`started_apart`), stored once however many `ChainRun`s carry them: that changes
        what the child is sent, not the command, which a replay matches by the child's id and
        type; the budget counts the whole input, as before."""
        self._model.runs.hand_over(seq)
        try:
            await self._outbound.fan_out.room(json_size(run_input))
            await workflow.start_child_workflow(
                CHAIN_RUN_WORKFLOW,
                args=started_apart(run_input),
                id=chain_run_workflow_id(run_input.chain_id, seq),
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                static_summary=run_input.summary,
            )
        except WorkflowAlreadyStartedError:
            workflow.logger.warning("chain run already started", extra={"seq": seq})
        finally:
            self._model.runs.confirmed(seq)

    def _detoured(self, run: AgentRun, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run that waited for its agent or went elsewhere: in the chain's record; a run
        that went to another agent publishes as that agent."""
        self._model.runs.run_detoured(run, detour, assignment)
        show_details(self._model.details())
        if assignment is not None:
            self.announce_agents()

    async def _assign(self, run: AgentRun, subscription: Subscription) -> None:
        """A run of a subscription naming capabilities goes to the agent picked for it (before
        its `on_start`, which names the agent); recorded in the chain's state."""
        assignment = await assign_agent(subscription.route, subscription.name)
        if assignment is not None:
            self._model.runs.run_assigned(run, assignment)
            show_details(self._model.details())
            self.announce_agents()

    def announce_agents(self) -> None:
        """`CoordAgents`, where the agent monitor finds the chains to tell of an agent's health:
        the agents its subscriptions name, and those recently picked for its runs by capability
        (upserted when one is new). Runs recorded before named none."""
        if not patched(AGENTS_ATTRIBUTE_PATCH):
            return
        picked = [each.assignment.agent for each in self._model.record.state.assignments]
        agents = agent_search_values([*self._model.spec.served_agents(), *picked])
        if agents != self._announced:
            self._announced = agents
            workflow.upsert_search_attributes([AGENTS.value_set(agents)])
