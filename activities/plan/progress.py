"""The progress reader as an activity, for the plans that poll it: those started before plans
stopped polling (`TaskGraph`'s `plan-progress-read-on-demand` patch) still read their agents'
progress every `progress_interval` through it, until they end. Plans started since never call
it; whoever wants their progress reads it from the server (`coord.infra.activity_progress`)."""

from temporalio import activity
from temporalio.client import Client

from coord.infra.activity_progress import pending_progress
from coord.models import calls as refs
from coord.models.plan.spec import ActivityProgress


class PlanProgressReader:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=refs.PLAN_PROGRESS.name)
    async def plan_progress(self, workflow_id: str) -> list[ActivityProgress]:
        """Each pending activity of `workflow_id`: its latest progress summary, its attempt and
        its last failure (none when the workflow is not found)."""
        return await pending_progress(self._client, workflow_id)
