"""Deliveries that need a client: parking dead letters and replaying them to their targets."""

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from models.dlq import DLQ_WORKFLOW_ID, DeadLetter, Redelivery


def dlq_workflow_id(task_queue: str) -> str:
    """One queue per task queue: `dead-letter-queue` for the default one."""
    return DLQ_WORKFLOW_ID if task_queue == "coordinator" else f"{DLQ_WORKFLOW_ID}-{task_queue}"


async def park_dead_letter(client: Client, letter: DeadLetter, task_queue: str) -> str:
    """Signal-with-start, so the queue exists the first time something is parked."""
    workflow_id = dlq_workflow_id(task_queue)
    await client.start_workflow(
        "DeadLetterQueue",
        None,
        id=workflow_id,
        task_queue=task_queue,
        start_signal="park",
        start_signal_args=[letter.model_dump(mode="json")],
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary="Dead-letter queue: investigate, fix, replay, archive",
    )
    return workflow_id


class Delivery:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name="park_dead_letter")
    async def park(self, letter: DeadLetter) -> str:
        return await park_dead_letter(self._client, letter, activity.info().task_queue)

    @activity.defn(name="redeliver")
    async def redeliver(self, redelivery: Redelivery) -> None:
        """To a chain's agent (the chain runs it again and continues from there), or as an event
        to its workflow."""
        handle = self._client.get_workflow_handle(redelivery.target_workflow)
        event = redelivery.event.model_dump(mode="json")
        try:
            if redelivery.target_agent:
                rerun = {"subscription": redelivery.target_agent, "event": event}
                await handle.signal("rerun", rerun)
            else:
                await handle.signal("event", event)
        except RPCError as error:
            raise ApplicationError(
                f"{redelivery.target_workflow} cannot take it: {error.message}",
                type="target_unavailable",
                non_retryable=True,
            ) from None
