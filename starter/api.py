"""The Python API for scripts; the CLI is a thin layer over it."""

import contextlib
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.delivery import dlq_workflow_id, park_dead_letter
from infra.logs import get_logger
from infra.temporal import task_queue
from models.aggregator import AggregatorSpec, AggregatorState, AggregatorStatus
from models.chain import (
    ChainInput,
    ChainSpec,
    ChainState,
    ChainStatus,
    TimelineEntry,
    chain_workflow_id,
)
from models.dlq import ArchiveRequest, DeadLetter, DlqCounts, DlqEntry, DlqSelection, ReplayRequest
from models.envelope import EventEnvelope
from models.saga import SagaSpec, SagaState, SagaStatus, saga_workflow_id
from workflows import search_attributes
from workflows.aggregator import Aggregator
from workflows.chain import ReactiveChain
from workflows.common import failure_message
from workflows.dlq import DeadLetterQueue
from workflows.saga import Saga

log = get_logger("coord.api")


def saga_summary(spec: SagaSpec) -> str:
    steps = " → ".join(step.name for step in spec.steps)
    return f"Saga {spec.name} ({spec.saga_id}): {steps}"


async def start_saga(
    client: Client, spec: SagaSpec, *, queue: str | None = None
) -> WorkflowHandle[Any, SagaState]:
    return await client.start_workflow(
        Saga.run,
        spec.model_dump(mode="json"),
        id=spec.workflow_id,
        task_queue=queue or task_queue(),
        static_summary=saga_summary(spec),
        static_details=spec.description or None,
        search_attributes=search_attributes.as_start_attributes(
            search_attributes.coordination_attributes(
                correlation_id=spec.correlation_id, pattern="saga", status=SagaStatus.PENDING.value
            )
        ),
    )


def saga_handle(client: Client, saga_id: str) -> WorkflowHandle[Any, SagaState]:
    return client.get_workflow_handle_for(Saga.run, saga_workflow_id(saga_id))


async def saga_outcome(handle: WorkflowHandle[Any, SagaState]) -> SagaState:
    """Wait for the saga to end and return its final record, whether it completed or not."""
    try:
        return await handle.result()
    except WorkflowFailureError as failure:
        cause = failure.cause
        if isinstance(cause, ApplicationError) and cause.details:
            return SagaState.model_validate(cause.details[0])
        return await handle.query(Saga.state)


async def saga_state(client: Client, saga_id: str) -> SagaState:
    """Closed sagas answer from their result, so no worker is needed to read them."""
    handle = saga_handle(client, saga_id)
    if await _closed_with_result(handle):
        return await saga_outcome(handle)
    return await handle.query(Saga.state)


async def _closed_with_result(handle: WorkflowHandle[Any, Any]) -> bool:
    description = await handle.describe()
    return description.status in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED)


async def cancel_saga(client: Client, saga_id: str) -> None:
    await saga_handle(client, saga_id).cancel()


class Undeliverable(RuntimeError):
    """The event could not be delivered; the message says why and what to do."""


def chain_summary(spec: ChainSpec, correlation_id: str) -> str:
    return f"Chain {spec.name} for {correlation_id}"


def chain_handle(client: Client, correlation_id: str) -> WorkflowHandle[Any, ChainState]:
    return client.get_workflow_handle_for(ReactiveChain.run, chain_workflow_id(correlation_id))


def _chain_start_options(spec: ChainSpec, correlation_id: str, queue: str | None) -> dict[str, Any]:
    return {
        "id": chain_workflow_id(correlation_id),
        "task_queue": queue or task_queue(),
        "static_summary": chain_summary(spec, correlation_id),
        "static_details": spec.description or None,
        "search_attributes": search_attributes.as_start_attributes(
            search_attributes.coordination_attributes(
                correlation_id=correlation_id, pattern="chain", status=ChainStatus.RUNNING.value
            )
        ),
        "id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE,
    }


def _chain_input(spec: ChainSpec, correlation_id: str) -> dict[str, Any]:
    return ChainInput(spec=spec, correlation_id=correlation_id).model_dump(mode="json")


async def start_chain(
    client: Client, spec: ChainSpec, correlation_id: str, *, queue: str | None = None
) -> WorkflowHandle[Any, ChainState]:
    try:
        return await client.start_workflow(
            ReactiveChain.run,
            _chain_input(spec, correlation_id),
            **_chain_start_options(spec, correlation_id, queue),
        )
    except WorkflowAlreadyStartedError:
        raise Undeliverable(
            f"a chain for correlation id {correlation_id!r} already exists (running or ended)"
        ) from None


async def publish(
    client: Client,
    envelope: EventEnvelope,
    *,
    spec: ChainSpec | None = None,
    queue: str | None = None,
) -> str:
    """Deliver an event to its correlation's chain. With a spec the chain is started if needed
    (signal-with-start), so an event published before the chain exists is not lost."""
    correlation_id = envelope.event.correlation_id
    if not correlation_id:
        raise Undeliverable("the event has no correlation_id, so it belongs to no chain")
    event = envelope.model_dump(mode="json")
    try:
        if spec is None:
            await chain_handle(client, correlation_id).signal("event", event)
        else:
            await client.start_workflow(
                ReactiveChain.run,
                _chain_input(spec, correlation_id),
                start_signal="event",
                start_signal_args=[event],
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                **_chain_start_options(spec, correlation_id, queue),
            )
    except (RPCError, WorkflowAlreadyStartedError) as error:
        missing = (
            f"no chain for correlation id {correlation_id!r}; start one with "
            "`coord chain start SPEC --correlation-id ...` or publish with --spec"
        )
        raise await _undeliverable(
            client, chain_workflow_id(correlation_id), envelope, error, missing
        ) from None
    return chain_workflow_id(correlation_id)


async def broadcast(client: Client, envelope: EventEnvelope) -> list[str]:
    """Deliver a topic-wide event (an alert, say) to every running chain; each takes it as its
    own correlation's. Returns the chains reached."""
    reached = []
    event = envelope.model_dump(mode="json")
    event["event"]["correlation_id"] = None
    query = f"{search_attributes.COORD_PATTERN.name} = 'chain' AND ExecutionStatus = 'Running'"
    async for execution in client.list_workflows(query):
        await client.get_workflow_handle(execution.id).signal("event", event)
        reached.append(execution.id)
    return reached


async def _undeliverable(
    client: Client, workflow_id: str, envelope: EventEnvelope, error: Exception, missing: str
) -> Undeliverable:
    """Why an event could not be delivered: nothing there, or it has ended (then it is logged
    with the whole event, so nothing is lost silently)."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return Undeliverable(missing)
    status = description.status.name.lower() if description.status else "unknown"
    message = (
        f"{_target_name(workflow_id)} has ended ({status}); "
        f"event {envelope.event.id} ({envelope.event.type}) was not delivered: {error}"
    )
    now = datetime.now(UTC)
    letter = DeadLetter(
        event=envelope,
        target_workflow=workflow_id,
        failure_type="target_ended",
        message=message,
        first_failed_at=now,
        last_failed_at=now,
    )
    queue = description.task_queue or task_queue()
    dlq = await park_dead_letter(client, letter, queue)
    log.warning(
        "event for an ended workflow parked", workflow_id=workflow_id, dead_letter_queue=dlq
    )
    return Undeliverable(f"{message}; parked in {dlq}")


def _target_name(workflow_id: str) -> str:
    if workflow_id.startswith("chain-"):
        return f"the chain for correlation id {workflow_id.removeprefix('chain-')!r}"
    return workflow_id


async def deliver(
    client: Client,
    envelope: EventEnvelope,
    *,
    spec: ChainSpec | AggregatorSpec | None = None,
    to: str | None = None,
    queue: str | None = None,
) -> list[str]:
    """Deliver an event where it belongs: to one workflow (`to`), or to its correlation's chain
    and every running aggregator scoped to that correlation. An aggregator spec starts that
    aggregator with the event (signal-with-start)."""
    if isinstance(spec, AggregatorSpec):
        return [await publish_to_aggregator(client, envelope, spec, queue=queue)]
    if to is not None:
        await _signal(client, to, envelope)
        return [to]
    correlation_id = envelope.event.correlation_id or ""
    targets = [wid for wid in await running_aggregators(client, correlation_id)]
    for workflow_id in targets:
        await _signal(client, workflow_id, envelope)
    try:
        targets.append(await publish(client, envelope, spec=spec, queue=queue))
    except Undeliverable:
        if not targets:
            raise
    return targets


async def _signal(client: Client, workflow_id: str, envelope: EventEnvelope) -> None:
    try:
        await client.get_workflow_handle(workflow_id).signal(
            "event", envelope.model_dump(mode="json")
        )
    except RPCError as error:
        raise await _undeliverable(
            client, workflow_id, envelope, error, f"no workflow {workflow_id!r}"
        ) from None


async def running_aggregators(client: Client, correlation_id: str) -> list[str]:
    query = (
        f"{search_attributes.COORD_PATTERN.name} = 'aggregator' AND ExecutionStatus = 'Running' "
        f"AND {search_attributes.CORRELATION_ID.name} = '{correlation_id}'"
    )
    return [execution.id async for execution in client.list_workflows(query)]


def _aggregator_start_options(spec: AggregatorSpec, queue: str | None) -> dict[str, Any]:
    scope = f" for {spec.correlation_id}" if spec.correlation_id else ""
    waits = ", ".join(slot.describe() for slot in spec.wait_for)
    return {
        "id": spec.workflow_id,
        "task_queue": queue or task_queue(),
        "static_summary": f"Aggregator {spec.aggregator_id}{scope}: waits for {waits}",
        "static_details": spec.description or None,
        "search_attributes": search_attributes.as_start_attributes(
            search_attributes.coordination_attributes(
                correlation_id=spec.correlation_id or spec.aggregator_id,
                pattern="aggregator",
                status=AggregatorStatus.WAITING.value,
            )
        ),
        "id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE,
    }


async def start_aggregator(
    client: Client, spec: AggregatorSpec, *, queue: str | None = None
) -> WorkflowHandle[Any, AggregatorState]:
    try:
        return await client.start_workflow(
            Aggregator.run, spec.model_dump(mode="json"), **_aggregator_start_options(spec, queue)
        )
    except WorkflowAlreadyStartedError:
        raise Undeliverable(f"{spec.workflow_id} already exists (running or ended)") from None


async def publish_to_aggregator(
    client: Client, envelope: EventEnvelope, spec: AggregatorSpec, *, queue: str | None = None
) -> str:
    """Signal-with-start: the first event starts the aggregator, and is never lost to a race."""
    try:
        await client.start_workflow(
            Aggregator.run,
            spec.model_dump(mode="json"),
            start_signal="event",
            start_signal_args=[envelope.model_dump(mode="json")],
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            **_aggregator_start_options(spec, queue),
        )
    except (RPCError, WorkflowAlreadyStartedError) as error:
        missing = f"no workflow {spec.workflow_id!r}"
        raise await _undeliverable(client, spec.workflow_id, envelope, error, missing) from None
    return spec.workflow_id


def aggregator_handle(client: Client, workflow_id: str) -> WorkflowHandle[Any, AggregatorState]:
    if not workflow_id.startswith("aggregator-"):
        workflow_id = f"aggregator-{workflow_id}"
    return client.get_workflow_handle_for(Aggregator.run, workflow_id)


async def cancel_aggregator(client: Client, workflow_id: str) -> None:
    await aggregator_handle(client, workflow_id).cancel()


async def aggregator_state(client: Client, workflow_id: str) -> AggregatorState:
    handle = aggregator_handle(client, workflow_id)
    if await _closed_with_result(handle):
        with contextlib.suppress(WorkflowFailureError):
            return await handle.result()
    return await handle.query(Aggregator.state)


async def chain_state(client: Client, correlation_id: str) -> ChainState:
    handle = chain_handle(client, correlation_id)
    if await _closed_with_result(handle):
        with contextlib.suppress(WorkflowFailureError):
            return await handle.result()
    return await handle.query(ReactiveChain.state)


async def chain_timeline(client: Client, correlation_id: str) -> list[TimelineEntry]:
    return await chain_handle(client, correlation_id).query(ReactiveChain.timeline)


async def chain_running(client: Client, correlation_id: str) -> bool:
    description = await chain_handle(client, correlation_id).describe()
    return description.status == WorkflowExecutionStatus.RUNNING


async def close_chain(client: Client, correlation_id: str) -> None:
    await chain_handle(client, correlation_id).signal(ReactiveChain.close)


def dlq_handle(client: Client, queue: str | None = None) -> WorkflowHandle[Any, None]:
    return client.get_workflow_handle_for(
        DeadLetterQueue.run, dlq_workflow_id(queue or task_queue())
    )


async def dlq_entries(
    client: Client, selection: DlqSelection | None = None, *, queue: str | None = None
) -> list[DlqEntry]:
    try:
        return await dlq_handle(client, queue).query(
            DeadLetterQueue.entries, selection or DlqSelection()
        )
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return []
        raise


async def dlq_counts(client: Client, *, queue: str | None = None) -> DlqCounts:
    return await dlq_handle(client, queue).query(DeadLetterQueue.counts)


async def dlq_replay(
    client: Client, request: ReplayRequest, *, queue: str | None = None
) -> list[DlqEntry]:
    return await _dlq_update(
        dlq_handle(client, queue).execute_update(DeadLetterQueue.replay, request)
    )


async def dlq_archive(
    client: Client, request: ArchiveRequest, *, queue: str | None = None
) -> list[DlqEntry]:
    return await _dlq_update(
        dlq_handle(client, queue).execute_update(DeadLetterQueue.archive, request)
    )


async def _dlq_update(update: Awaitable[list[DlqEntry]]) -> list[DlqEntry]:
    """A refused operation (nothing matches, say) becomes one clear error."""
    try:
        return await update
    except WorkflowUpdateFailedError as error:
        raise Undeliverable(f"dead-letter queue refused: {failure_message(error)}") from None
