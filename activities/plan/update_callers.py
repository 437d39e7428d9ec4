"""Who sent a workflow update, as the server recorded it: the caller's client identity, which
the update's handler cannot see (the SDK hands it the arguments, not the request's metadata),
but which the server writes into the run's history with the update's acceptance
(`WorkflowExecutionUpdateAccepted`, its `accepted_request.meta.identity`; an update admitted
before its workflow task keeps it in `WorkflowExecutionUpdateAdmitted`). A plan's approval
takes its author from here, never from the request's own words."""

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client

from coord.models import calls as refs
from coord.models.plan.spec import UpdateCaller
from coord.models.wire.contract import FailureType, failure

PAGE = 100
"""Events read per page, newest first: the update was accepted just before the activity asking
was scheduled, so the first page nearly always holds it."""


class UpdateCallers:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=refs.UPDATE_CALLER.name)
    async def update_caller(self, update: UpdateCaller) -> str:
        """The identity of the client that sent `update`, read from the run's history, newest
        events first. Not found (a history that does not hold it yet): retried."""
        execution = WorkflowExecution(workflow_id=update.workflow_id, run_id=update.run_id)
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=self._client.namespace, execution=execution, maximum_page_size=PAGE
        )
        while True:
            service = self._client.workflow_service
            page = await service.get_workflow_execution_history_reverse(request)
            for event in page.history.events:
                identity = _caller(event, update.update_id)
                if identity is not None:
                    return identity
            if not page.next_page_token:
                break
            request.next_page_token = page.next_page_token
        raise failure(
            FailureType.TARGET_UNAVAILABLE,
            f"update {update.update_id} is not in the history of {update.workflow_id}",
        )


def _caller(event: HistoryEvent, update_id: str) -> str | None:
    """The caller's identity if `event` records the acceptance (or admission) of `update_id`."""
    if event.HasField("workflow_execution_update_accepted_event_attributes"):
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request
    elif event.HasField("workflow_execution_update_admitted_event_attributes"):
        request = event.workflow_execution_update_admitted_event_attributes.request
    else:
        return None
    return request.meta.identity if request.meta.update_id == update_id else None
