"""What the server says of a task queue: who polls it and what waits on it."""

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
