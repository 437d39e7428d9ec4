"""Reading a chain from outside it: what an aggregator's lookback needs."""

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from models.chain import TimelineEntry, chain_workflow_id
from models.envelope import EventEnvelope


class ChainLookback:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name="chain_events")
    async def chain_events(self, correlation_id: str) -> list[EventEnvelope]:
        """The events a correlation's chain has recorded so far; none when it has no chain."""
        handle = self._client.get_workflow_handle(chain_workflow_id(correlation_id))
        try:
            timeline = await handle.query("timeline", result_type=list[TimelineEntry])
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        return [entry.to_envelope() for entry in timeline]
