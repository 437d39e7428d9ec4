"""The agent monitor's two activities: reading the deployment's agent health from the server, and
delivering an AgentHealth event to the running chains that use the agent."""

from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client

from coord.infra.agent_health import agents_health
from coord.infra.ledgers import read_ledgers
from coord.infra.signals import running, signal_each
from coord.models import calls as refs
from coord.models.events.delivery import Delivery
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.monitor import AgentReading, HealthPublication, HealthRead, HealthReading
from coord.models.wire.contract import (
    Pattern,
    agent_clause,
)


class AgentMonitorActivities:
    def __init__(self, client: Client, registry: AgentRegistry | None = None) -> None:
        """`registry`: the agents declared to this worker (its whole catalogue), by whose names
        the monitor knows the queues it finds served."""
        self._client = client
        self._declared = list(registry.catalogue) if registry is not None else []

    @activity.defn(name=refs.READ_AGENT_HEALTH.name)
    async def read_agent_health(self, read: HealthRead) -> HealthReading:
        """The agents asked about and every agent queue of the deployment a worker reports
        serving, each healthy or unreachable as `coord agents` shows it, with its breaker's
        transitions since those the monitor has published. A queue found served is named
        after the declared agent it serves, whatever characters its name holds, so the event
        names the agent as the chains' subscriptions do."""
        now = datetime.now(UTC)
        rows = await agents_health(
            self._client,
            dict.fromkeys(read.agents),
            home=read.home,
            now=now,
            known=self._declared,
        )
        ledgers = await read_ledgers(self._client, [row.task_queue for row in rows])
        return HealthReading(
            at=now,
            agents=[
                AgentReading.of(row, now, ledgers[row.task_queue], read.agents.get(row.agent))
                for row in rows
            ],
        )

    @activity.defn(name=refs.PUBLISH_AGENT_HEALTH.name)
    async def publish_agent_health(self, publication: HealthPublication) -> Delivery:
        """To every running chain of the deployment whose subscriptions name the agent; a chain
        that ended since visibility listed it is skipped. Retried whole, the event keeps its id,
        so a chain already reached takes it as a duplicate."""
        where = [f"TaskQueue = '{publication.home}'", agent_clause(publication.agent)]
        chains = await running(self._client, Pattern.CHAIN, where=where)
        return await signal_each(self._client, chains, publication.event.model_dump(mode="json"))
