"""The chain's Temporal side of its model's boundary (`coord.models.chain.boundary`): what the
model reads of its run (`WorkflowRun`), how signals' arguments are decoded (`decoded`,
`acked_event`), and the sending of what the model decides (`Outbound`)."""

import asyncio
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from coord.models.chain.boundary import Forward, Parking, Send, Undecodable
    from coord.models.chain.model import ChainModel
    from coord.models.events.envelope import EventEnvelope
    from coord.models.wire.contract import FailureType, failure
    from coord.models.wire.sizes import json_size
    from coord.models.wire.specs import SpecError, parse_model
    from coord.models.wire.versions import CHAIN_FAN_OUT_PATCH, SETTLE_PATCH
    from coord.workflows._runtime.common import (
        InvalidInput,
        decode_input,
        decode_json,
        park,
        signal_if_running,
        upsert_search_attributes,
    )
    from coord.workflows._runtime.fan_out import FanOut
    from coord.workflows._runtime.patches import patched

M = TypeVar("M", bound=BaseModel)
JSON_PLAIN = {"encoding": b"json/plain"}


def decoded(model: type[M], raw: RawValue, source: str) -> M | Undecodable:
    """`model` from a signal's raw argument, or why it is not one and what it carried."""
    try:
        return decode_input(model, raw, source)
    except InvalidInput as error:
        return Undecodable(str(error), error.raw)


def named_envelope(raw: RawValue) -> EventEnvelope | Undecodable:
    """An acknowledged publish's envelope, which must name its event's id: the publisher needs
    it to tell a duplicate, and a validator may not draw a random one (it changes nothing)."""
    try:
        data = decode_json(raw, "event")
    except InvalidInput as error:
        return Undecodable(str(error), error.raw)
    header = data.get("event") if isinstance(data, dict) else None
    if not isinstance(header, dict) or not header.get("id"):
        why = "event.event.id: an acknowledged publish names its event's id (a retry reuses it)"
        return Undecodable(why, data)
    try:
        return parse_model(EventEnvelope, data, "event")
    except SpecError as error:
        return Undecodable(str(error), data)


def acked_event(raw: RawValue, model: ChainModel, input_error: str | None) -> EventEnvelope:
    """The acknowledged publish's event, if the chain takes it now; else a typed failure whose
    message is one line saying why (the chain's input is invalid, the event does not validate,
    the chain has ended or is closing, or the intake would reject it)."""
    if input_error:
        raise failure(FailureType.INVALID_INPUT, input_error)
    envelope = named_envelope(raw)
    if isinstance(envelope, Undecodable):
        raise failure(FailureType.INVALID_ENVELOPE, envelope.reason)
    refusal = model.refusal(envelope)
    if refusal is not None:
        raise failure(refusal.kind, refusal.reason)
    return envelope


def json_text(signal: RawValue) -> str | None:
    """The JSON text a signal carried, when it is plain JSON and nothing else (no surplus
    arguments folded in, no other encoding)."""
    if dict(signal.payload.metadata) != JSON_PLAIN:
        return None
    try:
        return signal.payload.data.decode()
    except UnicodeDecodeError:
        return None


class WorkflowRun:
    """The model's `RunContext` in a workflow: its clock, history, recorded versions and payload
    converter."""

    def now(self) -> datetime:
        return workflow.now()

    def history_length(self) -> int:
        return workflow.info().get_current_history_length()

    def continue_as_new_suggested(self) -> bool:
        return workflow.info().is_continue_as_new_suggested()

    def __init__(self, on: object | None = None) -> None:
        """`on`: the workflow instance, when made in its `__init__` (`_runtime.patches`)."""
        self._on = on

    def patched(self, patch: str) -> bool:
        """Answered by the run's bundle when it covers `patch` (`_runtime.patches`)."""
        return patched(patch, on=self._on)

    def decode(self, text: str) -> EventEnvelope | Undecodable:
        """As the signal would have been decoded when it came: the same converter, the text as
        the signal carried it."""
        signal = RawValue(Payload(metadata=JSON_PLAIN, data=text.encode()))
        return decoded(EventEnvelope, signal, "event")


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

    def flush(self) -> None:
        """Sends what the model decided, in its order: parkings and forwards in the
        background, the status at once. Called after each hand-off to the model, in the same
        workflow step, so its sends go out where they always did."""
        for send in self._model.outbox.take():
            self._send(send)

    async def park_now(self) -> None:
        """As `flush`, a parking awaited here: a run's own failure, whose slot the run holds
        until it is parked."""
        for send in self._model.outbox.take():
            if isinstance(send, Parking):
                await park_letter(send)
            else:
                self._send(send)

    def upsert_status(self) -> None:
        upsert_search_attributes(self._model.status_attributes())

    def _send(self, send: Send) -> None:
        if isinstance(send, Parking):
            extra = {"correlation_id": self._model.record.state.correlation_id}
            workflow.logger.warning("parked %s: %s", send.failure_type, send.message, extra=extra)
            self._start(park_letter(send))
        elif isinstance(send, Forward):
            for listener in send.listeners:
                self._start(self._forward(listener, send.envelope, send.signal))
        else:
            upsert_search_attributes(send.attributes)

    async def _forward(self, listener: str, envelope: EventEnvelope, signal: str) -> None:
        """A listener that has ended is dropped; the event stays in this chain's log."""
        event = envelope.model_dump(mode="json")
        await self.fan_out.room(json_size(event))
        if not await signal_if_running(listener, signal, event):
            self._model.detach(listener)

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        counted_now = patched(SETTLE_PATCH)
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
