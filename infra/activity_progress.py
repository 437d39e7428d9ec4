"""What a workflow's running agents last said they are doing, read from the server when someone
asks (`coord plan state`, `plan start --wait`, the Python API).

Agents report progress through their activity's heartbeat details (`AgentContext.progress`);
only the server holds those, with each pending activity's attempt and last failure. Reading them
here, on the reader's side, costs the workflow's history nothing: a plan that polled them itself
added a timer and a local activity every `progress_interval` for as long as its agents ran, and
hit the server's limit on history events after hours, whatever its work."""

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from coord.models.mesh.agents import AgentProgress
from coord.models.plan.spec import MAX_NOTES, ActivityProgress


async def pending_progress(client: Client, workflow_id: str) -> list[ActivityProgress]:
    """Each pending activity of `workflow_id` (one waiting to retry included): its latest
    progress summary, its attempt and its last failure. None when the workflow is not found."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return []
        raise
    pending = described.raw_description.pending_activities
    return [await _progress_of(client, info) for info in pending]


async def _progress_of(client: Client, info: PendingActivityInfo) -> ActivityProgress:
    details = await _decoded(client, info.heartbeat_details.payloads)
    return ActivityProgress(
        activity_id=info.activity_id,
        progress=_progress(details),
        attempt=max(info.attempt, 1),
        last_failure=info.last_failure.message[:MAX_NOTES] or None,
    )


async def _decoded(client: Client, payloads: Sequence[Any]) -> list[Any]:
    """The heartbeat details as values; none when they are not ours to read (an activity of
    another kind may heartbeat in any encoding)."""
    if not payloads:
        return []
    try:
        return await client.data_converter.decode(payloads)
    except Exception:  # any converter's failure means the same: not our shape
        return []


def _progress(details: list[Any]) -> str | None:
    if not details:
        return None
    try:
        return AgentProgress.model_validate(details[0]).progress
    except ValidationError:
        return None
