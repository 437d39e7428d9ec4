"""What the server says of a task queue: who polls it and what waits on it."""

from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeTaskQueueResponse,
)
from temporalio.client import Client


async def describe_queue(
    client: Client,
    queue: str,
    kind: "TaskQueueType.ValueType",
    *,
    pollers: bool = False,
    stats: bool = False,
) -> DescribeTaskQueueResponse:
    """The server's description of `queue` for its `kind` of tasks (workflow or activity): the
    workers polling it, and with `pollers` and `stats` what it reports of them and its
    backlog."""
    return await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=kind,
            report_pollers=pollers,
            report_stats=stats,
        )
    )


POLLED_WITHIN = timedelta(seconds=90)
"""A live worker asks its queue again at least once a minute (a poll waits up to a minute for a
task, and the server records when it began); one last seen longer ago is gone, though the
server lists it for some minutes more."""


async def task_queue_pollers(client: Client, task_queue: str) -> set[str]:
    """Identities of the workers that polled the queue within `POLLED_WITHIN`, for workflow or
    activity tasks."""
    since = datetime.now(UTC) - POLLED_WITHIN
    identities: set[str] = set()
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        response = await describe_queue(client, task_queue, kind)
        identities.update(
            poller.identity
            for poller in response.pollers
            if not poller.HasField("last_access_time")
            or poller.last_access_time.ToDatetime(UTC) >= since
        )
    return identities
