"""Reading a chain from outside it: what an aggregator's lookback needs, and whether a
correlation's chain runs (what a saga asks before it sends its events)."""

from datetime import timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from coord.models import calls as refs
from coord.models.events.envelope import EventEnvelope
from coord.models.events.timeline import TimelineEntry
from coord.models.wire.contract import (
    TIMELINE_QUERY,
    FailureType,
    chain_workflow_id,
    failure,
)

QUERY_TIMEOUT = timedelta(seconds=10)
"""A chain whose worker is away does not answer; the attempt fails and the retry policy (a few
attempts, set by the aggregator) decides."""


class ChainLookback:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=refs.CHAIN_EVENTS.name)
    async def chain_events(self, correlation_id: str) -> list[EventEnvelope]:
        """The events a correlation's chain has recorded so far; none when it has no chain."""
        workflow_id = chain_workflow_id(correlation_id)
        handle = self._client.get_workflow_handle(workflow_id)
        try:
            timeline = await handle.query(
                TIMELINE_QUERY, result_type=list[TimelineEntry], rpc_timeout=QUERY_TIMEOUT
            )
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        except WorkflowQueryFailedError as error:
            raise failure(
                FailureType.LOOKBACK_FAILED,
                f"{workflow_id} does not answer the timeline query: {error.message}",
                non_retryable=True,
            ) from None
        return [entry.to_envelope() for entry in timeline]

    @activity.defn(name=refs.CHAIN_RUNNING.name)
    async def chain_running(self, correlation_id: str) -> bool:
        """Whether the correlation's chain runs (its latest run, across continue-as-new)."""
        return await chain_runs(self._client, correlation_id)


async def chain_runs(client: Client, correlation_id: str) -> bool:
    """Whether the correlation's chain runs (its latest run, across continue-as-new): one read
    of the server."""
    handle = client.get_workflow_handle(chain_workflow_id(correlation_id))
    try:
        described = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status == WorkflowExecutionStatus.RUNNING
