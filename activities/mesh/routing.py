"""`choose_agent` and `choose_agents`: the coordinator's picks for runs that name capabilities
instead of an agent (one run's, or those a workflow starts together).

The candidates come from the agents declared to this (coordinator) worker, all of them, also
those served on other hosts (`AgentRegistry.catalogue`); what they weigh comes from the server
(health, backlog, workers and the slots they use: the reads `coord agents` makes) and each
agent's ledger (breaker, success rate, pool). The scoring is pure (`coord.models.mesh.assignment`);
the router remembers its own picks (`RecentPicks`), so ties take turns."""

import asyncio
import random
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError

from coord.activities.events.lookback import ChainLookahead
from coord.infra.agent_health import candidates_health
from coord.infra.ledgers import read_ledgers
from coord.infra.logs import get_logger
from coord.models import calls as refs
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.assignment import (
    Assignment,
    CandidateReading,
    CapabilityRoute,
    RecentPicks,
    choose_each,
    no_candidate_message,
    route_candidates,
)
from coord.models.mesh.health import AgentHealth
from coord.models.mesh.ledger import BreakerStateName
from coord.models.mesh.placement import (
    ChainPlacementAsk,
    Placement,
    PlacementAnswer,
    PlacementAsk,
)
from coord.models.wire.contract import (
    FailureType,
    failure,
)

log = get_logger("routing")
SERVED_PATIENCE = timedelta(seconds=5)
SERVED_POLL = 1.0


class AgentRouter:
    def __init__(
        self, client: Client, registry: AgentRegistry, lookahead: ChainLookahead | None = None
    ) -> None:
        """`lookahead`: the answers asked ahead as the worker created each saga's instance
        (the coordinator worker's); without one, every chain is asked about when asked for."""
        self._client = client
        self._registry = registry
        self._recent = RecentPicks()
        self._lookahead = lookahead or ChainLookahead(client)

    @activity.defn(name=refs.CHOOSE_AGENT.name)
    async def choose_agent(self, route: CapabilityRoute) -> Assignment:
        """The agent the route's strategy picks among the candidates, with every candidate's
        bid; `no_capable_agent` (not retried) when no declared agent offers enough."""
        [assignment] = await self._picks([route])
        if assignment is None:
            catalogue = self._registry.catalogue
            message = no_candidate_message(catalogue, route.capabilities, route.exclude)
            raise failure(FailureType.NO_CAPABLE_AGENT, message, non_retryable=True)
        return assignment

    @activity.defn(name=refs.CHOOSE_AGENTS.name)
    async def choose_agents(self, routes: list[CapabilityRoute]) -> list[Assignment | None]:
        """The picks for runs a workflow starts together, in order, each seeing the ones before
        it (`choose_each`), from one reading; None for a route without a candidate (the
        workflow asks `choose_agent` for it alone, which fails it `no_capable_agent`)."""
        return await self._picks(routes)

    @activity.defn(name=refs.PLACE_AGENTS.name)
    async def place_agents(self, ask: PlacementAsk) -> dict[str, Placement]:
        """Where the runs of each agent asked about go from the workflow this worker runs (a
        local activity: the answer is this worker's, recorded in the workflow's history):
        `placement` for an agent it serves, else the agent's own queue."""
        return {agent: self._registry.placement(agent) for agent in ask.agents}

    @activity.defn(name=refs.PLACE_AGENTS_WITH_CHAIN.name)
    async def place_agents_with_chain(self, ask: ChainPlacementAsk) -> PlacementAnswer:
        """`place_agents`, and whether the chain asked about runs: a workflow learns both
        before its first step in one local activity, one read of the server, instead of
        holding its task for a second look-up later (runs all local) or signalling a chain
        that does not run, which fails in a workflow task of its own (runs served as activity
        tasks: two events for the signal, three for the task). The chain's answer was asked
        ahead when the worker created the saga's instance (`ChainLookahead`)."""
        placed = await self.place_agents(ask)
        try:
            running = await self._lookahead.chain_runs(ask.chain_of)
        except RPCError as error:  # unanswered: the workflow signals the chain as before
            log.warning("chain not looked up", correlation_id=ask.chain_of, error=str(error))
            return PlacementAnswer(agents=placed)
        return PlacementAnswer(agents=placed, chain_runs=running)

    @activity.defn(name=refs.AGENT_SERVED.name)
    async def agent_served(self, agent: str) -> bool:
        """Whether a live worker serves `agent`'s queue now, or within SERVED_PATIENCE: after a
        server restart, workers take some seconds to poll again."""
        home = activity.info().task_queue
        deadline = time.monotonic() + SERVED_PATIENCE.total_seconds()
        while True:
            (row,) = await candidates_health(self._client, [agent], home=home)
            if row.status == "healthy" or time.monotonic() >= deadline:
                return row.status == "healthy"
            activity.heartbeat()
            await asyncio.sleep(SERVED_POLL)

    async def _picks(self, routes: Sequence[CapabilityRoute]) -> list[Assignment | None]:
        catalogue = self._registry.catalogue
        wanted = route_candidates(catalogue, routes)
        readings = await self._readings(wanted) if wanted else {}
        picks = choose_each(routes, catalogue, readings, self._recent)
        for pick in picks:
            if pick is not None:
                log.info("agent chosen", choice=pick.describe())
        return picks

    async def _readings(self, agents: list[str]) -> dict[str, CandidateReading]:
        """Each candidate as the server and its ledger see it now, in a random order: a tie the
        router's memory does not settle (agents it never picked) goes any way, not by name, so
        several coordinator workers do not all send their first runs to the same agent."""
        now = datetime.now(UTC)
        home = activity.info().task_queue
        rows = await candidates_health(self._client, agents, home=home, now=now)
        ledgers = await read_ledgers(self._client, [row.task_queue for row in rows])
        readings = [
            _reading(
                row.with_ledger(ledgers[row.task_queue], self._registry.max_concurrent(row.agent)),
                ledgers[row.task_queue].breaker,
                now,
            )
            for row in rows
        ]
        random.shuffle(readings)
        return {reading.agent: reading for reading in readings}


def _reading(row: AgentHealth, breaker: BreakerStateName, now: datetime) -> CandidateReading:
    """`row` read with its ledger: its `breaker`, record and pool, whose runs in use are the
    ones it is running and whose waiting ones include those taken by a worker that wait for a
    permit."""
    pool = row.pool
    return CandidateReading(
        agent=row.agent,
        healthy=row.status == "healthy",
        backlog=pool.waiting if pool is not None else row.backlog,
        running=pool.in_use if pool is not None else 0,
        pollers=sum(worker.alive(now) for worker in row.workers),
        breaker=breaker,
        success_rate=row.success_rate,
        free_share=row.free_pool_share,
    )
