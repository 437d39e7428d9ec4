"""The `Aggregator` workflow: a durable join over events with a deadline.

It records the events that fill its expected slots (first per slot, or latest), counts the
duplicates and the events that match nothing, and when its condition holds emits `on_complete`;
when the deadline passes first it emits `on_timeout` with what arrived and what is missing. The
emitted event is the workflow's result and is published into the chain of its correlation id.
"""

import asyncio
import contextlib
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from models.aggregator import (
        AggregatorSpec,
        AggregatorState,
        AggregatorStatus,
        SlotStatus,
        aggregation_payload,
    )
    from models.chain import chain_workflow_id
    from models.durations import format_duration
    from models.envelope import EventEnvelope
    from models.joins import Slot
    from models.specs import SpecError, parse_model
    from workflows import search_attributes
    from workflows.common import park


INVALID_SPEC_STANDIN = AggregatorSpec(
    aggregator_id="invalid",
    wait_for=[Slot(type="none")],
    timeout=timedelta(),
    on_complete="none",
    on_timeout="none",
)
"""Keeps the handlers working (and recording) while `run` reports the invalid spec."""


@workflow.defn(name="Aggregator")
class Aggregator:
    @workflow.init
    def __init__(self, raw_spec: Any) -> None:
        """Parses here, before the signal of a signal-with-start is handled; a bad spec is
        reported by `run`, since nothing may fail the workflow task."""
        self._spec_error: str | None = None
        try:
            self._spec = parse_model(AggregatorSpec, raw_spec, "aggregator spec")
        except SpecError as error:
            self._spec_error = str(error)
            self._spec = INVALID_SPEC_STANDIN
        self._join = self._spec.new_join()
        self._deadline = workflow.now() + (
            self._spec.timeout if not self._spec_error else timedelta()
        )
        self._seen: set[str] = set()
        self._state = AggregatorState(
            aggregator_id=self._spec.aggregator_id, correlation_id=self._spec.correlation_id
        )

    @workflow.run
    async def run(self, raw_spec: Any) -> AggregatorState:
        if self._spec_error:
            raise ApplicationError(self._spec_error, type="invalid_spec", non_retryable=True)
        self._upsert_status()
        self._publish_details()
        await self._attach_to_chain()
        if self._spec.lookback and self._spec.correlation_id:
            for envelope in await workflow.execute_activity(
                "chain_events",
                self._spec.correlation_id,
                result_type=list[EventEnvelope],
                start_to_close_timeout=timedelta(seconds=30),
                summary=f"lookback: chain-{self._spec.correlation_id}",
            ):
                self._offer(envelope)
        try:
            await workflow.wait_condition(
                lambda: self._join.satisfied,
                timeout=max(self._deadline - workflow.now(), timedelta()),
                timeout_summary=f"deadline: {format_duration(self._spec.timeout)} after start",
            )
            self._state.status = AggregatorStatus.COMPLETED
            emitted_type = self._spec.on_complete
        except TimeoutError:
            self._state.status = AggregatorStatus.TIMED_OUT
            emitted_type = self._spec.on_timeout
        except asyncio.CancelledError:
            self._state.status = AggregatorStatus.CANCELLED
            self._upsert_status()
            self._publish_details()
            raise
        self._state.emitted = EventEnvelope.new(
            emitted_type,
            f"/aggregator/{self._spec.aggregator_id}",
            payload=aggregation_payload(self._spec, self._join),
            correlation_id=self._spec.correlation_id,
            causation_id=self._last_arrival_id(),
        )
        await self._publish_to_chain(self._state.emitted)
        self._upsert_status()
        self._publish_details()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.state()

    @workflow.signal(name="event")
    async def event(self, raw: Any) -> None:
        """Untyped on purpose: an envelope that does not validate is recorded and parked, never
        raised; so is an event that arrives after the aggregator has finished."""
        try:
            envelope = parse_model(EventEnvelope, raw, "event")
        except SpecError as error:
            self._state.rejected.append(str(error))
            await park("invalid_envelope", str(error), raw=raw)
            return
        if self._state.status != AggregatorStatus.WAITING:
            reason = f"event {envelope.event.id} ({envelope.event.type}): the aggregator ended"
            self._state.rejected.append(reason)
            await park("target_ended", reason, event=envelope)
            return
        self._offer(envelope)
        self._publish_details()

    @workflow.query
    def state(self) -> AggregatorState:
        now = workflow.now()
        return self._state.model_copy(
            update={
                "slots": self._slot_table(),
                "progress": self._progress(),
                "deadline": self._deadline,
                "seconds_left": max((self._deadline - now).total_seconds(), 0.0)
                if self._state.status == AggregatorStatus.WAITING
                else None,
            }
        )

    def _offer(self, envelope: EventEnvelope) -> None:
        header = envelope.event
        scope = self._spec.correlation_id
        if header.id in self._seen:
            self._state.duplicates += 1
            return
        self._seen.add(header.id)
        if scope is not None and header.correlation_id not in (None, scope):
            self._state.unmatched += 1
            return
        if self._join.offer(envelope, workflow.now()) == "unmatched":
            self._state.unmatched += 1
        else:
            self._state.matched += 1

    def _last_arrival_id(self) -> str | None:
        arrivals = sorted(self._join.received.values(), key=lambda a: a.received_at)
        return arrivals[-1].event_id if arrivals else None

    async def _attach_to_chain(self) -> None:
        """Receive the events the chain of this correlation records from now on (lookback
        covers the ones before; duplicates are ignored by id)."""
        if self._spec.correlation_id is None:
            return
        chain = workflow.get_external_workflow_handle(chain_workflow_id(self._spec.correlation_id))
        with contextlib.suppress(ApplicationError):
            await chain.signal("attach", workflow.info().workflow_id)

    async def _publish_to_chain(self, envelope: EventEnvelope) -> None:
        """Aggregators compose with chains: the result joins its correlation's event log."""
        if self._spec.correlation_id is None:
            return
        chain = workflow.get_external_workflow_handle(chain_workflow_id(self._spec.correlation_id))
        try:
            await chain.signal("event", envelope.model_dump(mode="json"))
        except ApplicationError:
            return
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
        search_attributes.upsert(
            search_attributes.coordination_attributes(
                correlation_id=self._spec.correlation_id or self._spec.aggregator_id,
                pattern="aggregator",
                status=self._state.status.value,
            )
        )

    def _publish_details(self) -> None:
        deadline: datetime = self._deadline
        workflow.set_current_details(
            f"{self._progress()}\n\n**Deadline:** {deadline:%Y-%m-%d %H:%M:%S} UTC"
        )
