"""The `ReactiveChain` workflow: one durable chain per correlation id.

Events arrive as `event` signals (plain JSON envelopes). Each is deduplicated, checked, logged in
order, matched against the subscriptions (topic, type, CEL filter, join) and may queue agent runs.
Runs execute as `run_agent` activities up to the spec's concurrency limit; their results are
published back into the chain as new events, caused by the event that triggered them.
"""

import asyncio
import heapq
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from coord.models.agents import AgentRequest, AgentResult
    from coord.models.chain import (
        AgentRun,
        ChainCarry,
        ChainInput,
        ChainSpec,
        ChainState,
        ChainStatus,
        ListenerId,
        QueuedRun,
        RejectedEvent,
        RerunRequest,
        Subscription,
        TimelineEntry,
        replayed_inputs,
        run_idempotency_key,
    )
    from coord.models.contract import (
        ATTACH_SIGNAL,
        CHAIN_EVENT_SIGNAL,
        CHAIN_WORKFLOW,
        CLOSE_SIGNAL,
        DETACH_SIGNAL,
        EVENT_SIGNAL,
        RERUN_SIGNAL,
        RUN_AGENT_ACTIVITY,
        STATE_QUERY,
        TIMELINE_QUERY,
        FailureType,
        Pattern,
        coordination_attributes,
        correlation_id_of_chain,
        failure,
        failure_message,
        failure_type_of,
    )
    from coord.models.envelope import LIFECYCLE_NOTICES, EventEnvelope, Priority
    from coord.models.filters import evaluate
    from coord.models.joins import JoinState
    from coord.models.sizes import json_size, newest_within, preview
    from coord.models.specs import SpecError
    from coord.workflows.arguments import SurplusStartArguments
    from coord.workflows.common import (
        NO_INPUT,
        PARK_BEFORE_INVALID_INPUT_FAILS_PATCH,
        InvalidInput,
        PlainInput,
        attempts,
        decode_input,
        park,
        upsert_search_attributes,
    )

PRIORITY_RANK = {Priority.CRITICAL: 0, Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}
TIMELINE_WINDOW = 200
TIMELINE_BYTES = 8 * 1024 * 1024
"""Payload bytes the timeline keeps (and carries across continue-as-new) at most; the carry goes
to the payload store by reference, but one run still holds it in memory and in its queries."""
SEEN_WINDOW = 1000
REJECTED_WINDOW = 20
KEEP_DISPATCHING_PATCH = "chain-dispatch-while-continuing"
LIFECYCLE_NOTICES_PATCH = "chain-lifecycle-notices"
PARK_QUEUED_RUNS_PATCH = "chain-park-queued-runs"
SETTLE_PATCH = "chain-await-every-send"
FLOOD_PATCH = "chain-bounded-tasks-and-signal-budget"
EVENTS_PER_TASK = 100
EVENT_BYTES_PER_TASK = 512 * 1024
"""What one workflow task handles at most. Each event may send commands (forwards to listeners,
parking) whose payloads travel together in the task's completion, which the server caps at 4 MB;
a long task holds queries back, and one past 2 s fails as a potential deadlock (a busy worker
takes a few ms an event)."""
NEXT_TASK = timedelta(milliseconds=1)
RUN_HISTORY_BUDGET = 500
"""History events after which a run continues-as-new even below the server's limits. A worker
that lost the run from its cache (a restart; a task the server failed because more than 100
signals arrived while it ran) replays it all in its next task; under a flood that replay must
be short, or signals pile up during each replay and the server fails it again."""


@workflow.defn(name=CHAIN_WORKFLOW)
class ReactiveChain(metaclass=SurplusStartArguments):
    @workflow.init
    def __init__(self, raw_input: PlainInput = NO_INPUT) -> None:
        """Parses the input here, before any signal of a signal-with-start is handled; a bad input
        is reported by `run`, since nothing may fail the workflow task."""
        self._input_error: str | None = None
        try:
            chain_input = decode_input(ChainInput, raw_input, "chain input")
        except SpecError as error:
            self._input_error = str(error)
            chain_input = ChainInput.model_construct(
                spec=ChainSpec.model_construct(name="invalid", subscriptions=[], triggers=[]),
                correlation_id=correlation_id_of_chain(workflow.info().workflow_id),
            )
        self._spec = chain_input.spec
        carried = chain_input.carried or ChainCarry(
            state=ChainState(correlation_id=chain_input.correlation_id, spec=self._spec.name),
            seq=0,
            timeline=[],
            causes={},
            depths={},
            joins={s.name: s.new_join() for s in self._spec.subscriptions},
            inbox=[],
            queue=[],
        )
        self._state = carried.state
        self._seq = carried.seq
        self._timeline = carried.timeline
        self._timeline_bytes = sum(json_size(entry.payload) for entry in self._timeline)
        self._causes = carried.causes
        self._depths = carried.depths
        self._joins: dict[str, JoinState] = carried.joins
        self._inbox: list[EventEnvelope] = carried.inbox
        self._queue: list[tuple[int, int, AgentRun]] = [
            (q.rank, q.seq, q.run) for q in carried.queue
        ]
        heapq.heapify(self._queue)
        self._running: dict[int, AgentRun] = {}
        self._listeners: list[str] = carried.listeners
        self._outbound = 0
        self._closing = carried.closing
        self._joined_causes = carried.joined_causes
        self._keep_dispatching = False
        self._signals_per_run = chain_input.signals_per_run

    @workflow.run
    async def run(self, raw_input: PlainInput = NO_INPUT) -> ChainState:
        if self._input_error:
            if workflow.patched(PARK_BEFORE_INVALID_INPUT_FAILS_PATCH):
                await workflow.wait_condition(lambda: not self._outbound)
            raise failure(FailureType.INVALID_INPUT, self._input_error, non_retryable=True)
        self._keep_dispatching = workflow.patched(KEEP_DISPATCHING_PATCH)
        self._upsert_status()
        while not self._finished():
            if not await self._take_turn():
                break
        if self._state.status in (ChainStatus.RUNNING, ChainStatus.PAUSED):
            self._state.status = ChainStatus.CLOSED if self._closing else ChainStatus.COMPLETED
        if self._queue and workflow.patched(PARK_QUEUED_RUNS_PATCH):
            await self._park_queued_runs()
        self._upsert_status()
        self._publish_details()
        await self._settle()
        return self.state()

    async def _take_turn(self) -> bool:
        """One turn of the run's loop: wait for work, take in what arrived and dispatch it, and
        continue as new when the history is long. False when the chain has idled out."""
        try:
            await workflow.wait_condition(self._has_work, timeout=self._spec.idle_timeout)
        except TimeoutError:
            if not self._running:
                self._state.status = ChainStatus.IDLE_CLOSED
                return False
        more = self._drain_inbox()
        self._dispatch()
        self._publish_details()
        if self._should_continue_as_new():
            await workflow.wait_condition(self._quiet)
            workflow.continue_as_new(self._carry())
        if more:
            await workflow.sleep(NEXT_TASK, summary="more events in the next task")
        return True

    def _quiet(self) -> bool:
        """No handler running, and every signal sent and every parking done."""
        return workflow.all_handlers_finished() and not self._outbound

    async def _settle(self) -> None:
        """Before the run ends: every send and parking is awaited, and an event that arrived
        while the chain was ending is parked, never dropped. (Runs recorded before ended once
        their handlers had.)"""
        if not workflow.patched(SETTLE_PATCH):
            await workflow.wait_condition(workflow.all_handlers_finished)
            return
        await workflow.wait_condition(self._quiet)
        while self._inbox:
            for envelope in self._inbox:
                self._state.received += 1
                reason = f"event {envelope.event.id}: the chain has ended"
                self._reject(
                    FailureType.CHAIN_ENDED, reason, envelope=envelope, depth=self._depth(envelope)
                )
            self._inbox.clear()
            await workflow.wait_condition(self._quiet)

    @workflow.signal(name=EVENT_SIGNAL)
    def event(self, raw: PlainInput = NO_INPUT) -> None:
        """Raw on purpose: an envelope that does not decode or validate is recorded and parked,
        never raised."""
        try:
            envelope = decode_input(EventEnvelope, raw, "event")
        except InvalidInput as error:
            self._state.received += 1
            self._reject(FailureType.INVALID_ENVELOPE, str(error), raw=error.raw)
            return
        if self._closing:
            self._state.received += 1
            reason = f"event {envelope.event.id}: the chain is closing"
            self._reject(
                FailureType.CHAIN_CLOSING, reason, envelope=envelope, depth=self._depth(envelope)
            )
            return
        self._inbox.append(envelope)

    @workflow.signal(name=RERUN_SIGNAL)
    def rerun(self, raw: PlainInput = NO_INPUT) -> None:
        """A dead letter replayed: run the subscription's agent again on the (fixed) event, and
        continue the chain from there."""
        self._state.received += 1
        try:
            request = decode_input(RerunRequest, raw, "rerun")
        except InvalidInput as error:
            self._reject(FailureType.INVALID_RERUN, str(error), raw=error.raw)
            return
        try:
            subscription = self._spec.subscription(request.subscription)
        except StopIteration:
            reason = f"rerun: unknown subscription {request.subscription!r}"
            self._reject(FailureType.INVALID_RERUN, reason, envelope=request.event)
            return
        replayed = request.event.event
        self._remember(request.event, self._depths.get(replayed.causation_id or "", 0))
        key = request.idempotency_key or run_idempotency_key(
            workflow.info().workflow_id, subscription.name, replayed.causation_id or replayed.id
        )
        self._enqueue(
            subscription,
            request.event,
            [replayed.id],
            inputs=replayed_inputs(request),
            idempotency_key=key,
        )

    @workflow.signal(name=ATTACH_SIGNAL)
    def attach(self, raw: PlainInput = NO_INPUT) -> None:
        """An aggregator of this correlation asks to receive every event the chain records."""
        workflow_id = self._listener_id(raw, ATTACH_SIGNAL, FailureType.INVALID_ATTACH)
        if workflow_id is not None and workflow_id not in self._listeners:
            self._listeners.append(workflow_id)

    @workflow.signal(name=DETACH_SIGNAL)
    def detach(self, raw: PlainInput = NO_INPUT) -> None:
        """A listener that has finished asks to receive no more events."""
        workflow_id = self._listener_id(raw, DETACH_SIGNAL, FailureType.INVALID_DETACH)
        if workflow_id in self._listeners:
            self._listeners.remove(workflow_id)

    def _listener_id(self, raw: PlainInput, signal: str, invalid: FailureType) -> str | None:
        """The workflow id an `attach` or `detach` carries. Anything else (empty, null) is
        rejected and parked: signalling it would fail the workflow task for good."""
        try:
            return decode_input(ListenerId, raw, signal).root
        except InvalidInput as error:
            self._state.received += 1
            self._reject(invalid, str(error), raw=error.raw)
            return None

    @workflow.signal(name=CLOSE_SIGNAL)
    def close(self) -> None:
        """Accept no more events; finish the work already started or queued, then end."""
        self._closing = True

    @workflow.query(name=STATE_QUERY)
    def state(self) -> ChainState:
        return self._state.model_copy(
            update={
                "running": [f"{r.agent} ← {r.trigger.event.type}" for r in self._running.values()],
                "waiting": self._waiting(),
                "queued": len(self._queue),
                "listeners": list(self._listeners),
            }
        )

    @workflow.query(name=TIMELINE_QUERY)
    def timeline(self) -> list[TimelineEntry]:
        return self._timeline

    def _has_work(self) -> bool:
        return (
            (bool(self._inbox) and not self._holding_events())
            or self._dispatchable()
            or self._finished()
            or (self._should_continue_as_new())
        )

    def _finished(self) -> bool:
        if self._state.status == ChainStatus.IDLE_CLOSED:
            return True
        idle = not self._running and not self._inbox and not self._outbound
        stuck = self._state.status == ChainStatus.PAUSED
        if self._closing:
            return idle and (not self._queue or stuck)
        return self._state.terminal_seen and idle and not self._queue

    def _should_continue_as_new(self) -> bool:
        return self._continue_as_new_due() and not self._running and not self._outbound

    def _history_budget(self) -> int:
        """Events may arrive far faster than the chain takes them: it continues-as-new at a
        quarter of the server's limit on signals per run (this run's history holds every signal
        it received), leaving the rest for what arrives meanwhile, or at `RUN_HISTORY_BUDGET`."""
        return min(self._signals_per_run // 4, RUN_HISTORY_BUDGET)

    def _continue_as_new_due(self) -> bool:
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return True
        due = info.get_current_history_length() >= self._history_budget()
        return due and workflow.patched(FLOOD_PATCH)

    def _holding_events(self) -> bool:
        """From twice the budget on, new events wait in the inbox for the next run (they are
        carried), so that the forwards and agent runs they would start cannot keep this run from
        continuing-as-new."""
        overdue = workflow.info().get_current_history_length() >= 2 * self._history_budget()
        return overdue and workflow.patched(FLOOD_PATCH)

    def _dispatchable(self) -> bool:
        return (
            bool(self._queue)
            and len(self._running) < self._spec.max_concurrency
            and self._state.status != ChainStatus.PAUSED
            and self._may_dispatch_before_continuing()
        )

    def _may_dispatch_before_continuing(self) -> bool:
        """Continue-as-new waits for the running agents; one slow agent must not hold the
        queue meanwhile, so dispatch goes on until the run holds new events back."""
        if not self._continue_as_new_due():
            return True
        return self._keep_dispatching and not self._holding_events()

    def _drain_inbox(self) -> bool:
        """Handles the waiting events, up to `EVENTS_PER_TASK` and `EVENT_BYTES_PER_TASK` in one
        workflow task; returns whether some were left for the next task."""
        handled = size = 0
        while self._inbox and not self._holding_events():
            full = handled >= EVENTS_PER_TASK or size >= EVENT_BYTES_PER_TASK
            if full and workflow.patched(FLOOD_PATCH):
                return True
            envelope = self._inbox.pop(0)
            handled += 1
            size += json_size(envelope.payload)
            self._handle(envelope)
        return False

    def _handle(self, envelope: EventEnvelope) -> None:
        header = envelope.event
        self._state.received += 1
        if header.id in self._depths:
            self._state.duplicates += 1
            return
        correlation_id = self._state.correlation_id
        if header.correlation_id is None:
            header.correlation_id = correlation_id
        if header.correlation_id != correlation_id:
            self._reject(
                FailureType.FOREIGN_CORRELATION,
                f"event {header.id}: correlation_id {header.correlation_id!r} is not this "
                f"chain's ({correlation_id!r})",
                envelope=envelope,
            )
            return
        depth = self._depth(envelope)
        if depth > self._spec.max_causation_depth:
            path = " ← ".join(self._causation_path(header.causation_id))
            self._reject(
                FailureType.CAUSATION_LOOP,
                f"event {header.id} ({header.type}): causation depth {depth} exceeds "
                f"{self._spec.max_causation_depth}, a probable loop; path: {header.type} ← {path}",
                envelope=envelope,
                depth=depth,
            )
            return
        self._remember(envelope, depth)
        self._forward_to_listeners(envelope)
        self._apply_alerts(envelope)
        if header.type == self._spec.terminal_event:
            self._state.terminal_seen = True
        self._match(envelope)

    def _match(self, envelope: EventEnvelope) -> None:
        """Offer the event to every subscription it matches; a satisfied join queues a run."""
        for subscription in self._spec.subscriptions:
            if self._subscribed(subscription, envelope):
                join = self._joins[subscription.name]
                join.offer(envelope, workflow.now())
                if join.satisfied:
                    inputs = join.inputs()
                    causes = [arrival.event_id for arrival in join.fire()]
                    self._enqueue(subscription, envelope, causes, inputs=inputs)

    def _depth(self, envelope: EventEnvelope) -> int:
        """How many causes lead to this event; 0 for an event whose cause is unknown here. A
        lifecycle notice about an event this chain no longer remembers carries that event's
        depth."""
        cause = envelope.event.causation_id
        if cause is None:
            return 0
        depth = self._depths.get(cause)
        carried = envelope.payload.get("causation_depth")
        if depth is None and envelope.event.type in LIFECYCLE_NOTICES and isinstance(carried, int):
            depth = carried
        return 0 if depth is None else depth + 1

    def _forward_to_listeners(self, envelope: EventEnvelope) -> None:
        """Listeners get the events the chain records as `chain_event` (events they listen to,
        unlike `event`, which is addressed to them), never the chain's lifecycle notices: those
        are about this chain's handling, not the listener's work."""
        signal = EVENT_SIGNAL
        if workflow.patched(LIFECYCLE_NOTICES_PATCH):
            if envelope.event.type in LIFECYCLE_NOTICES:
                return
            signal = CHAIN_EVENT_SIGNAL
        for listener in self._listeners:
            self._in_background(self._forward(listener, envelope, signal))

    async def _forward(self, listener: str, envelope: EventEnvelope, signal: str) -> None:
        """A listener that has ended is dropped; the event stays in this chain's log."""
        try:
            await workflow.get_external_workflow_handle(listener).signal(
                signal, envelope.model_dump(mode="json")
            )
        except ApplicationError:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _remember(self, envelope: EventEnvelope, depth: int) -> None:
        header = envelope.event
        self._seq += 1
        self._state.events_seen += 1
        self._depths[header.id] = depth
        self._causes[header.id] = header.causation_id
        self._timeline.append(
            TimelineEntry.recording(
                envelope,
                seq=self._seq,
                correlation_id=self._state.correlation_id,
                causes=self._joined_causes.pop(header.id, None),
            )
        )
        self._timeline_bytes += json_size(envelope.payload)
        if len(self._timeline) > 2 * TIMELINE_WINDOW or self._timeline_bytes > 2 * TIMELINE_BYTES:
            self._timeline = timeline_window(self._timeline)
            self._timeline_bytes = sum(json_size(entry.payload) for entry in self._timeline)
        if len(self._depths) > 2 * SEEN_WINDOW:
            for stale in list(self._depths)[:-SEEN_WINDOW]:
                del self._depths[stale]
                self._causes.pop(stale, None)

    def _causation_path(self, event_id: str | None) -> list[str]:
        types = {entry.event_id: entry.event for entry in self._timeline}
        path: list[str] = []
        while event_id is not None and len(path) <= self._spec.max_causation_depth:
            path.append(types.get(event_id, event_id))
            event_id = self._causes.get(event_id)
        return path

    def _apply_alerts(self, envelope: EventEnvelope) -> None:
        policy = self._spec.alerts
        if policy is None:
            return
        resumes = envelope.event.type in policy.resume_on
        if resumes and self._state.status == ChainStatus.PAUSED:
            self._state.status = ChainStatus.RUNNING
            self._state.pause_reason = None
            self._upsert_status()
        elif resumes and workflow.patched(LIFECYCLE_NOTICES_PATCH):
            return
        elif envelope.routing.topic == policy.topic and self._passes(policy.pause_when, envelope):
            self._state.status = ChainStatus.PAUSED
            self._state.pause_reason = f"{envelope.event.type} ({envelope.event.id})"
            self._upsert_status()

    def _subscribed(self, subscription: Subscription, envelope: EventEnvelope) -> bool:
        topic = envelope.routing.topic
        if subscription.topic and topic and subscription.topic != topic:
            return False
        if envelope.event.type not in subscription.events:
            return False
        return subscription.filter is None or self._passes(subscription.filter, envelope)

    def _passes(self, expression: str, envelope: EventEnvelope) -> bool:
        """A filter that cannot be evaluated on this event does not match it; the error is
        counted in the chain's state, never raised."""
        outcome = evaluate(expression, envelope.model_dump(mode="json"))
        if outcome.error:
            self._state.filter_errors += 1
            self._state.last_filter_error = (
                f"event {envelope.event.id}: filter {expression!r}: {outcome.error}"
            )
        return outcome.matched

    def _enqueue(
        self,
        subscription: Subscription,
        trigger: EventEnvelope,
        causes: list[str],
        *,
        inputs: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        self._seq += 1
        key = idempotency_key or run_idempotency_key(
            workflow.info().workflow_id, subscription.name, trigger.event.id
        )
        run = AgentRun(
            subscription=subscription.name,
            agent=subscription.agent,
            trigger=trigger,
            causes=causes,
            inputs=inputs or {},
            idempotency_key=key,
        )
        heapq.heappush(self._queue, (PRIORITY_RANK[trigger.routing.priority], self._seq, run))

    def _dispatch(self) -> None:
        while self._dispatchable():
            _, seq, run = heapq.heappop(self._queue)
            self._running[seq] = run
            asyncio.create_task(self._run_agent(seq, run))  # noqa: RUF006 - tracked in _running

    async def _run_agent(self, seq: int, run: AgentRun) -> None:
        subscription = self._spec.subscription(run.subscription)
        publishes = subscription.publishes
        try:
            if publishes.on_start:
                self._publish(publishes.on_start, run, {"agent": run.agent})
            try:
                result: AgentResult = await workflow.execute_activity(
                    RUN_AGENT_ACTIVITY,
                    AgentRequest(
                        agent=run.agent,
                        event=run.trigger,
                        retry_on=subscription.retry.retry_on,
                        config=self._spec.agents.get(run.agent),
                        idempotency_key=run.idempotency_key,
                        inputs=run.inputs,
                    ),
                    result_type=AgentResult,
                    start_to_close_timeout=subscription.timeout,
                    heartbeat_timeout=subscription.heartbeat_timeout,
                    retry_policy=subscription.retry.to_retry_policy(),
                    summary=f"{run.agent} ← {run.trigger.event.type}",
                )
            except ActivityError as error:
                if publishes.on_failure:
                    self._publish(publishes.on_failure, run, {"error": failure_message(error)})
                self._state.dead_lettered += 1
                await park(
                    failure_type_of(error),
                    f"{run.agent} failed on {run.trigger.event.type}: {failure_message(error)}",
                    event=run.trigger,
                    target_agent=run.subscription,
                    attempt_count=attempts(error, subscription.retry.to_retry_policy()),
                    replay="rerun",
                    idempotency_key=run.idempotency_key,
                    inputs=run.inputs,
                    causation_depth=self._depths.get(run.trigger.event.id),
                )
                return
            for event_type in publishes.on_success:
                self._publish(event_type, run, result.data)
            for request in result.publish:
                self._publish(request.type, run, request.payload)
        finally:
            del self._running[seq]

    def _publish(self, event_type: str, run: AgentRun, payload: dict[str, Any]) -> None:
        trigger = run.trigger
        envelope = EventEnvelope.new(
            event_type,
            f"/{run.agent}",
            payload=payload,
            correlation_id=self._state.correlation_id,
            causation_id=trigger.event.id,
            topic=self._spec.subscription(run.subscription).topic or trigger.routing.topic,
            priority=trigger.routing.priority,
        )
        if len(run.causes) > 1:
            self._joined_causes[envelope.event.id] = run.causes
        self._inbox.append(envelope)

    async def _park_queued_runs(self) -> None:
        """A chain that ends paused (idle timeout, close) parks the runs it never started, so
        an operator can run them from the dead-letter queue."""
        queued = [run for _, _, run in sorted(self._queue)]
        self._queue.clear()
        self._state.dead_lettered += len(queued)
        await asyncio.gather(
            *(
                park(
                    FailureType.CHAIN_ENDED,
                    f"{run.agent} on {run.trigger.event.type} never ran: the chain ended "
                    f"{self._state.status.value} while it was queued",
                    event=run.trigger,
                    target_agent=run.agent,
                    replay="run_agent",
                    idempotency_key=run.idempotency_key,
                    inputs=run.inputs,
                    causation_depth=self._depths.get(run.trigger.event.id),
                )
                for run in queued
            )
        )

    def _reject(
        self,
        kind: str,
        reason: str,
        *,
        envelope: EventEnvelope | None = None,
        raw: Any = None,
        depth: int | None = None,
    ) -> None:
        """Recorded here and parked in the dead-letter queue: visible, never dropped. The
        event's causation depth is kept, so what its parking causes counts from there. A
        lifecycle notice is recorded but not parked: parking it would announce another."""
        self._state.rejected_count += 1
        event_id = envelope.event.id if envelope else None
        if envelope is not None and depth is not None:
            self._depths[envelope.event.id] = depth
        self._state.rejected.append(
            RejectedEvent(time=workflow.now(), reason=reason, event_id=event_id, raw=preview(raw))
        )
        del self._state.rejected[:-REJECTED_WINDOW]
        workflow.logger.warning(
            "event rejected", extra={"correlation_id": self._state.correlation_id, "reason": reason}
        )
        notice = envelope is not None and envelope.event.type in LIFECYCLE_NOTICES
        if notice and workflow.patched(LIFECYCLE_NOTICES_PATCH):
            return
        self._state.dead_lettered += 1
        self._in_background(park(kind, reason, event=envelope, raw=raw, causation_depth=depth))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Outbound work (parking, forwarding) the chain must finish before it ends or continues
        as new: counted from now, not from when the task first runs, or a run ending in this
        same workflow task would drop it. (Runs recorded before counted late.)"""
        counted_now = workflow.patched(SETTLE_PATCH)
        if counted_now:
            self._outbound += 1

        async def tracked() -> None:
            if not counted_now:
                self._outbound += 1
            try:
                await work
            finally:
                self._outbound -= 1

        asyncio.create_task(tracked())  # noqa: RUF006 - counted in _outbound

    def _waiting(self) -> list[str]:
        return [
            f"{name} waits for {', '.join(slot.describe() for slot in join.missing)}"
            for name, join in self._joins.items()
            if join.needed > 1 and join.received
        ]

    def _carry(self) -> ChainInput:
        return ChainInput(
            spec=self._spec,
            correlation_id=self._state.correlation_id,
            signals_per_run=self._signals_per_run,
            carried=ChainCarry(
                state=self.state(),
                seq=self._seq,
                timeline=timeline_window(self._timeline),
                causes=dict(list(self._causes.items())[-SEEN_WINDOW:]),
                depths=dict(list(self._depths.items())[-SEEN_WINDOW:]),
                joins=self._joins,
                inbox=self._inbox,
                queue=[QueuedRun(rank=r, seq=s, run=run) for r, s, run in self._queue],
                listeners=self._listeners,
                closing=self._closing,
                joined_causes=self._joined_causes,
            ),
        )

    def _upsert_status(self) -> None:
        upsert_search_attributes(
            coordination_attributes(
                correlation_id=self._state.correlation_id,
                pattern=Pattern.CHAIN,
                status=self._state.status.value,
            )
        )

    def _publish_details(self) -> None:
        state = self.state()
        lines = [f"**Status:** {state.status.value} · **events seen:** {state.events_seen}"]
        if state.pause_reason:
            lines.append(f"**Paused by:** {state.pause_reason}")
        lines.append(f"**Running:** {', '.join(state.running) or 'none'}")
        lines.append(f"**Waiting:** {'; '.join(state.waiting) or 'none'}")
        if state.queued:
            lines.append(f"**Queued runs:** {state.queued}")
        if state.rejected:
            lines.append(f"**Rejected events:** {len(state.rejected)}")
        workflow.set_current_details("\n\n".join(lines))


def timeline_window(timeline: list[TimelineEntry]) -> list[TimelineEntry]:
    """The newest rows a chain keeps: `TIMELINE_WINDOW` rows and `TIMELINE_BYTES` of payload."""
    return newest_within(
        timeline, TIMELINE_WINDOW, TIMELINE_BYTES, lambda entry: json_size(entry.payload)
    )
