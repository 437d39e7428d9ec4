"""The dead-letter queue: list, count, replay with a fix, archive."""

from collections.abc import Awaitable
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.delivery import dlq_workflow_id
from infra.temporal import task_queue
from models.dlq import ArchiveRequest, DlqCounts, DlqEntry, DlqSelection, ReplayRequest
from starter.api.common import Undeliverable
from workflows.common import failure_message
from workflows.dlq import DeadLetterQueue


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
