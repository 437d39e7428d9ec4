"""The `ReactiveChain` workflow: one durable chain per correlation id.

Events arrive as `event` signals (plain JSON envelopes). Each is deduplicated, checked, logged in
order, matched against the subscriptions (topic, type, CEL filter, join) and may queue agent runs.
Runs start up to the spec's concurrency limit; their results are published back into the chain
as new events, caused by the event that triggered them. What the chain decides is in
`ChainModel` (coord.models.chain.model); this module is its Temporal side.

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
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from coord.models.chain.model import ChainModel, Parking, Rejection, standin_input
    from coord.models.chain.run import ChainRunInput, RunOutcome
    from coord.models.chain.spec import (
        AgentRun,
        ChainInput,
        ChainState,
        ListenerId,
        RerunRequest,
        Subscription,
    )
    from coord.models.events.envelope import LIFECYCLE_NOTICES, EventEnvelope
    from coord.models.events.timeline import TimelineEntry
    from coord.models.mesh.agents import AgentRequest, AgentResult
    from coord.models.mesh.assignment import Assignment
    from coord.models.mesh.runs import RunDetour
    from coord.models.vote.spec import VoteSpec, VoteState
    from coord.models.wire.contract import (
        AGENTS,
        ATTACH_SIGNAL,
        CHAIN_EVENT_SIGNAL,
        CHAIN_RUN_WORKFLOW,
        CHAIN_WORKFLOW,
        CLOSE_SIGNAL,
        DETACH_SIGNAL,
        EVENT_SIGNAL,
        RERUN_SIGNAL,
        RUN_OUTCOME_SIGNAL,
        STATE_QUERY,
        TIMELINE_QUERY,
        FailureType,
        agent_search_values,
        chain_run_workflow_id,
        chain_workflow_id,
        failure,
        failure_message,
        failure_type_of,
    )
    from coord.models.wire.sizes import ByteBudget, json_size
    from coord.models.wire.specs import SpecError
    from coord.models.wire.versions import (
        AGENTS_ATTRIBUTE_PATCH,
        CHAIN_FAN_OUT_PATCH,
        DECODE_IN_TASK_PATCH,
        FLOOD_PATCH,
        HAND_OVER_PATCH,
        KEEP_DISPATCHING_PATCH,
        LIFECYCLE_NOTICES_PATCH,
        PARK_BEFORE_INVALID_INPUT_FAILS_PATCH,
        PARK_QUEUED_RUNS_PATCH,
        PUBLISH_RULE_PATCH,
        SETTLE_PATCH,
    )
    from coord.workflows._runtime.agent_runs import declared_settings, start_agent_run
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.child_votes import VOTE_FAILED, hold_vote, vote_failure
    from coord.workflows._runtime.common import (
        NO_INPUT,
        InvalidInput,
        PlainInput,
        assign_agent,
        attempts,
        decode_input,
        park,
        signal_if_running,
        upsert_search_attributes,
    )
    from coord.workflows._runtime.fan_out import NEXT_TASK, FanOut

EVENTS_PER_TASK = 100
"""What one workflow task handles at most, with `BYTES_PER_WORKFLOW_TASK` of their payloads.
Each event may send commands (forwards to listeners, parking) whose payloads travel together in
the task's completion, which the server caps at 4 MB; a long task holds queries back, and one
past 2 s fails as a potential deadlock (a busy worker takes a few ms an event)."""
RUN_HISTORY_BUDGET = 500
"""History events after which a run continues-as-new even below the server's limits. A worker
that lost the run from its cache (a restart; a task the server failed because more than 100
signals arrived while it ran) replays it all in its next task; under a flood that replay must
be short, or signals pile up during each replay and the server fails it again."""


HOLDING_BUDGETS = 8
"""How far past its history budget a chain takes events on while it waits for agent runs it holds
itself (each run it starts meanwhile goes to a `ChainRun`)."""
MIN_WAKE = timedelta(milliseconds=100)
HELD_UP_AFTER = timedelta(seconds=2)
"""How long a chain due to continue as new waits for the agent runs it holds before it counts as
held up by one: from then on it hands every run it starts to a `ChainRun`. Before, it goes on
dispatching in the chain, as the fast path does (most agents are done by then)."""


class RunPacing:
    """When a run takes events, starts agent runs and continues-as-new: the chain's guard
    against floods. A run continues-as-new early and holds new events back for the next one, and
    one workflow task handles a bounded share of the inbox."""

    def __init__(self, model: ChainModel, outbound: "Outbound") -> None:
        self._model = model
        self._outbound = outbound
        self.keep_dispatching = False
        """Set once the run starts: whether it dispatches while continue-as-new is due."""
        self.hands_over = False
        """Set once the run starts: whether it may hand runs to `ChainRun`s of their own."""
        self._due_since: datetime | None = None
        """Since when continue-as-new has been due while agent runs held here kept it waiting."""

    def note_time(self, now: datetime) -> None:
        """Brings `held_up` to the workflow's clock (once a turn)."""
        waiting = self.continue_as_new_due() and self._model.running
        if not waiting:
            self._due_since = None
        elif self._due_since is None:
            self._due_since = now

    def held_up(self, now: datetime) -> bool:
        """Whether agent runs held here have kept the due continue-as-new waiting HELD_UP_AFTER:
        a slow agent, for which no run started from now on waits."""
        since = self._due_since
        return self.hands_over and since is not None and now - since >= HELD_UP_AFTER

    def wake_in(self, now: datetime) -> timedelta | None:
        """When to look again though nothing arrives: when runs queued behind a due continue-as-new
        would count as held up (so they are handed over without waiting for the slow agent)."""
        if not self.hands_over or self._due_since is None or not self._model.queue:
            return None
        return max(self._due_since + HELD_UP_AFTER - now, MIN_WAKE)

    def has_work(self) -> bool:
        return (
            (self._model.waiting() and not self.holding_events())
            or self.dispatchable()
            or self._model.finished(self._outbound.count)
            or self.continue_as_new_now()
        )

    def drain(
        self,
        handle: Callable[[EventEnvelope], None],
        take: Callable[[], EventEnvelope | None],
    ) -> bool:
        """Handles the waiting events (`take` gives the next, None for a signal that did not
        decode), up to `EVENTS_PER_TASK` and a workflow task's `ByteBudget` of payloads;
        returns whether some were left for the next task."""
        handled, budget = 0, ByteBudget()
        while self._model.waiting() and not self.holding_events():
            full = handled >= EVENTS_PER_TASK or budget.full()
            if full and workflow.patched(FLOOD_PATCH):
                return True
            handled += 1
            envelope = take()
            if envelope is not None:
                budget.spend(json_size(envelope.payload))
                handle(envelope)
        return False

    def dispatchable(self) -> bool:
        return self._model.can_dispatch() and self._may_dispatch_before_continuing()

    def continue_as_new_now(self) -> bool:
        return self.continue_as_new_due() and not self._model.running and not self._outbound.count

    def _history_budget(self) -> int:
        """Events may arrive far faster than the chain takes them: it continues-as-new at a
        quarter of the server's limit on signals per run (this run's history holds every signal
        it received), leaving the rest for what arrives meanwhile, or at `RUN_HISTORY_BUDGET`."""
        return min(self._model.signals_per_run // 4, RUN_HISTORY_BUDGET)

    def continue_as_new_due(self) -> bool:
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return True
        due = info.get_current_history_length() >= self._history_budget()
        return due and workflow.patched(FLOOD_PATCH)

    def holding_events(self) -> bool:
        """From twice the budget on, new events wait in the inbox for the next run (they are
        carried), so that the forwards and agent runs they would start cannot keep this run from
        continuing-as-new. A run held up by agent runs it holds, which hands every run it starts
        over, takes events on (they cannot keep it longer than those agents) up to
        HOLDING_BUDGETS budgets: its history stays bounded however long the agents run."""
        budgets = HOLDING_BUDGETS if self.held_up(workflow.now()) else 2
        overdue = workflow.info().get_current_history_length() >= budgets * self._history_budget()
        return overdue and workflow.patched(FLOOD_PATCH)

    def _may_dispatch_before_continuing(self) -> bool:
        """Once continue-as-new is due, this run waits for the agent runs it holds itself (the
        fast path's), dispatching meanwhile as it did before (until it holds new events back);
        held up by them (`held_up`: a slow agent), it starts its queued runs each in a
        `ChainRun` of its own, so that none waits for that agent."""
        if not self.continue_as_new_due():
            return True
        if self.held_up(workflow.now()):
            return self._model.running and not self.holding_events()
        return self.keep_dispatching and not self.holding_events()


async def park_letter(letter: Parking) -> None:
    """Parks what the model decided to park."""
    await park(letter.failure_type, letter.message, **letter.details)


class Outbound:
    """What the chain sends in the background, parkings and forwards to its listeners, which it
    must finish before it ends or continues as new: counted from when it is started, not from
    when its task first runs, or a run ending in this same workflow task would drop it. (Runs
    recorded before counted late.)"""

    def __init__(self, model: ChainModel) -> None:
        self._model = model
        self.count = 0
        self.fan_out = FanOut(CHAIN_FAN_OUT_PATCH)
        """The chain's budget per workflow task: its forwards, agent runs and votes wait for
        it."""

    def park(self, letter: Parking) -> None:
        self._start(park_letter(letter))

    def reject(
        self, rejection: Rejection, *, envelope: EventEnvelope | None = None, raw: Any = None
    ) -> None:
        """Recorded in the model and parked in the dead-letter queue: visible, never dropped."""
        notice = envelope is not None and envelope.event.type in LIFECYCLE_NOTICES
        parked = not (notice and workflow.patched(LIFECYCLE_NOTICES_PATCH))
        letter = self._model.reject(
            rejection, workflow.now(), envelope=envelope, raw=raw, parked=parked
        )
        extra = {"correlation_id": self._model.state.correlation_id, "reason": rejection.reason}
        workflow.logger.warning("event rejected", extra=extra)
        if letter:
            self.park(letter)

    def forward(self, envelope: EventEnvelope) -> bool:
        """Listeners get the events the chain records as `chain_event` (events they listen to,
        unlike `event`, which is addressed to them), never the chain's lifecycle notices: those
        are about this chain's handling, not the listener's work. Returns whether this run
        handles lifecycle notices (runs recorded before forwarded them as `event`)."""
        notices = workflow.patched(LIFECYCLE_NOTICES_PATCH)
        if notices and envelope.event.type in LIFECYCLE_NOTICES:
            return notices
        signal = CHAIN_EVENT_SIGNAL if notices else EVENT_SIGNAL
        for listener in self._model.listeners:
            self._start(self._forward(listener, envelope, signal))
        return notices

    async def _forward(self, listener: str, envelope: EventEnvelope, signal: str) -> None:
        """A listener that has ended is dropped; the event stays in this chain's log."""
        event = envelope.model_dump(mode="json")
        await self.fan_out.room(json_size(event))
        if not await signal_if_running(listener, signal, event):
            self._model.detach(listener)

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        counted_now = workflow.patched(SETTLE_PATCH)
        if counted_now:
            self.count += 1

        async def tracked() -> None:
            if not counted_now:
                self.count += 1
            try:
                await work
            finally:
                self.count -= 1

        asyncio.create_task(tracked())  # noqa: RUF006 - counted


class Intake:
    """How `event` signals come in. A plain JSON one is kept as its text and decoded when a
    workflow task takes it, a bounded number a task: a worker that lost the run gets every signal
    since its last completed task in one activation, thousands under a flood, and each handler
    must stay cheap or that activation trips the deadlock detector on every attempt. One that
    does not decode or validate is rejected and parked, never raised."""

    def __init__(self, model: ChainModel, outbound: Outbound) -> None:
        self._model = model
        self._outbound = outbound

    def receive(self, raw: RawValue) -> None:
        text = json_text(raw)
        if text is not None and not self._model.closing and workflow.patched(DECODE_IN_TASK_PATCH):
            self._model.arrivals.append(text)
            return
        envelope = self._decoded(raw)
        if envelope is None:
            return
        if self._model.closing:
            closing = self._model.ended(envelope, FailureType.CHAIN_CLOSING, "the chain is closing")
            self._outbound.reject(closing, envelope=envelope)
            return
        self._model.inbox.append(envelope)

    def next(self) -> EventEnvelope | None:
        """The next waiting event: the inbox's first, then the signals still to decode."""
        if self._model.inbox:
            return self._model.inbox.pop(0)
        return self._decoded(json_signal(self._model.arrivals.pop(0)))

    def take_all(self) -> list[EventEnvelope]:
        """Every waiting event, the signals still to decode decoded."""
        arrivals, self._model.arrivals = self._model.arrivals, []
        decoded = (self._decoded(json_signal(text)) for text in arrivals)
        return [*self._model.take_inbox(), *(e for e in decoded if e is not None)]

    def _decoded(self, raw: RawValue) -> EventEnvelope | None:
        try:
            return decode_input(EventEnvelope, raw, "event")
        except InvalidInput as error:
            rejection = Rejection(FailureType.INVALID_ENVELOPE, str(error))
            self._outbound.reject(rejection, raw=error.raw)
            return None


@workflow.defn(name=CHAIN_WORKFLOW, sandboxed=False)
class ReactiveChain(metaclass=SurplusStartArguments):
    """The Temporal side of a chain: signals, agent activities, parking, forwarding, timers and
    continue-as-new.

    Not sandboxed: under a flood every signal counts. The sandbox tripled the CPU a run's replay
    takes (per payload it runs code in the sandbox to pick the serialization context; its
    `isinstance` guard slowed the filter's view); a worker that lost a run replays it while
    signals keep arriving, and loses it again when more than 100 arrive meanwhile. The code
    touches only the workflow API and its own models."""

    @workflow.init
    def __init__(self, raw_input: PlainInput = NO_INPUT) -> None:
        """Parses the input here, before any signal of a signal-with-start is handled; a bad input
        is reported by `run`, since nothing may fail the workflow task."""
        self._input_error: str | None = None
        try:
            chain_input = decode_input(ChainInput, raw_input, "chain input")
        except SpecError as error:
            self._input_error = str(error)
            chain_input = standin_input(workflow.info().workflow_id)
        self._spec = chain_input.spec
        self._model = ChainModel.begin(chain_input, workflow.info().workflow_id)
        self._outbound = Outbound(self._model)
        self._pacing = RunPacing(self._model, self._outbound)
        self._intake = Intake(self._model, self._outbound)
        self._announced: list[str] | None = None

    @workflow.run
    async def run(self, raw_input: PlainInput = NO_INPUT) -> ChainState:
        if self._input_error:
            if workflow.patched(PARK_BEFORE_INVALID_INPUT_FAILS_PATCH):
                await workflow.wait_condition(lambda: not self._outbound.count)
            raise failure(FailureType.INVALID_INPUT, self._input_error, non_retryable=True)
        self._pacing.keep_dispatching = workflow.patched(KEEP_DISPATCHING_PATCH)
        self._pacing.hands_over = workflow.patched(HAND_OVER_PATCH)
        self._upsert_status()
        self._announce_agents()
        while not self._model.finished(self._outbound.count):
            if not await self._take_turn():
                break
        self._model.end()
        if self._model.queue and workflow.patched(PARK_QUEUED_RUNS_PATCH):
            await asyncio.gather(*(park_letter(letter) for letter in self._model.take_queued()))
        self._upsert_status()
        workflow.set_current_details(self._model.details())
        await self._settle()
        return self.state()

    async def _take_turn(self) -> bool:
        """One turn of the run's loop: wait for work, take in what arrived and dispatch it, and
        continue as new when the history is long. False when the chain has idled out."""
        wake = self._pacing.wake_in(workflow.now())
        timeout = self._spec.idle_timeout if wake is None else min(wake, self._spec.idle_timeout)
        try:
            await workflow.wait_condition(self._pacing.has_work, timeout=timeout)
        except TimeoutError:
            if wake is None and self._model.close_idle():
                return False
        self._pacing.note_time(workflow.now())
        more = self._pacing.drain(self._handle, self._intake.next)
        self._dispatch()
        workflow.set_current_details(self._model.details())
        if self._pacing.continue_as_new_now():
            await workflow.wait_condition(self._quiet)
            workflow.continue_as_new(self._model.carry())
        if more:
            await workflow.sleep(NEXT_TASK, summary="more events in the next task")
        return True

    def _quiet(self) -> bool:
        """No handler running, and every signal sent and every parking done."""
        return workflow.all_handlers_finished() and not self._outbound.count

    async def _settle(self) -> None:
        """Before the run ends: every send and parking is awaited, and an event that arrived
        while the chain was ending is parked, never dropped. (Runs recorded before ended once
        their handlers had.)"""
        if not workflow.patched(SETTLE_PATCH):
            await workflow.wait_condition(workflow.all_handlers_finished)
            return
        await workflow.wait_condition(self._quiet)
        while self._model.waiting():
            for envelope in self._intake.take_all():
                ended = self._model.ended(envelope, FailureType.CHAIN_ENDED, "the chain has ended")
                self._outbound.reject(ended, envelope=envelope)
            await workflow.wait_condition(self._quiet)

    @workflow.signal(name=EVENT_SIGNAL)
    def event(self, raw: PlainInput = NO_INPUT) -> None:
        """Raw on purpose: an envelope that does not decode or validate is recorded and parked,
        never raised; a plain JSON one is decoded later, a bounded number a task (`Intake`)."""
        self._intake.receive(raw)

    @workflow.signal(name=RERUN_SIGNAL)
    def rerun(self, raw: PlainInput = NO_INPUT) -> None:
        """A dead letter replayed: run the subscription's agent again on the (fixed) event, and
        continue the chain from there."""
        try:
            request = decode_input(RerunRequest, raw, "rerun")
        except InvalidInput as error:
            self._outbound.reject(Rejection(FailureType.INVALID_RERUN, str(error)), raw=error.raw)
            return
        if rejection := self._model.rerun(request):
            self._outbound.reject(rejection, envelope=request.event)

    @workflow.signal(name=ATTACH_SIGNAL)
    def attach(self, raw: PlainInput = NO_INPUT) -> None:
        """An aggregator of this correlation asks to receive every event the chain records."""
        if workflow_id := self._listener_id(raw, ATTACH_SIGNAL, FailureType.INVALID_ATTACH):
            self._model.attach(workflow_id)

    @workflow.signal(name=DETACH_SIGNAL)
    def detach(self, raw: PlainInput = NO_INPUT) -> None:
        """A listener that has finished asks to receive no more events."""
        if workflow_id := self._listener_id(raw, DETACH_SIGNAL, FailureType.INVALID_DETACH):
            self._model.detach(workflow_id)

    def _listener_id(self, raw: PlainInput, signal: str, invalid: FailureType) -> str | None:
        """The workflow id an `attach` or `detach` carries. Anything else (empty, null) is
        rejected and parked: signalling it would fail the workflow task for good."""
        try:
            return decode_input(ListenerId, raw, signal).root
        except InvalidInput as error:
            self._outbound.reject(Rejection(invalid, str(error)), raw=error.raw)
        return None

    @workflow.signal(name=RUN_OUTCOME_SIGNAL)
    def run_outcome(self, raw: PlainInput = NO_INPUT) -> None:
        """A run handed to a `ChainRun` is over (this run or an earlier one of the chain handed
        it over): its detours and outcome are taken as a run's here would be. One naming no
        run in flight (sent twice, or by someone else) is rejected and parked."""
        try:
            outcome = decode_input(RunOutcome, raw, RUN_OUTCOME_SIGNAL)
        except InvalidInput as error:
            rejection = Rejection(FailureType.INVALID_RUN_OUTCOME, str(error))
            self._outbound.reject(rejection, raw=error.raw)
            return
        run = self._model.landed(outcome.seq)
        if run is None:
            reason = f"{RUN_OUTCOME_SIGNAL}: no run {outcome.seq} is in flight"
            rejection = Rejection(FailureType.INVALID_RUN_OUTCOME, reason)
            self._outbound.reject(rejection, raw=outcome.model_dump(mode="json"))
            return
        for detoured in outcome.detours:
            self._detoured(run, detoured.detour, detoured.assignment)
        if letter := self._outcome(run, outcome):
            self._outbound.park(letter)

    @workflow.signal(name=CLOSE_SIGNAL)
    def close(self) -> None:
        """Accept no more events; finish the work already started or queued, then end."""
        self._model.closing = True

    @workflow.query(name=STATE_QUERY)
    def state(self) -> ChainState:
        return self._model.snapshot()

    @workflow.query(name=TIMELINE_QUERY)
    def timeline(self) -> list[TimelineEntry]:
        return self._model.timeline

    def _handle(self, envelope: EventEnvelope) -> None:
        admission = self._model.admit(envelope)
        if isinstance(admission, Rejection):
            self._outbound.reject(admission, envelope=envelope)
        elif admission == "recorded":
            notices = self._outbound.forward(envelope)
            if self._model.apply_alerts(envelope, resolutions_never_pause=notices):
                self._upsert_status()
            self._model.match(envelope, workflow.now())

    def _dispatch(self) -> None:
        while self._pacing.dispatchable():
            seq, run = self._model.start_next()
            voting = self._spec.subscription(run.subscription).vote is not None
            run_work = self._run_vote if voting else self._run_agent
            asyncio.create_task(run_work(seq, run))  # noqa: RUF006 - tracked in the model

    async def _run_agent(self, seq: int, run: AgentRun) -> None:
        """The agent picked (by capability), its `on_start` published, then the agent run here
        (the fast path, and every run recorded before the hand-over), or handed to a `ChainRun`
        when its subscription says so or the chain is due to continue as new."""
        subscription = self._spec.subscription(run.subscription)
        retry_policy = subscription.retry.to_retry_policy()
        try:
            try:
                await self._assign(run, subscription)
                self._model.run_started(run)
                request = self._model.agent_request(run)
                held_up = self._pacing.held_up(workflow.now())
                if self._pacing.hands_over and subscription.hands_over(held_up):
                    await self._hand_over(seq, self._run_input(seq, run, request=request))
                    return
                await self._outbound.fan_out.room(json_size(request))
                settings = declared_settings(
                    subscription,
                    f"{run.agent} ← {run.trigger.event.type}",
                    inline_agents=self._spec.agents,
                    room=self._outbound.fan_out.room,
                )
                result = await start_agent_run(request, settings, partial(self._detoured, run))
            except ActivityError as error:
                failed = (failure_type_of(error), failure_message(error))
                await park_letter(
                    self._model.run_failed(run, *failed, attempts(error, retry_policy))
                )
                return
            self._succeeded(run, result)
        finally:
            self._model.finish(seq)

    def _detoured(self, run: AgentRun, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run that waited for its agent or went elsewhere: in the chain's record; a run
        that went to another agent publishes as that agent."""
        self._model.run_detoured(run, detour, assignment)
        workflow.set_current_details(self._model.details())
        if assignment is not None:
            self._announce_agents()

    async def _run_vote(self, seq: int, run: AgentRun) -> None:
        """A vote subscription's run: a `Vote` on the event's payload, counted as a run and
        handed to a `ChainRun` (runs recorded before held it here, and continue-as-new waited
        for it); its outcome is published. One that gives no outcome (its proposal refused,
        failed, or cancelled on its own) is published as the failure event and parked like a
        failed agent run, to be run again by a `rerun`."""
        failed: tuple[str, str]
        try:
            self._model.run_started(run)
            try:
                vote = self._model.vote_spec(run)
                if self._pacing.hands_over:
                    await self._hand_over(seq, self._run_input(seq, run, vote=vote))
                    return
                await self._outbound.fan_out.room(json_size(vote))
                outcome: VoteState = await hold_vote(vote, run.subscription)
            except SpecError as error:
                failed = (FailureType.INVALID_PAYLOAD, str(error))
            except VOTE_FAILED as error:
                failed = vote_failure(error)
            else:
                self._model.vote_ended(run, outcome)
                return
            await park_letter(self._model.run_failed(run, *failed, 1))
        finally:
            self._model.finish(seq)

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
            chain_id=chain_workflow_id(self._model.state.correlation_id),
            seq=seq,
            subscription=self._spec.subscription(run.subscription),
            summary=summary,
            inline_agents=self._spec.agents,
            request=request,
            vote=vote,
        )

    async def _hand_over(self, seq: int, run_input: ChainRunInput) -> None:
        """The run goes to a `ChainRun` (abandoned when this run closes, so it outlives a
        continue-as-new), in flight from now, within the workflow task's budget of commands;
        continue-as-new waits only for its start. A `ChainRun` of this number already running
        (a chain reset) is the same run: its outcome will come."""
        self._model.hand_over(seq)
        try:
            started = run_input.model_dump(mode="json")
            await self._outbound.fan_out.room(json_size(started))
            await workflow.start_child_workflow(
                CHAIN_RUN_WORKFLOW,
                started,
                id=chain_run_workflow_id(run_input.chain_id, seq),
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                static_summary=run_input.summary,
            )
        except WorkflowAlreadyStartedError:
            workflow.logger.warning("chain run already started", extra={"seq": seq})
        finally:
            self._model.confirmed(seq)

    def _outcome(self, run: AgentRun, outcome: RunOutcome) -> Parking | None:
        """A handed-over run's outcome taken: its events published (a vote's record too); a
        failure is published as its failure event and comes back to be parked, to be run
        again by a `rerun`."""
        if outcome.result is not None:
            self._succeeded(run, outcome.result)
            return None
        if outcome.vote is not None:
            self._model.vote_ended(run, outcome.vote)
            return None
        failed = outcome.failure
        assert failed is not None  # RunOutcome holds exactly one
        return self._model.run_failed(run, failed.failure_type, failed.message, failed.attempts)

    def _succeeded(self, run: AgentRun, result: AgentResult) -> None:
        """The run's events published, and the agent's publications of a type it may not
        publish refused: recorded in the chain's record and parked (`publish_not_allowed`)."""
        refused = self._model.refused_types(run, result)
        if refused and not workflow.patched(PUBLISH_RULE_PATCH):
            refused = set()
        for rejection, envelope in self._model.run_succeeded(run, result, refused):
            self._outbound.reject(rejection, envelope=envelope)

    async def _assign(self, run: AgentRun, subscription: Subscription) -> None:
        """A run of a subscription naming capabilities goes to the agent picked for it (before
        its `on_start`, which names the agent); recorded in the chain's state."""
        assignment = await assign_agent(subscription.route, subscription.name)
        if assignment is not None:
            self._model.run_assigned(run, assignment)
            workflow.set_current_details(self._model.details())
            self._announce_agents()

    def _announce_agents(self) -> None:
        """`CoordAgents`, where the agent monitor finds the chains to tell of an agent's health:
        the agents its subscriptions name, and those recently picked for its runs by capability
        (upserted when one is new). Runs recorded before named none."""
        if not workflow.patched(AGENTS_ATTRIBUTE_PATCH):
            return
        picked = [each.assignment.agent for each in self._model.state.assignments]
        agents = agent_search_values([*self._spec.served_agents(), *picked])
        if agents != self._announced:
            self._announced = agents
            workflow.upsert_search_attributes([AGENTS.value_set(agents)])

    def _upsert_status(self) -> None:
        upsert_search_attributes(self._model.status_attributes())


JSON_PLAIN = {"encoding": b"json/plain"}


def json_text(signal: RawValue) -> str | None:
    """The JSON text a signal carried, when it is plain JSON and nothing else (no surplus
    arguments folded in, no other encoding)."""
    if dict(signal.payload.metadata) != JSON_PLAIN:
        return None
    try:
        return signal.payload.data.decode()
    except UnicodeDecodeError:
        return None


def json_signal(text: str) -> RawValue:
    """A signal taken as JSON text, as it arrived."""
    return RawValue(Payload(metadata=JSON_PLAIN, data=text.encode()))
