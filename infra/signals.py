"""Signalling running workflows from outside: which runs of a pattern are running now, and an
`event` signal to each of several, one that has ended never an obstacle to the others. Shared by
the Python API (delivering published events) and the worker's activities (the agent monitor
delivering AgentHealth events)."""

from collections.abc import Sequence
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from coord.models.events.delivery import Delivery
from coord.models.wire import contract


async def running(
    client: Client,
    pattern: contract.Pattern,
    correlation_id: str | None = None,
    *,
    where: Sequence[str] = (),
) -> list[str]:
    """The running workflows of a pattern (of one correlation, and matching the clauses
    `where`), as visibility lists them now."""
    query = f"{contract.pattern_clause(pattern)} AND ExecutionStatus = 'Running'"
    if correlation_id is not None:
        query += f" AND {contract.CORRELATION_ID.name} = '{correlation_id}'"
    query += "".join(f" AND {clause}" for clause in where)
    return [execution.id async for execution in client.list_workflows(query)]


async def signal_each(client: Client, workflow_ids: list[str], raw: dict[str, Any]) -> Delivery:
    """Signal `event` to each workflow on its own: one that has ended (the visibility listing
    is eventually consistent) is skipped and reported, never an obstacle to the others."""
    delivery = Delivery()
    for workflow_id in workflow_ids:
        try:
            await client.get_workflow_handle(workflow_id).signal(contract.EVENT_SIGNAL, raw)
        except RPCError as error:
            delivery.skipped.append(f"{target_name(workflow_id)}: {error.message}")
        else:
            delivery.reached.append(workflow_id)
    return delivery


def target_name(workflow_id: str) -> str:
    """A workflow in a user's words: a chain by its correlation id; any other (a chain's run
    too) by its workflow id."""
    if (
        contract.is_chain_workflow_id(workflow_id)
        and contract.CHAIN_RUN_SEPARATOR not in workflow_id
    ):
        return f"the chain for correlation id {contract.correlation_id_of_chain(workflow_id)!r}"
    return workflow_id
