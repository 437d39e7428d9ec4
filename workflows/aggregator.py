"""The `Aggregator` workflow: a durable join over events with a deadline.

It records the events that fill its expected slots (the earliest per slot, or the latest, by
event time), counts the duplicates and the events that match nothing, and when its condition
holds emits `on_complete`; when the deadline passes first it emits `on_timeout` with what
arrived and what is missing. The emitted event is the workflow's result and is published into
the chain of its correlation id.

Events reach it two ways: `event` signals are addressed to it (an event for it after it has
finished is dead-lettered), `chain_event` signals are what its chain records and forwards to
its listeners (after it has finished they are dropped and counted, never dead-lettered).
"""

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.aggregator.spec import (
        AggregatorCarry,
        AggregatorInput,
        AggregatorSpec,
        AggregatorState,
        AggregatorStatus,
        SlotStatus,
        aggregation_payload,
        parse_aggregator_input,
    )
    from coord.models.events.envelope import LIFECYCLE_NOTICES, EventEnvelope
    from coord.models.events.joins import Slot
    from coord.models.wire.contract import (
        AGGREGATOR_RECORD_MEMO,
        AGGREGATOR_WORKFLOW,
        ATTACH_SIGNAL,
        CHAIN_EVENT_SIGNAL,
        DETACH_SIGNAL,
        EVENT_SIGNAL,
        STATE_QUERY,
        FailureType,
        chain_workflow_id,
        failure,
        failure_message,
    )
    from coord.models.wire.durations import MIN_DURATION, format_duration
    from coord.models.wire.specs import SpecError
    from coord.models.wire.versions import (
        DEADLINE_FIRST_PATCH,
        KEPT_RECORD_PATCH,
        PARK_BEFORE_INVALID_INPUT_FAILS_PATCH,
    )
    from coord.workflows._runtime import calls, metrics
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.common import (
        NO_INPUT,
        InvalidInput,
        PlainInput,
        decode_input,
        decode_json,
        park,
        signal_chain,
        upsert_search_attributes,
    )


INVALID_SPEC_STANDIN = AggregatorSpec(
    aggregator_id="invalid",
    wait_for=[Slot(type="none")],
    timeout=MIN_DURATION,
    on_complete="none",
    on_timeout="none",
)
"""Keeps the handlers working (and recording) while `run` reports the invalid spec."""


SEEN_WINDOW = 1000
REJECTED_WINDOW = 20
LOOKBACK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=4)
"""A chain that cannot answer within a few attempts is recorded as a failed lookback; the
join goes on with the live events."""


@workflow.defn(name=AGGREGATOR_WORKFLOW)
class Aggregator(metaclass=SurplusStartArguments):
    @workflow.init
    def __init__(self, raw_input: PlainInput = NO_INPUT) -> None:
        """Parses here, before the signal of a signal-with-start is handled; a bad spec is
        reported by `run`, since nothing may fail the workflow task."""
        self._deadline_first = workflow.patched(DEADLINE_FIRST_PATCH)
        self._spec_error: str | None = None
        carried: AggregatorCarry | None = None
        try:
            self._spec, carried = parse_aggregator_input(decode_json(raw_input, "aggregator spec"))
        except SpecError as error:
            self._spec_error = str(error)
            self._spec = INVALID_SPEC_STANDIN
        self._join = carried.join if carried else self._spec.new_join()
        self._deadline = carried.deadline if carried else self._first_deadline()
        self._seen = dict.fromkeys(carried.seen if carried else [])
        self._chain_joined = carried.chain_joined if carried else False
        self._state = (
            carried.state
            if carried
            else AggregatorState(
                aggregator_id=self._spec.aggregator_id, correlation_id=self._spec.correlation_id
            )
        )

    def _first_deadline(self) -> datetime:
        """From the workflow's start, not from when a worker first ran it."""
        if self._spec_error:
            return workflow.now()
        start = workflow.info().workflow_start_time if self._deadline_first else workflow.now()
        return start + self._spec.timeout

    @workflow.run
    async def run(self, raw_input: PlainInput = NO_INPUT) -> AggregatorState:
        if self._spec_error:
            if workflow.patched(PARK_BEFORE_INVALID_INPUT_FAILS_PATCH):
                await workflow.wait_condition(workflow.all_handlers_finished)
            raise failure(FailureType.INVALID_SPEC, self._spec_error, non_retryable=True)
        if not self._deadline_first:
            return await self._run_as_recorded_before_deadline_first()
        # A task first runs when `run` first awaits: after the deadline timer is armed.
        joining = asyncio.create_task(self._join_chain())
        cancel: asyncio.CancelledError | None = None
        try:
            await self._wait_for_join()
        except asyncio.CancelledError as error:
            cancel = error
        joining.cancel()
        if self._join.satisfied:
            # The join is complete even if a cancel or the deadline landed with its last event.
            await self._finish(AggregatorStatus.COMPLETED)
        elif cancel is not None:
            await self._finish(AggregatorStatus.CANCELLED)
            raise cancel
        else:
            await self._finish(AggregatorStatus.TIMED_OUT)
        return self.state()

    async def _wait_for_join(self) -> None:
        """Until the join holds or the deadline passes, continuing-as-new when the server
        suggests it (after the handlers in progress finish, as the SDK's safe message handlers
        sample does)."""
        while True:
            try:
                await workflow.wait_condition(
                    lambda: self._join.satisfied or self._continue_as_new_due(),
                    timeout=max(self._deadline - workflow.now(), timedelta()),
                    timeout_summary=f"deadline: {self._deadline:%Y-%m-%d %H:%M:%S} UTC "
                    f"({format_duration(self._spec.timeout)} after start)",
                )
            except TimeoutError:
                return
            if self._join.satisfied:
                return
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(self._carry())

    def _continue_as_new_due(self) -> bool:
        return self._chain_joined and workflow.info().is_continue_as_new_suggested()

    async def _join_chain(self) -> None:
        """Receive the events the chain of this correlation records from now on; with lookback,
        read the ones it recorded before (duplicates are recognised by id)."""
        self._upsert_status()
        self._publish_details()
        if not self._chain_joined:
            await self._signal_chain(ATTACH_SIGNAL, workflow.info().workflow_id)
            if self._spec.lookback:
                await self._look_back()
        self._chain_joined = True

    async def _look_back(self) -> None:
        correlation_id = self._spec.correlation_id
        assert correlation_id is not None  # the spec requires it with lookback
        try:
            recorded = await calls.execute(
                refs.CHAIN_EVENTS,
                correlation_id,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=LOOKBACK_RETRY,
                summary=f"lookback: {chain_workflow_id(correlation_id)}",
            )
        except ActivityError as error:
            self._state.lookback_failure = failure_message(error)
            self._publish_details()
            return
        for envelope in sorted(recorded, key=lambda e: e.event.timestamp):
            if envelope.event.type not in LIFECYCLE_NOTICES:
                self._state.received += 1
                self._offer(envelope)
        self._publish_details()

    async def _finish(self, status: AggregatorStatus) -> None:
        """Record the outcome (a cancelled run, which has no result, keeps it in its memo),
        leave the chain (detach, then publish the emitted event), and wait for that and for the
        handlers in progress. A cancel arriving meanwhile changes nothing: the outcome is
        decided."""
        self._state.status = status
        metrics.aggregator_ended(status)
        if status != AggregatorStatus.CANCELLED:
            self._state.emitted = self._emitted(status)
        self._upsert_status()
        self._publish_details()
        if status == AggregatorStatus.CANCELLED and workflow.patched(KEPT_RECORD_PATCH):
            workflow.upsert_memo({AGGREGATOR_RECORD_MEMO: self.state()})
        leaving = asyncio.create_task(self._leave_chain())
        while True:
            try:
                await workflow.wait_condition(
                    lambda: leaving.done() and workflow.all_handlers_finished()
                )
                return
            except asyncio.CancelledError:
                continue

    async def _leave_chain(self) -> None:
        await self._signal_chain(DETACH_SIGNAL, workflow.info().workflow_id)
        if self._state.emitted is not None:
            await self._publish_to_chain(self._state.emitted)

    async def _run_as_recorded_before_deadline_first(self) -> AggregatorState:
        """The order of runs recorded before the `aggregator-deadline-first` patch."""
        self._upsert_status()
        self._publish_details()
        await self._signal_chain(ATTACH_SIGNAL, workflow.info().workflow_id)
        if self._spec.lookback:
            await self._look_back()
        try:
            await workflow.wait_condition(
                lambda: self._join.satisfied,
                timeout=max(self._deadline - workflow.now(), timedelta()),
                timeout_summary=f"deadline: {format_duration(self._spec.timeout)} after start",
            )
            self._state.status = AggregatorStatus.COMPLETED
        except TimeoutError:
            self._state.status = AggregatorStatus.TIMED_OUT
        except asyncio.CancelledError:
            self._state.status = AggregatorStatus.CANCELLED
            self._upsert_status()
            self._publish_details()
            raise
        self._state.emitted = self._emitted(self._state.status)
        metrics.aggregator_ended(self._state.status)
        await self._publish_to_chain(self._state.emitted)
        self._upsert_status()
        self._publish_details()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.state()

    @workflow.signal(name=EVENT_SIGNAL)
    async def event(self, raw: PlainInput = NO_INPUT) -> None:
        """An event addressed to this aggregator. Raw on purpose: an envelope that does not
        decode or validate is recorded and parked, never raised; so is an event that arrives
        after the aggregator has finished."""
        await self._receive(raw, addressed=True)

    @workflow.signal(name=CHAIN_EVENT_SIGNAL)
    async def chain_event(self, raw: PlainInput = NO_INPUT) -> None:
        """An event its chain recorded and forwards to its listeners."""
        await self._receive(raw, addressed=False)

    async def _receive(self, raw: PlainInput, *, addressed: bool) -> None:
        self._state.received += 1
        try:
            envelope = decode_input(EventEnvelope, raw, "event")
        except InvalidInput as error:
            self._reject(str(error))
            await park(FailureType.INVALID_ENVELOPE, str(error), raw=error.raw)
            return
        metrics.event_published(envelope, addressed=addressed)
        if self._state.status == AggregatorStatus.WAITING:
            self._offer(envelope)
            self._publish_details()
            return
        header = envelope.event
        if self._deadline_first and header.id in self._seen:
            self._state.duplicates += 1
        elif self._deadline_first and (not addressed or header.type in LIFECYCLE_NOTICES):
            self._state.ignored_after_finish += 1
        else:
            reason = f"event {header.id} ({header.type}): the aggregator ended"
            self._reject(reason)
            await park(FailureType.TARGET_ENDED, reason, event=envelope)

    @workflow.query(name=STATE_QUERY)
    def state(self) -> AggregatorState:
        """The record as of the run's last workflow task; `AggregatorState.as_of` adds the time
        left as the reader's clock sees it."""
        return self._state.model_copy(
            update={
                "slots": self._slot_table(),
                "progress": self._progress(),
                "deadline": self._deadline,
                "seconds_left": None,
            }
        )

    def _offer(self, envelope: EventEnvelope) -> None:
        header = envelope.event
        scope = self._spec.correlation_id
        if header.id in self._seen:
            self._state.duplicates += 1
            return
        self._remember(header.id)
        if scope is not None and header.correlation_id not in (None, scope):
            self._state.unmatched += 1
            return
        if self._join.offer(envelope, workflow.now()) == "unmatched":
            self._state.unmatched += 1
        else:
            self._state.matched += 1
            metrics.event_consumed(envelope)

    def _remember(self, event_id: str) -> None:
        self._seen[event_id] = None
        if len(self._seen) > 2 * SEEN_WINDOW:
            self._seen = dict.fromkeys(list(self._seen)[-SEEN_WINDOW:])

    def _reject(self, reason: str) -> None:
        self._state.rejected_count += 1
        self._state.rejected.append(reason)
        del self._state.rejected[:-REJECTED_WINDOW]

    def _emitted(self, status: AggregatorStatus) -> EventEnvelope:
        completed = status == AggregatorStatus.COMPLETED
        return EventEnvelope.new(
            self._spec.on_complete if completed else self._spec.on_timeout,
            f"/aggregator/{self._spec.aggregator_id}",
            payload=aggregation_payload(self._spec, self._join),
            correlation_id=self._spec.correlation_id,
            causation_id=self._last_arrival_id(),
        )

    def _last_arrival_id(self) -> str | None:
        arrivals = sorted(self._join.received.values(), key=lambda a: a.received_at)
        return arrivals[-1].event_id if arrivals else None

    def _carry(self) -> AggregatorInput:
        return AggregatorInput(
            spec=self._spec,
            carried=AggregatorCarry(
                state=self._state,
                join=self._join,
                deadline=self._deadline,
                seen=list(self._seen)[-SEEN_WINDOW:],
                chain_joined=self._chain_joined,
            ),
        )

    async def _signal_chain(self, signal: str, arg: Any) -> bool:
        """False when the correlation has no chain (or none is scoped)."""
        if self._spec.correlation_id is None:
            return False
        return await signal_chain(self._spec.correlation_id, signal, arg)

    async def _publish_to_chain(self, envelope: EventEnvelope) -> None:
        """Aggregators compose with chains: the result joins its correlation's event log."""
        if await self._signal_chain(EVENT_SIGNAL, envelope.model_dump(mode="json")):
            self._state.published_to_chain = True

    def _slot_table(self) -> list[SlotStatus]:
        rows = []
        for index, slot in enumerate(self._spec.wait_for):
            arrival = self._join.received.get(index)
            rows.append(
                SlotStatus(
                    type=slot.type,
                    source=slot.source,
                    status="received" if arrival else "waiting",
                    received_at=arrival.received_at if arrival else None,
                    event_id=arrival.event_id if arrival else None,
                )
            )
        return rows

    def _progress(self) -> str:
        count = f"{len(self._join.received)}/{len(self._spec.wait_for)} events received"
        if self._join.needed < len(self._spec.wait_for):
            count += f" ({self._join.needed} needed)"
        missing = ", ".join(slot.describe() for slot in self._join.missing)
        if self._state.status == AggregatorStatus.WAITING and missing:
            return f"{count}, waiting for {missing}"
        return f"{count}; {self._state.status.value}"

    def _upsert_status(self) -> None:
        upsert_search_attributes(self._state.search_attributes())

    def _publish_details(self) -> None:
        lines = [self._progress(), f"**Deadline:** {self._deadline:%Y-%m-%d %H:%M:%S} UTC"]
        if self._state.lookback_failure:
            lines.append(f"**Lookback failed:** {self._state.lookback_failure}")
        workflow.set_current_details("\n\n".join(lines))
