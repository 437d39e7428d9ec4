"""Sagas: start, wait, read the coordinator record, cancel."""

from typing import Any

from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError

from infra.temporal import task_queue
from models.saga import SagaSpec, SagaState, SagaStatus, saga_workflow_id
from starter.api.common import closed_with_result
from workflows import search_attributes
from workflows.saga import Saga


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
    if await closed_with_result(handle):
        return await saga_outcome(handle)
    return await handle.query(Saga.state)


async def cancel_saga(client: Client, saga_id: str) -> None:
    await saga_handle(client, saga_id).cancel()
