"""The `Aggregator` workflow: a durable join over events with a deadline.

It records the events that fill its expected slots (the earliest per slot, or the latest, by
event time), counts the duplicates and the events that match nothing, and when its condition
holds emits `on_complete`; when the deadline passes first it emits `on_timeout` with what
arrived and what is missing. The emitted event is the workflow's result and is published into
the chain of its correlation id.

Events reach it two ways: `event` signals are addressed to it (an event for it after it has
finished is dead-lettered), `chain_event` signals are what its chain records and forwards to
its listeners (after it has finished they are dropped and counted, never dead-lettered).

A thin shell over `coord.models.aggregator.model.AggregatorModel`, which holds the join and
decides what each event does and how the wait ends; this keeps the deadline timer, the signals,
attaching to and leaving the chain, the lookback activity, parking and continue-as-new (after
the handlers in progress finish, as the SDK's safe message handlers sample does).
"""

import asyncio
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.aggregator.model import AggregatorModel
    from coord.models.aggregator.spec import AggregatorState, AggregatorStatus
    from coord.models.events.envelope import EventEnvelope
    from coord.models.wire.contract import (
        AGGREGATOR_RECORD_MEMO,
        AGGREGATOR_WORKFLOW,
        ATTACH_SIGNAL,
        CHAIN_EVENT_SIGNAL,
        DETACH_SIGNAL,
        EVENT_SIGNAL,
        HANDLER_TEXT,
        STATE_QUERY,
        UNKNOWN_SIGNAL,
        FailureType,
        chain_workflow_id,
        failure,
        failure_message,
    )
    from coord.models.wire.specs import SpecError
    from coord.models.wire.versions import (
        AGGREGATOR_PARKS_UNKNOWN_SIGNALS_PATCH,
        AGGREGATOR_PATCHES,
        AGGREGATOR_PATCHES_AT_ONCE_PATCH,
        AGGREGATOR_PUBLISHES_BEFORE_IT_LEAVES_PATCH,
        AGGREGATOR_REWIND_PATCH,
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
        decode_plain,
        park,
        show_details,
        signal_chain,
        uncancellable,
        unknown_signal,
        upsert_search_attributes,
        upsert_unwritten,
    )
    from coord.workflows._runtime.patches import adopt, patched


LOOKBACK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=4)
"""A chain that cannot answer within a few attempts is recorded as a failed lookback; the
join goes on with the live events."""


@workflow.defn(name=AGGREGATOR_WORKFLOW, sandboxed=False)
class Aggregator(metaclass=SurplusStartArguments):
    """Not sandboxed, as every workflow of the project (`coord.infra.workflow_runner` says
    why): its code touches only the workflow API and pure models."""

    @workflow.init
    def __init__(self, raw_input: PlainInput = NO_INPUT) -> None:
        """Parses before a signal-with-start's signal is handled; a bad spec is reported by
        `run` (nothing may fail the workflow task). The deadline counts from the start."""
        self._at_once = adopt(AGGREGATOR_PATCHES_AT_ONCE_PATCH, AGGREGATOR_PATCHES, on=self)
        self._deadline_first = patched(DEADLINE_FIRST_PATCH, on=self)
        self._published = metrics.PublishedTally()
        start = workflow.info().workflow_start_time if self._deadline_first else workflow.now()
        try:
            self._model = AggregatorModel.begin(decode_json(raw_input, "aggregator spec"), start)
        except SpecError as error:
            self._model = AggregatorModel.invalid(str(error), workflow.now())
        if self._model.rewound and patched(AGGREGATOR_REWIND_PATCH, on=self):
            self._model.take_past(start)

    @workflow.run
    async def run(self, raw_input: PlainInput = NO_INPUT) -> AggregatorState:
        self._published.start()
        if self._model.spec_error:
            if patched(PARK_BEFORE_INVALID_INPUT_FAILS_PATCH):
                await workflow.wait_condition(workflow.all_handlers_finished)
            raise failure(FailureType.INVALID_SPEC, self._model.spec_error, non_retryable=True)
        if not self._deadline_first:
            return await self._run_as_recorded_before_deadline_first()
        # A task first runs when `run` first awaits: after the deadline timer is armed.
        deadline = DeadlineTimer(self._model) if self._at_once else None
        joining = asyncio.create_task(self._join_chain())
        cancel: asyncio.CancelledError | None = None
        try:
            await self._wait_for_join(deadline)
        except asyncio.CancelledError as error:
            cancel = error
        joining.cancel()
        status = self._model.outcome(cancelled=cancel is not None)
        await self._finish(status)
        if cancel is not None and status == AggregatorStatus.CANCELLED:
            raise cancel
        return self.state()

    async def _wait_for_join(self, deadline: "DeadlineTimer | None") -> None:
        """Until the join holds or the deadline passes (`deadline`, or a timeout armed here),
        continuing-as-new when the server suggests it (after the handlers finish)."""
        try:
            if deadline:
                await deadline.wait(lambda: self._model.satisfied or self._continue_as_new_due())
            else:
                await workflow.wait_condition(
                    lambda: self._model.satisfied or self._continue_as_new_due(),
                    timeout=self._model.time_left(workflow.now()),
                    timeout_summary=self._model.deadline_summary(),
                )
        except TimeoutError:
            return
        if self._model.satisfied:
            return
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self._model.carry())

    def _continue_as_new_due(self) -> bool:
        return self._model.continue_as_new_due(workflow.info().is_continue_as_new_suggested())

    async def _join_chain(self) -> None:
        """Receive the events the chain of this correlation records from now on; with lookback,
        read the ones it recorded before (duplicates are recognised by id)."""
        self._publish()
        if not self._model.chain_joined:
            await self._signal_chain(ATTACH_SIGNAL, workflow.info().workflow_id)
            if self._model.spec.lookback:
                await self._look_back()
        self._model.chain_joined = True

    async def _look_back(self) -> None:
        correlation_id = self._model.spec.correlation_id
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
            self._model.lookback_failed(failure_message(error))
        else:
            metrics.events_consumed(self._model.looked_back(recorded, workflow.now()))
        show_details(self._model.details())

    async def _finish(self, status: AggregatorStatus) -> None:
        """Record the outcome (a cancelled run keeps it in its memo), publish the emitted event
        into the chain and leave it, and wait for that and the handlers; a cancel then is late."""
        self._model.finish(status)
        metrics.aggregator_ended(status)
        self._publish()
        if status == AggregatorStatus.CANCELLED and patched(KEPT_RECORD_PATCH):
            workflow.upsert_memo({AGGREGATOR_RECORD_MEMO: self.state()})
        leaving = asyncio.create_task(self._leave_chain())
        await uncancellable(
            workflow.wait_condition(lambda: leaving.done() and workflow.all_handlers_finished())
        )

    async def _leave_chain(self) -> None:
        """Its result joins the chain's log before it leaves: an ended chain waits for its
        listeners, not for their results (runs recorded before left first)."""
        emitted = self._model.state.emitted
        publish_first = patched(AGGREGATOR_PUBLISHES_BEFORE_IT_LEAVES_PATCH)
        if emitted is not None and publish_first:
            await self._publish_to_chain(emitted)
        await self._signal_chain(DETACH_SIGNAL, workflow.info().workflow_id)
        if emitted is not None and not publish_first:
            await self._publish_to_chain(emitted)

    async def _run_as_recorded_before_deadline_first(self) -> AggregatorState:
        """The order of runs recorded before the `aggregator-deadline-first` patch."""
        self._publish()
        await self._signal_chain(ATTACH_SIGNAL, workflow.info().workflow_id)
        if self._model.spec.lookback:
            await self._look_back()
        try:
            await workflow.wait_condition(
                lambda: self._model.satisfied,
                timeout=self._model.time_left(workflow.now()),
                timeout_summary=self._model.deadline_summary(dated=False),
            )
            status = AggregatorStatus.COMPLETED
        except TimeoutError:
            status = AggregatorStatus.TIMED_OUT
        except asyncio.CancelledError:
            self._model.finish(AggregatorStatus.CANCELLED)
            self._publish()
            raise
        emitted = self._model.finish(status)
        metrics.aggregator_ended(status)
        if emitted is not None:
            await self._publish_to_chain(emitted)
        self._publish()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.state()

    @workflow.signal(name=EVENT_SIGNAL, description=HANDLER_TEXT[EVENT_SIGNAL])
    async def event(self, raw: PlainInput = NO_INPUT) -> None:
        """An event addressed to this aggregator. Raw on purpose: an envelope that does not
        decode or validate is recorded and parked, never raised; so is one after the end."""
        await self._receive(raw, addressed=True)

    @workflow.signal(name=CHAIN_EVENT_SIGNAL, description=HANDLER_TEXT[CHAIN_EVENT_SIGNAL])
    async def chain_event(self, raw: PlainInput = NO_INPUT) -> None:
        """An event its chain recorded and forwards to its listeners."""
        await self._receive(raw, addressed=False)

    @workflow.signal(dynamic=True, description=HANDLER_TEXT[UNKNOWN_SIGNAL])
    async def unknown(self, name: str, args: Sequence[RawValue]) -> None:
        """A signal no handler takes: parked (`park_unknown_signal`)."""
        await park_unknown_signal(self._model, name, args)

    async def _receive(self, raw: PlainInput, *, addressed: bool) -> None:
        self._model.arrived()
        decode = decode_plain if self._at_once else decode_input
        try:
            envelope = decode(EventEnvelope, raw, "event")
        except InvalidInput as error:
            self._model.reject(str(error))
            await park(FailureType.INVALID_ENVELOPE, str(error), raw=error.raw)
            return
        self._published.add(envelope, addressed=addressed)
        if self._model.waiting:
            if self._model.offer(envelope, workflow.now):
                metrics.event_consumed(envelope)
                show_details(self._model.details())
            return
        settled = self._deadline_first
        reason = self._model.after_end(envelope, addressed=addressed, settled=settled)
        if reason is not None:
            await park(FailureType.TARGET_ENDED, reason, event=envelope)

    @workflow.query(name=STATE_QUERY, description=HANDLER_TEXT[STATE_QUERY])
    def state(self) -> AggregatorState:
        """The record as of the run's last task; `AggregatorState.as_of` adds the time left."""
        return self._model.record()

    async def _signal_chain(self, signal: str, arg: Any) -> bool:
        """False when the correlation has no chain (or none is scoped)."""
        if self._model.spec.correlation_id is None:
            return False
        return await signal_chain(self._model.spec.correlation_id, signal, arg)

    async def _publish_to_chain(self, envelope: EventEnvelope) -> None:
        """Aggregators compose with chains: the result joins its correlation's event log."""
        if await self._signal_chain(EVENT_SIGNAL, envelope.model_dump(mode="json")):
            self._model.published()

    def _publish(self) -> None:
        """The status as a search attribute (what changed, under the bundle), and the details."""
        upsert = upsert_unwritten if self._at_once else upsert_search_attributes
        upsert(self._model.state.search_attributes())
        show_details(self._model.details())


async def park_unknown_signal(model: AggregatorModel, name: str, args: Sequence[RawValue]) -> None:
    """A signal the aggregator has no handler for (a misspelt name, one meant for another
    workflow): counted, rejected and parked with what it carried, never left unread (runs
    recorded before AGGREGATOR_PARKS_UNKNOWN_SIGNALS_PATCH left it so; an aggregator runs no
    local activity, so the patch is asked when such a signal first comes)."""
    if not patched(AGGREGATOR_PARKS_UNKNOWN_SIGNALS_PATCH):
        return
    reason, carried = unknown_signal(name, args, "an aggregator")
    model.arrived()
    model.reject(reason)
    await park(FailureType.INVALID_INPUT, reason, raw=carried)


class DeadlineTimer:
    """The deadline timer of a run taking AGGREGATOR_PATCHES_AT_ONCE_PATCH, armed before
    anything else the run does (a task first runs when the run first awaits), none when the
    deadline has passed already. When the join holds first the timer is left to lapse, since a
    cancel is one more command and history event, unless it holds in the workflow task that
    armed it: the timer's start is not sent yet, and cancelled with it, it costs nothing."""

    def __init__(self, model: AggregatorModel) -> None:
        left, summary = model.time_left(workflow.now()), model.deadline_summary()
        self._armed_in = workflow.info().get_current_history_length()
        self._timer = asyncio.create_task(workflow.sleep(left, summary=summary)) if left else None

    async def wait(self, holds: Callable[[], bool]) -> None:
        """Until `holds`; TimeoutError when the deadline passes first."""
        await workflow.wait_condition(lambda: holds() or self._timer is None or self._timer.done())
        if not holds():
            raise TimeoutError
        if self._timer and workflow.info().get_current_history_length() == self._armed_in:
            self._timer.cancel()
