"""The patterns of a rewound correlation beside its chain: each aggregator and vote the
original ran on its own and that was at work at the rewind point is copied into the new
correlation with its state just before the point (`coord.models.rewind.patterns`).

The copies start after the copy's chain has its past, and the re-delivery waits until every
aggregator copy is attached to that chain, so none misses an event sent again."""

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from temporalio.client import Client

from coord.models.aggregator.spec import AggregatorSpec, parse_aggregator_input
from coord.models.events.rewind import RewindOrigin
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.config import AgentConfig
from coord.models.rewind.diff import ListedRun
from coord.models.rewind.patterns import PatternRun, aggregator_past, copy_name, vote_past
from coord.models.rewind.plan import PatternCopy, RewindPlan, RewindRefused
from coord.models.vote.spec import VoteSpec
from coord.models.wire import contract
from coord.models.wire.specs import parse_model
from coord.starter.api.aggregators import aggregator_handle, aggregator_state, start_aggregator
from coord.starter.api.chains import chain_state
from coord.starter.api.common import NoWorker
from coord.starter.api.votes import start_vote, vote_handle, vote_state

COPIED = (contract.Pattern.AGGREGATOR, contract.Pattern.VOTE)
ATTACH_WAIT = 60.0
"""Seconds an aggregator copy has to attach to the copy's chain (its first workflow task)."""


class PatternRewind:
    """One rewind's copies of the original's patterns: found at the point, started beside the
    copy's chain, with the specs of `--spec NAME=FILE` where a name matches."""

    def __init__(
        self,
        client: Client,
        plan: RewindPlan,
        *,
        agents: Mapping[str, AgentConfig] | None,
        specs: Mapping[str, Mapping[str, Any]] | None,
        queue: str | None,
    ) -> None:
        self._client = client
        self._plan = plan
        self._agents = dict(agents or {})
        self._specs = dict(specs or {})
        self._queue = queue
        self._origin = RewindOrigin(original=plan.original, at=plan.point)
        self._runs: list[tuple[contract.Pattern, PatternRun]] = []

    async def find(self, point: TimelineEntry) -> set[str]:
        """The patterns at work at the point; returns the sources of their events, which their
        copies make again. Refused when a `--spec` name matches none of them."""
        found = await pattern_runs(self._client, self._plan.original)
        self._runs = [(pattern, run) for pattern, run in found if run.at_work(point)]
        names = {name_of(pattern, run) for pattern, run in self._runs}
        unknown = sorted(set(self._specs) - names)
        if unknown:
            raise RewindRefused(
                f"--spec: {unknown[0]!r} names no aggregator or vote of {self._plan.original!r} "
                "at work at the rewind point"
            )
        return {f"/{pattern.value}/{name_of(pattern, run)}" for pattern, run in self._runs}

    async def start(self, before: Sequence[TimelineEntry], point: TimelineEntry) -> None:
        """Each pattern's copy, with its past; the aggregators' attached to the copy's chain."""
        for pattern, run in self._runs:
            if pattern == contract.Pattern.AGGREGATOR:
                copy = await self._aggregator(run, before, point)
            else:
                copy = await self._vote(run, before, point)
            if copy is not None:
                self._plan.copies.append(copy)
        aggregators = {c.copy_id for c in self._plan.copies if c.pattern == "aggregator"}
        await attached(self._client, self._plan.copy_id, aggregators)

    async def _aggregator(
        self, run: PatternRun, before: Sequence[TimelineEntry], point: TimelineEntry
    ) -> PatternCopy | None:
        handle = aggregator_handle(self._client, run.workflow_id)
        spec, _ = parse_aggregator_input(await started_input(self._client, handle))
        record = await aggregator_state(self._client, run.workflow_id)
        past = aggregator_past(spec, record, before, run=run, point=point, origin=self._origin)
        if past is None:
            return None
        document = self._specs.get(spec.aggregator_id) or spec.model_dump(mode="json")
        fields = {"correlation_id": self._plan.copy_id, "rewind": past.model_dump(mode="json")}
        copy = parse_model(AggregatorSpec, {**document, **fields}, "aggregator")
        await start_aggregator(self._client, copy, queue=self._queue)
        return PatternCopy(
            pattern="aggregator",
            original=run.workflow_id,
            copy_id=copy.workflow_id,
            taken=len(past.slots),
        )

    async def _vote(
        self, run: PatternRun, before: Sequence[TimelineEntry], point: TimelineEntry
    ) -> PatternCopy | None:
        handle = vote_handle(self._client, run.workflow_id)
        spec = parse_model(VoteSpec, await started_input(self._client, handle), "vote")
        record = await vote_state(self._client, run.workflow_id)
        past = vote_past(spec, record, before, point=point, origin=self._origin)
        if past is None:
            return None
        document = self._specs.get(spec.vote_id) or spec.model_dump(mode="json")
        voters = {v: self._agents[v] for v in document.get("voters", []) if v in self._agents}
        fields = {
            "vote_id": copy_name(spec.vote_id, self._plan.original, self._plan.copy_id),
            "correlation_id": self._plan.copy_id,
            "agents": {**document.get("agents", {}), **voters},
            "rewind": past.model_dump(mode="json"),
        }
        copy = parse_model(VoteSpec, {**document, **fields}, "vote")
        await start_vote(self._client, copy, queue=self._queue)
        taken = len(past.ballots)
        return PatternCopy(
            pattern="vote", original=run.workflow_id, copy_id=copy.workflow_id, taken=taken
        )


def name_of(pattern: contract.Pattern, run: PatternRun) -> str:
    """The name `--spec NAME=FILE` gives a pattern: its aggregator or vote id."""
    if pattern == contract.Pattern.VOTE:
        return contract.vote_id_of(run.workflow_id)
    scoped = run.workflow_id.removeprefix(contract.AGGREGATOR_ID_PREFIX)
    return scoped.partition(contract.ID_PART_SEPARATOR)[0]


async def pattern_runs(
    client: Client, correlation_id: str
) -> list[tuple[contract.Pattern, PatternRun]]:
    """The correlation's aggregators and votes as visibility lists them, each from its first
    run's start to its last run's close."""
    clauses = " OR ".join(contract.pattern_clause(pattern) for pattern in COPIED)
    query = f"({clauses}) AND {contract.CORRELATION_ID.name} = '{correlation_id}'"
    runs: dict[str, tuple[contract.Pattern, PatternRun]] = {}
    async for execution in client.list_workflows(query):
        value = execution.typed_search_attributes.get(contract.COORD_PATTERN)
        pattern = contract.Pattern(value or contract.Pattern.VOTE)
        run = PatternRun(
            workflow_id=execution.id,
            started_at=execution.start_time,
            closed_at=execution.close_time,
            parent=execution.parent_id,
        )
        if execution.id in runs:
            run = run.spanning(runs[execution.id][1])
        runs[execution.id] = (pattern, run)
    return list(runs.values())


async def listed_runs(client: Client, correlation_id: str) -> list[ListedRun]:
    """The correlation's chain, sagas, aggregators, plans and votes with their status, one
    line per workflow (its latest run), in the order they started."""
    query = (
        f"{contract.CORRELATION_ID.name} = '{correlation_id}' AND "
        f"{contract.COORD_PATTERN.name} != '{contract.Pattern.DLQ.value}'"
    )
    latest: dict[str, tuple[datetime, ListedRun]] = {}
    async for execution in client.list_workflows(query):
        values = execution.typed_search_attributes
        run = ListedRun(
            pattern=values.get(contract.COORD_PATTERN) or "",
            workflow_id=execution.id,
            status=values.get(contract.COORD_STATUS) or "",
        )
        if execution.id not in latest or latest[execution.id][0] < execution.start_time:
            latest[execution.id] = (execution.start_time, run)
    return [run for _, run in sorted(latest.values(), key=lambda item: item[0])]


async def started_input(client: Client, handle: Any) -> Any:
    """What the workflow's current run was started with, decoded, unvalidated."""
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [raw] = await client.data_converter.decode(started.input.payloads[:1])
    return raw


async def attached(client: Client, correlation_id: str, listeners: set[str]) -> None:
    """Until the copy's chain lists every aggregator copy among its listeners. NoWorker when
    they have not attached within ATTACH_WAIT seconds (no worker took their first task)."""

    async def poll() -> None:
        while not listeners <= set((await chain_state(client, correlation_id)).listeners):
            await asyncio.sleep(0.1)

    if not listeners:
        return
    try:
        await asyncio.wait_for(poll(), ATTACH_WAIT)
    except TimeoutError:
        raise NoWorker(
            f"the aggregator copies {', '.join(sorted(listeners))} did not attach to the chain "
            f"of {correlation_id!r} within {ATTACH_WAIT:.0f}s: is a worker running?"
        ) from None
