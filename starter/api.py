"""The Python API for scripts; the CLI is a thin layer over it."""

from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from infra.logs import get_logger
from infra.temporal import task_queue
from models.chain import (
    ChainInput,
    ChainSpec,
    ChainState,
    ChainStatus,
    TimelineEntry,
    chain_workflow_id,
)
from models.envelope import EventEnvelope
from models.saga import SagaSpec, SagaState, SagaStatus, saga_workflow_id
from workflows import search_attributes
from workflows.chain import ReactiveChain
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


class ChainUnavailable(RuntimeError):
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
        raise ChainUnavailable(
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
        raise ChainUnavailable("the event has no correlation_id, so it belongs to no chain")
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
        raise await _undeliverable(client, correlation_id, envelope, error) from None
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
    client: Client, correlation_id: str, envelope: EventEnvelope, error: Exception
) -> ChainUnavailable:
    try:
        description = await chain_handle(client, correlation_id).describe()
    except RPCError:
        return ChainUnavailable(
            f"no chain for correlation id {correlation_id!r}; start one with "
            "`coord chain start SPEC --correlation-id ...` or publish with --spec"
        )
    status = description.status.name.lower() if description.status else "unknown"
    log.warning(
        "event for an ended chain rejected",
        correlation_id=correlation_id,
        chain_status=status,
        envelope=envelope.model_dump(mode="json"),
    )
    return ChainUnavailable(
        f"the chain for correlation id {correlation_id!r} has ended ({status}); "
        f"event {envelope.event.id} ({envelope.event.type}) was not delivered: {error}"
    )


async def chain_state(client: Client, correlation_id: str) -> ChainState:
    handle = chain_handle(client, correlation_id)
    if await _closed_with_result(handle):
        try:
            return await handle.result()
        except WorkflowFailureError:
            pass
    return await handle.query(ReactiveChain.state)


async def chain_timeline(client: Client, correlation_id: str) -> list[TimelineEntry]:
    return await chain_handle(client, correlation_id).query(ReactiveChain.timeline)


async def chain_running(client: Client, correlation_id: str) -> bool:
    description = await chain_handle(client, correlation_id).describe()
    return description.status == WorkflowExecutionStatus.RUNNING


async def close_chain(client: Client, correlation_id: str) -> None:
    await chain_handle(client, correlation_id).signal(ReactiveChain.close)
