"""Reading a plan's running agents from outside it: what they last said they are doing.

Agents report progress through their activity's heartbeat details (`AgentContext.progress`);
only the server holds those, so the plan asks it (a describe, every `progress_interval`, as a
local activity) instead of its agents signalling it: a thousand progress calls cost the plan's
history nothing."""

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from coord.models.agents import AgentProgress
from coord.models.contract import PLAN_PROGRESS_ACTIVITY
from coord.models.plan import MAX_NOTES, ActivityProgress


class PlanProgressReader:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=PLAN_PROGRESS_ACTIVITY)
    async def plan_progress(self, workflow_id: str) -> list[ActivityProgress]:
        """Each pending activity of `workflow_id`: its latest progress summary, its attempt and
        its last failure (an activity waiting to retry is pending too). None when the workflow
        is not found."""
        try:
            described = await self._client.get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        pending = described.raw_description.pending_activities
        return [await self._progress_of(info) for info in pending]

    async def _progress_of(self, info: PendingActivityInfo) -> ActivityProgress:
        details = await self._decoded(info.heartbeat_details.payloads)
        return ActivityProgress(
            activity_id=info.activity_id,
            progress=_progress(details),
            attempt=max(info.attempt, 1),
            last_failure=info.last_failure.message[:MAX_NOTES] or None,
        )

    async def _decoded(self, payloads: Sequence[Any]) -> list[Any]:
        """The heartbeat details as values; none when they are not ours to read (an activity
        of another kind may heartbeat in any encoding)."""
        if not payloads:
            return []
        try:
            return await self._client.data_converter.decode(payloads)
        except Exception:  # any converter's failure means the same: not our shape
            return []


def _progress(details: list[Any]) -> str | None:
    if not details:
        return None
    try:
        return AgentProgress.model_validate(details[0]).progress
    except ValidationError:
        return None
