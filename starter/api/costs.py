"""What a correlation costs: the tokens its chain, sagas and plans recorded, added up."""

import contextlib

from temporalio.client import Client

from coord.models.mesh.usage import TokenUsage
from coord.models.wire import contract
from coord.starter.api.chains import chain_state
from coord.starter.api.common import NotFound, api_call
from coord.starter.api.plans import plan_record
from coord.starter.api.sagas import correlated_sagas, saga_record
from coord.workflows.plan.graph import TaskGraph


@api_call
async def correlation_tokens(client: Client, correlation_id: str) -> TokenUsage:
    """The tokens every workflow of the correlation recorded (its chain's, across its
    continue-as-new; each saga's and plan's of that correlation id), in all and by model. Each
    holds its own spec's budget to its own runs; this is their sum."""
    usage = TokenUsage()
    with contextlib.suppress(NotFound):
        usage.merge((await chain_state(client, correlation_id)).tokens)
    async for saga in correlated_sagas(client, correlation_id):
        usage.merge((await saga_record(saga)).tokens)
    plans = (
        f"{contract.pattern_clause(contract.Pattern.PLAN)} AND "
        f"{contract.CORRELATION_ID.name} = '{correlation_id}'"
    )
    async for execution in client.list_workflows(plans):
        plan = client.get_workflow_handle_for(TaskGraph.run, execution.id, run_id=execution.run_id)
        usage.merge((await plan_record(plan)).tokens)
    return usage
