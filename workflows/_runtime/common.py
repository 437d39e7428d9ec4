"""Helpers shared by the workflows."""

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, RetryState

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.dlq.letter import DeadLetter, failure_times
    from coord.models.events.envelope import EventEnvelope
    from coord.models.mesh.apart import joined
    from coord.models.mesh.attempts import AttemptTime, ended_at
    from coord.models.plan.spec import TaskError
    from coord.models.wire import contract
    from coord.models.wire.sizes import bounded_details, preview
    from coord.models.wire.specs import (
        MAX_JSON_DEPTH,
        SpecError,
        describe_validation_error,
        json_depth,
        parse_model,
    )
    from coord.models.wire.versions import (
        DEAD_LETTER_PATCH,
        REFUSED_START_FOUND_PATCH,
        SIGNALS_RUN_TO_THE_END_PATCH,
    )
    from coord.workflows._runtime import calls
    from coord.workflows._runtime.patches import patched

PLAIN_JSON = b"json/plain"
"""The encoding of a payload the converter wrote as JSON."""

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


if TYPE_CHECKING:
    PlainInput = Any
else:
    PlainInput = RawValue
"""The type of workflow and handler parameters: clients send any plain JSON (the Temporal CLI,
typed starters passing dicts), the worker hands over the raw payload for `decode_input`. The SDK
reads the runtime annotation (RawValue); type checkers see what callers may pass."""

NO_INPUT: PlainInput = RawValue(Payload())
"""The default of every workflow and handler parameter: a start or signal sent without input then
reaches our code, which refuses it, instead of failing the workflow task with a TypeError."""


def show_details(text: str) -> None:
    """The run's current details, as the UI shows them: bounded (`bounded_details`)."""
    workflow.set_current_details(bounded_details(text))


class InvalidInput(SpecError):
    """A workflow input or handler argument that does not decode or validate. `raw` is what it
    carried, fit to record and park: its JSON, or its text when that is not JSON or nests too
    deep to carry."""

    def __init__(self, message: str, raw: Any) -> None:
        super().__init__(message)
        self.raw = raw


def decode_json(value: RawValue, source: str) -> Any:
    """The plain JSON a workflow input or handler argument carries. Workflows and handlers take
    their arguments raw and decode them here, so one that does not even decode (nested too deep,
    not JSON) is refused like one that does not validate, instead of being dropped by the SDK
    (signals) or failing the workflow task (inputs)."""
    if value is NO_INPUT:
        raise InvalidInput(f"{source}: no input given", None)
    try:
        decoded = workflow.payload_converter().from_payload(value.payload)
    except Exception as error:  # any converter failure: the payload is the sender's fault
        reason = describe_validation_error(error) if isinstance(error, ValidationError) else error
        raise InvalidInput(f"{source}: cannot be decoded: {reason}", _text(value)) from None
    if isinstance(decoded, dict) and contract.PAYLOAD_UNAVAILABLE in decoded:
        unavailable = _unavailable(decoded)
        if unavailable is not None:
            raise InvalidInput(f"{source}: {unavailable}", decoded)
    sent = value.payload.metadata.get(contract.ARGUMENT_COUNT_METADATA)
    if sent is not None:
        message = f"{source}: expected one input, got {sent.decode()}"
        raise InvalidInput(message, decoded if _plain_json(decoded) else _text(value))
    return decoded


def _unavailable(decoded: dict[str, Any]) -> str | None:
    """What is wrong, when `decoded` is what the payload store put in place of an object it
    cannot read (infra/payload_store.py): said as that, not as the fields it lacks."""
    if len(decoded) != 1:
        return None
    marker = decoded[contract.PAYLOAD_UNAVAILABLE]
    details = marker if isinstance(marker, dict) else {}
    return (
        f"{contract.PAYLOAD_UNAVAILABLE}: stored payload {details.get('sha256', '?')} cannot be "
        f"read: {details.get('reason', 'no reason given')}; likely cause: the client that sent "
        "it and this worker use different payload stores (COORD_PAYLOAD_STORE)"
    )


def decode_input(model: type[M], value: RawValue, source: str, context: Any = None) -> M:
    """`model` from a raw argument (validated with `context`); raises InvalidInput with what to
    record and park."""
    decoded = decode_json(value, source)
    try:
        return parse_model(model, decoded, source, context=context)
    except SpecError as error:
        raise InvalidInput(str(error), decoded if _plain_json(decoded) else _text(value)) from None


def decode_joined(model: type[M], value: RawValue, source: str) -> M:
    """`decode_input` of a start that may come with its large payloads sent apart (a
    `ChainRun`'s, coord.models.mesh.apart): its several arguments, which
    `SurplusStartArguments` folded into the one, are joined back into the one input first.
    Ones that do not join are refused as any surplus is, naming the count, with why."""
    sent = value.payload.metadata.get(contract.ARGUMENT_COUNT_METADATA)
    if sent is None:
        return decode_input(model, value, source)
    try:
        document = joined(workflow.payload_converter().from_payload(value.payload))
    except Exception as error:  # any decoding failure or misfit: the sender's fault
        message = f"{source}: expected one input, got {sent.decode()}, which do not join: {error}"
        raise InvalidInput(message, _text(value)) from None
    try:
        return parse_model(model, document, source)
    except SpecError as error:
        raise InvalidInput(str(error), document) from None


def decode_plain(model: type[M], value: RawValue, source: str) -> M:
    """`decode_input` for a handler taking a flood: a plain JSON payload is validated straight
    from its bytes, in one pass of pydantic's JSON parser (the converter's own), with no Python
    dict built between; anything else, or anything that does not validate, takes
    `decode_input`, which says why."""
    payload = value.payload
    plain = payload.metadata.get("encoding") == PLAIN_JSON
    if plain and contract.ARGUMENT_COUNT_METADATA not in payload.metadata:
        try:
            return model.model_validate_json(payload.data)
        except ValidationError:
            pass
    return decode_input(model, value, source)


UNKNOWN_SIGNAL_ARGUMENTS = 3
"""The arguments of a signal no handler takes that are kept with it (each previewed)."""


def unknown_signal(name: str, args: Sequence[RawValue], workflow_kind: str) -> tuple[str, Any]:
    """Why a signal no handler of the workflow (`workflow_kind`: "a chain", say) takes is
    refused, and what it carried: the JSON of its first arguments, each previewed (`preview`),
    or its text when it is not JSON."""
    carried = [carried_by(arg, f"signal {name}") for arg in args[:UNKNOWN_SIGNAL_ARGUMENTS]]
    return f"signal {name!r}: {workflow_kind} takes no such signal", carried


def carried_by(value: RawValue, source: str) -> Any:
    """What a refused input carried, fit to record and park: its JSON, or its text when it is
    not JSON, previewed (`preview`)."""
    try:
        decoded = decode_json(value, source)
    except InvalidInput as error:
        return preview(error.raw)
    # binary input decodes to bytes, which only its text can record
    return preview(decoded if _plain_json(decoded) else _text(value))


def decode_start(model: type[M], value: RawValue, source: str) -> tuple[M | None, str | None]:
    """`model` from a workflow's start input, decoded in its init so that queries answer from
    the first task on; or, when it does not decode or validate, the error its run fails with
    (nothing may fail the workflow task)."""
    try:
        return decode_input(model, value, source), None
    except SpecError as error:
        return None, str(error)


def _text(value: RawValue) -> str:
    return value.payload.data.decode(errors="replace")


def _plain_json(value: Any) -> bool:
    """Whether `value` can be recorded as is: JSON, shallow enough that the records carrying it
    stay decodable (binary and protobuf payloads decode to other things)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return json_depth(value) <= MAX_JSON_DEPTH


def reported(error: ActivityError) -> dict[str, Any] | None:
    """What `run_agent` reported with its failure, in its first detail: its attempt, and the
    run's attempts' times (coord.models.mesh.attempts); None when it reported nothing."""
    cause = error.cause
    detail = cause.details[0] if isinstance(cause, ApplicationError) and cause.details else None
    return detail if isinstance(detail, dict) else None


def failed_at(error: ActivityError) -> datetime | None:
    """When the run's last attempt failed, as its worker reported it (None: not reported)."""
    return ended_at(reported(error))


def attempts(error: ActivityError, retry_policy: RetryPolicy) -> int:
    """The attempt `run_agent` reported with its failure. A timeout is Temporal's, so the agent
    could not report it: when the server gave up because the policy's attempts were used up,
    that maximum is the count; 1 when nothing says more."""
    detail = reported(error)
    if detail is not None and isinstance(detail.get("attempt"), int):
        return int(detail["attempt"])
    if error.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED and retry_policy.maximum_attempts:
        return retry_policy.maximum_attempts
    return 1


async def park(
    failure_type: str,
    message: str,
    *,
    event: EventEnvelope | None = None,
    raw: Any = None,
    target_agent: str | None = None,
    attempt_count: int = 1,
    failed_attempts: Mapping[int, AttemptTime] | None = None,
    replay: Literal["signal", "rerun", "run_agent"] = "signal",
    idempotency_key: str | None = None,
    inputs: dict[str, Any] | None = None,
    causation_depth: int | None = None,
    correlation_id: str | None = None,
    task_queue: str | None = None,
) -> None:
    """Hand what this workflow could not handle to the dead-letter queue; nothing is dropped.
    `correlation_id`: the workflow's, for a letter without an event (`DeadLetter`).
    `task_queue`: where the parking activity is served, when not on this workflow's own queue
    (an agent ledger's worker runs no activity).
    `failed_attempts`: a failed agent run's attempts as its worker reported them, which date
    the letter's first and last failure (`failure_times`); else both are now.

    Runs recorded before the queue existed replay without it (the `dead-letter-queue` patch)."""
    if not patched(DEAD_LETTER_PATCH):
        return
    now = workflow.now()
    first_failed_at, last_failed_at = failure_times(failed_attempts or {}, now)
    letter = DeadLetter(
        event=event,
        raw=raw,
        target_workflow=workflow.info().workflow_id,
        target_agent=target_agent,
        failure_type=failure_type,
        message=message,
        attempts=attempt_count,
        first_failed_at=first_failed_at,
        last_failed_at=last_failed_at,
        replay=replay,
        idempotency_key=idempotency_key,
        inputs=inputs or {},
        causation_depth=causation_depth,
        correlation_id=correlation_id,
    )
    await calls.execute(
        refs.PARK_DEAD_LETTER,
        letter,
        start_to_close_timeout=timedelta(seconds=30),
        summary=f"dead-letter: {failure_type}",
        task_queue=task_queue,
    )


def upsert_search_attributes(values: contract.SearchValues) -> None:
    workflow.upsert_search_attributes([key.value_set(value) for key, value in values.items()])


def upsert_unwritten(values: contract.SearchValues) -> None:
    """Those of `values` the run does not carry yet (as started, or as last upserted), if any:
    an upsert is a command, and a history event."""
    current = workflow.info().typed_search_attributes
    unwritten = {key: value for key, value in values.items() if current.get(key) != value}
    if unwritten:
        upsert_search_attributes(unwritten)


def refused_start(pattern: contract.Pattern, message: str) -> ApplicationError:
    """The failure of a run whose spec is refused (`invalid_spec`, naming the field), found as
    failed by its pattern first (REFUSED_START_FOUND_PATCH): its starter wrote `running`, or,
    started as plain JSON, it carries no search attribute at all."""
    if patched(REFUSED_START_FOUND_PATCH):
        failed = {contract.COORD_PATTERN: pattern.value, contract.COORD_STATUS: "failed"}
        upsert_unwritten(failed)
    return contract.failure(contract.FailureType.INVALID_SPEC, message, non_retryable=True)


async def signal_if_running(workflow_id: str, signal: str, arg: Any) -> bool:
    """Signals another workflow; False when it does not run (never started, or ended), which
    the sender treats as that workflow's business, never as its own failure.

    A cancel of the awaiting task does not reach the signal: the SDK would send the signal's
    cancel even when its outcome has already arrived in the same workflow task, and Core's
    state machine fails that task (`Invalid transition in state machine`), which is how an
    aggregator completing on its last event while its chain attach resolved got stuck."""
    sending = _signal(workflow_id, signal, arg)
    if patched(SIGNALS_RUN_TO_THE_END_PATCH):
        return await asyncio.shield(sending)
    return await sending


async def _signal(workflow_id: str, signal: str, arg: Any) -> bool:
    try:
        await workflow.get_external_workflow_handle(workflow_id).signal(signal, arg)
    except ApplicationError:
        return False
    return True


async def signal_chain(correlation_id: str, signal: str, arg: Any) -> bool:
    """Signals the chain of a correlation; False when it has none running."""
    return await signal_if_running(contract.chain_workflow_id(correlation_id), signal, arg)


async def uncancellable(awaitable: Awaitable[T], on_cancel: Callable[[], None] | None = None) -> T:
    """Run to the end even if the workflow is cancelled (again) meanwhile. A cancel landing in
    the same workflow task as the end does not replace the outcome; `on_cancel` is told."""
    task = asyncio.ensure_future(awaitable)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if on_cancel is not None:
                on_cancel()
            if task.done():
                return task.result()


async def ending_with(awaitable: Awaitable[T], leave: Callable[[], Awaitable[None] | None]) -> T:
    """`await awaitable`, then `leave()` however it ended, as a `finally` would, unless the
    coroutine is being closed: a worker that drops a workflow instance without evicting it
    (its shutdown) closes its coroutines outside the workflow's event loop (GeneratorExit),
    where no workflow call can be made and nothing has ended in a workflow task."""
    closing = False
    try:
        return await awaitable
    except GeneratorExit:
        closing = True
        raise
    finally:
        if not closing and (left := leave()) is not None:
            await left


def task_error(error: ActivityError) -> TaskError:
    """How an activity failed for good, as the record shows it: the failure type, and the
    agent's own words (without the type `str()` puts in front)."""
    innermost: BaseException = error
    while innermost.__cause__ is not None:
        innermost = innermost.__cause__
    message = innermost.message if isinstance(innermost, FailureError) else str(innermost)
    return TaskError(type=contract.failure_type_of(error), message=message)
