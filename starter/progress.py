"""What a saga is doing while `coord saga start --wait` waits: read from the server alone (the
workflow's pending activities, its history and the task queue's pollers), so it also tells a
user when no worker is there to run anything."""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle

from coord.models.saga import SagaState
from coord.starter.api.common import NoWorker
from coord.starter.api.sagas import saga_outcome


async def task_queue_pollers(client: Client, task_queue: str) -> set[str]:
    """Identities of the workers that polled the queue recently, for workflow or activity
    tasks (the server forgets a poller a few minutes after its last poll)."""
    identities: set[str] = set()
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=kind,
            )
        )
        identities.update(poller.identity for poller in response.pollers)
    return identities


@dataclass(frozen=True)
class StepAttempt:
    """One attempt of a step or compensation, as the server records it."""

    step: str
    attempt: int
    next_retry: datetime | None
    last_failure: str | None

    def describe(self) -> str:
        text = f"{self.step}: attempt {self.attempt}"
        if self.last_failure:
            text += f" (last failure: {self.last_failure})"
        if self.next_retry:
            wait = max(0.0, (self.next_retry - datetime.now(UTC)).total_seconds())
            text += f", next retry at {self.next_retry:%H:%M:%S} (in {wait:.0f}s)"
        return text


async def activity_names(client: Client, handle: WorkflowHandle[Any, Any]) -> dict[str, str]:
    """Activity id -> the summary the saga gave it (the step, or `compensate: X`)."""
    names = {}
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            summary = event.user_metadata.summary
            activity_id = event.activity_task_scheduled_event_attributes.activity_id
            names[activity_id] = (
                client.data_converter.payload_converter.from_payload(summary, str)
                if summary.data
                else activity_id
            )
    return names


def step_attempt(pending: PendingActivityInfo, names: dict[str, str]) -> StepAttempt:
    return StepAttempt(
        step=names.get(pending.activity_id, pending.activity_type.name),
        attempt=pending.attempt,
        next_retry=(
            pending.next_attempt_schedule_time.ToDatetime(UTC)
            if pending.HasField("next_attempt_schedule_time")
            else None
        ),
        last_failure=pending.last_failure.message or None,
    )


async def saga_outcome_with_progress(
    client: Client,
    handle: WorkflowHandle[Any, SagaState],
    task_queue: str,
    report: Callable[[str], None],
    *,
    no_worker_timeout: float,
    interval: float = 1.0,
) -> SagaState:
    """The saga's final record; meanwhile `report` gets a line per new attempt or retry, and a
    warning when no worker polls the queue. NoWorker when none polled for `no_worker_timeout`
    seconds (the saga stays started: it runs once a worker polls)."""
    outcome = asyncio.ensure_future(saga_outcome(handle))
    shown: set[tuple[str, int, bool]] = set()
    idle_since: float | None = None
    loop = asyncio.get_running_loop()
    try:
        while not (await asyncio.wait({outcome}, timeout=interval))[0]:
            if await task_queue_pollers(client, task_queue):
                idle_since = None
            elif idle_since is None:
                idle_since = loop.time()
                report(
                    f"warning: no worker polls task queue {task_queue!r}; the saga waits for one "
                    "(start it with `coord worker`)"
                )
            elif loop.time() - idle_since > no_worker_timeout:
                raise NoWorker(
                    f"no worker polled task queue {task_queue!r} for {no_worker_timeout:g}s; "
                    f"{handle.id} stays started and runs once a worker polls (`coord worker`)"
                )
            pending = (await handle.describe()).raw_description.pending_activities
            names = await activity_names(client, handle) if pending else {}
            for attempt in (step_attempt(p, names) for p in pending):
                key = (attempt.step, attempt.attempt, attempt.next_retry is not None)
                if key not in shown:
                    shown.add(key)
                    report(attempt.describe())
        return outcome.result()
    finally:
        outcome.cancel()
