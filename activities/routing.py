"""`choose_agent`: the coordinator's pick for a run that names capabilities instead of an agent.

The candidates come from the agents declared to this (coordinator) worker, all of them, also
those served on other hosts (`AgentRegistry.catalogue`); what they weigh comes from the server
(health, backlog, workers and the pool's free share: the reads `coord agents` makes) and each
agent's ledger (success rate). The scoring is pure (`coord.models.assignment`)."""

from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client

from coord.infra.agent_health import candidates_health
from coord.infra.ledgers import read_ledgers
from coord.infra.logs import get_logger
from coord.models.agent_ledger import AgentLedgerState
from coord.models.agents import AgentRegistry
from coord.models.assignment import (
    Assignment,
    CandidateReading,
    CapabilityRoute,
    candidates,
    choose,
    no_candidate_message,
)
from coord.models.contract import CHOOSE_AGENT_ACTIVITY, FailureType, failure
from coord.models.health import AgentHealth

log = get_logger("routing")


class AgentRouter:
    def __init__(self, client: Client, registry: AgentRegistry) -> None:
        self._client = client
        self._registry = registry

    @activity.defn(name=CHOOSE_AGENT_ACTIVITY)
    async def choose_agent(self, route: CapabilityRoute) -> Assignment:
        """The agent the route's strategy picks among the candidates, with every candidate's
        bid; `no_capable_agent` (not retried) when no declared agent offers enough."""
        catalogue = self._registry.catalogue
        matched = candidates(catalogue, route.capabilities)
        assignment = choose(route, await self._readings(matched) if matched else [])
        if assignment is None:
            message = no_candidate_message(catalogue, route.capabilities)
            raise failure(FailureType.NO_CAPABLE_AGENT, message, non_retryable=True)
        log.info("agent chosen", choice=assignment.describe())
        return assignment

    async def _readings(self, matched: dict[str, float]) -> list[CandidateReading]:
        """Each candidate (agent -> capability match) as the server sees it now."""
        now = datetime.now(UTC)
        home = activity.info().task_queue
        rows = await candidates_health(self._client, matched, home=home, now=now)
        ledgers = await read_ledgers(self._client, [row.task_queue for row in rows])
        return [_reading(row, ledgers[row.task_queue], matched[row.agent], now) for row in rows]


def _reading(
    row: AgentHealth, ledger: AgentLedgerState, match: float, now: datetime
) -> CandidateReading:
    return CandidateReading(
        agent=row.agent,
        capability_match=match,
        healthy=row.status == "healthy",
        backlog=row.backlog,
        pollers=sum(worker.alive(now) for worker in row.workers),
        success_rate=ledger.success_rate,
        free_share=row.with_ledger(ledger).free_pool_share,
    )
