"""The dashboard's figures from the Temporal server: visibility counts by the `CoordPattern` and
`CoordStatus` search attributes (sagas by outcome, runs in flight), the dead-letter queue as
`coord dlq` reads it, and the agents' breakers as `coord agents` reads them. Every figure is
of one deployment: the runs on its coordinator task queue."""

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio.client import Client
from temporalio.service import RPCError

from coord.infra.agent_health import agents_health
from coord.infra.ledgers import read_ledger
from coord.models.dlq.letter import DlqSelection, EntrySummary
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.declared import DeclaredAgents
from coord.models.ops.dashboard import (
    Breaker,
    OldEntry,
    PatternFigures,
    bisect_instant,
    midpoint,
)
from coord.models.saga.spec import SagaStatus
from coord.models.wire import contract
from coord.starter.api.dlq import dlq_query, quoted, summary_of

ENDED_WITHIN = timedelta(hours=1)
"""Sagas ended this long ago at most are counted by outcome (running ones all are)."""
SAGA_RUNNING = (SagaStatus.PENDING, SagaStatus.IN_PROGRESS, SagaStatus.COMPENSATING)
IN_FLIGHT = (
    contract.Pattern.SAGA,
    contract.Pattern.CHAIN,
    contract.Pattern.AGGREGATOR,
    contract.Pattern.PLAN,
    contract.Pattern.VOTE,
)
OLDEST_SHOWN = 5
OLDEST_PAGE = 200
"""Parked entries listed at most to find the oldest: visibility lists newest first and cannot
order otherwise, so a longer queue is first narrowed by counting (`oldest_parked`)."""
LEDGER_WAIT = 3.0
"""Seconds a ledger's query is waited for."""
SEARCH_FROM = datetime(2000, 1, 1, tzinfo=UTC)
MAX_NARROWING = 64
"""Counts at most to narrow the queue's start instants down to `OLDEST_PAGE` entries: each
halves the interval, and 64 halvings of 26 years leave less than a nanosecond."""


class TemporalReader:
    """One deployment's figures, read from the server the client reaches."""

    def __init__(
        self,
        client: Client,
        registry: AgentRegistry | DeclaredAgents,
        queue: str,
        *,
        oldest_shown: int = OLDEST_SHOWN,
        oldest_page: int = OLDEST_PAGE,
    ) -> None:
        self.client = client
        self.registry = registry
        self.queue = queue
        self.shown = oldest_shown
        self.page = oldest_page

    def clause(self, pattern: contract.Pattern) -> str:
        return f"{contract.pattern_clause(pattern)} AND TaskQueue = {quoted(self.queue)}"

    async def count(self, query: str) -> int:
        return (await self.client.count_workflows(query)).count

    async def read(self) -> PatternFigures:
        now = datetime.now(UTC)
        sagas, in_flight, parked, breakers = await asyncio.gather(
            self.sagas(now), self.in_flight(), self.parked(), self.breakers()
        )
        oldest = await self.oldest_parked(parked, now)
        return PatternFigures(
            sagas=sagas, in_flight=in_flight, parked=parked, oldest=oldest, breakers=breakers
        )

    async def sagas(self, now: datetime) -> dict[str, int]:
        """By `CoordStatus`: the running ones now, the ended ones within `ENDED_WITHIN`."""
        since = quoted((now - ENDED_WITHIN).isoformat())
        status = contract.COORD_STATUS.name

        def query(outcome: SagaStatus) -> str:
            base = f"{self.clause(contract.Pattern.SAGA)} AND {status} = {quoted(outcome)}"
            if outcome in SAGA_RUNNING:
                return f"{base} AND ExecutionStatus = 'Running'"
            return f"{base} AND CloseTime > {since}"

        counts = await asyncio.gather(*(self.count(query(outcome)) for outcome in SagaStatus))
        return {outcome.value: n for outcome, n in zip(SagaStatus, counts, strict=True)}

    async def in_flight(self) -> dict[str, int]:
        running = " AND ExecutionStatus = 'Running'"
        counts = await asyncio.gather(*(self.count(self.clause(p) + running) for p in IN_FLIGHT))
        return {p.value: n for p, n in zip(IN_FLIGHT, counts, strict=True)}

    def parked_query(self) -> str:
        return dlq_query(DlqSelection(status="parked"), queue=self.queue)

    async def parked(self) -> int:
        return await self.count(self.parked_query())

    async def oldest_parked(self, parked: int, now: datetime) -> list[OldEntry]:
        """The `shown` entries parked longest ago. With more than a `page` parked, an instant
        is first found before which between `shown` and `page` were parked (bisection by
        counts), and only those are listed."""
        if not parked:
            return []
        query = self.parked_query()
        if parked > self.page:
            query += f" AND StartTime < {quoted((await self.narrowed(now)).isoformat())}"
        entries = [
            await summary_of(execution.memo)
            async for execution in self.client.list_workflows(
                query, limit=self.page, page_size=self.page
            )
        ]
        oldest = sorted(entries, key=lambda entry: entry.parked_at)[: self.shown]
        return [old_entry(entry) for entry in oldest]

    async def narrowed(self, now: datetime) -> datetime:
        lo, hi = SEARCH_FROM, now
        for _ in range(MAX_NARROWING):
            mid = midpoint(lo, hi)
            before = await self.count(
                f"{self.parked_query()} AND StartTime < {quoted(mid.isoformat())}"
            )
            step = bisect_instant(lo, hi, before, self.shown, self.page)
            if step is None:
                return mid
            lo, hi = step
        return hi

    async def breakers(self) -> list[Breaker]:
        """Each agent's breaker from its ledger, as `coord agents` reads it."""
        rows = await agents_health(self.client, self.registry.kinds, home=self.queue)
        states = await asyncio.gather(*(self.breaker(row.task_queue) for row in rows))
        return [
            Breaker(agent=row.agent, state=state, status=row.status)
            for row, state in zip(rows, states, strict=True)
        ]

    async def breaker(self, agent_queue: str) -> str:
        """`unknown` while no worker answers for its ledger (they are all down, say): the
        dashboard is read when things go wrong, and shows what it can."""
        try:
            ledger = await asyncio.wait_for(read_ledger(self.client, agent_queue), LEDGER_WAIT)
        except (RPCError, TimeoutError):
            return "unknown"
        return ledger.breaker


def old_entry(entry: EntrySummary) -> OldEntry:
    return OldEntry(
        entry_id=entry.entry_id,
        failure_type=entry.failure_type,
        event_type=entry.event_type,
        target=entry.target_agent or entry.target_workflow,
        parked_at=entry.parked_at,
    )
