"""The patterns of a rewound correlation beside its chain: each aggregator, vote, saga and plan
the original ran on its own (not as a chain's or a plan's child) and that was at work at the
rewind point is copied into the new correlation with its state just before the point
(`coord.models.rewind.patterns`).

Every copy's spec is made and validated before anything starts, so a refusal leaves nothing
behind. The copies start after the copy's chain has its past, and the re-delivery waits until
every aggregator copy is attached to that chain, so none misses an event sent again."""

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel
from temporalio.client import Client

from coord.models.aggregator.spec import AggregatorSpec, parse_aggregator_input
from coord.models.chain.spec import ChainStatus
from coord.models.events.rewind import RewindOrigin
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.config import AgentConfig
from coord.models.plan.rewind import plan_past
from coord.models.plan.spec import PlanSpec
from coord.models.rewind.diff import ListedRun
from coord.models.rewind.patterns import (
    PatternRun,
    aggregator_past,
    copy_name,
    saga_past,
    vote_past,
)
from coord.models.rewind.plan import PatternCopy, RewindPlan, RewindRefused
from coord.models.saga.spec import SagaSpec
from coord.models.vote.spec import VoteSpec
from coord.models.wire import contract
from coord.models.wire.specs import parse_model
from coord.starter.api.aggregators import aggregator_record, aggregator_run, start_aggregator
from coord.starter.api.chains import chain_state
from coord.starter.api.common import NoWorker, started_input
from coord.starter.api.plans import plan_record, plan_run, start_plan
from coord.starter.api.sagas import saga_handle, saga_record, start_saga
from coord.starter.api.votes import start_vote, vote_record, vote_run

Pattern = contract.Pattern
COPIED = (Pattern.AGGREGATOR, Pattern.VOTE, Pattern.SAGA, Pattern.PLAN)
ATTACH_WAIT = 60.0
"""Seconds an aggregator copy has to attach to the copy's chain (its first workflow task)."""
LISTENING = (ChainStatus.RUNNING, ChainStatus.PAUSED)
"""A chain in these states forwards what it records to its listeners."""
CopySpec = AggregatorSpec | VoteSpec | SagaSpec | PlanSpec
S = TypeVar("S", AggregatorSpec, VoteSpec, SagaSpec, PlanSpec)


class Prepared(NamedTuple):
    """A pattern's copy, ready to start."""

    pattern: Pattern
    name: str
    """Its original's id (aggregator, vote, saga or plan id): what `--spec NAME=FILE` names."""
    original: str
    spec: CopySpec
    taken: int
    events: set[str]
    """The original's events, which the copy makes again from the point on."""


class PatternRewind:
    """One rewind's copies of the original's patterns: found and prepared at the point, started
    beside the copy's chain, with the spec documents of `--spec NAME=FILE` where a name
    matches and the fixed `agents` declared inline in each."""

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
        self._ready: list[Prepared] = []

    async def prepare(self, before: Sequence[TimelineEntry], point: TimelineEntry) -> set[str]:
        """The copies of the patterns at work at the point; returns the ids of the originals'
        events, which the copies make again. Refused when a `--spec` name matches none."""
        for pattern, run in await pattern_runs(self._client, self._plan.original):
            if run.at_work(point):
                prepared = await self._prepare(pattern, run, before, point)
                self._ready += [prepared] if prepared else []
        unknown = sorted(set(self._specs) - {prepared.name for prepared in self._ready})
        if unknown:
            raise RewindRefused(
                f"--spec: {unknown[0]!r} names no chain, aggregator, vote, saga or plan of "
                f"{self._plan.original!r} at work at the rewind point"
            )
        return set().union(*(prepared.events for prepared in self._ready))

    async def start(self) -> None:
        """Each prepared copy; then until the aggregators' are attached to the copy's chain."""
        for prepared in self._ready:
            workflow_id = await self._start(prepared.spec)
            self._plan.copies.append(
                PatternCopy(
                    pattern=prepared.pattern.value,
                    original=prepared.original,
                    copy_id=workflow_id,
                    taken=prepared.taken,
                )
            )
        listeners = {c.copy_id for c in self._plan.copies if c.pattern == Pattern.AGGREGATOR}
        await attached(self._client, self._plan.copy_id, listeners)

    async def _start(self, spec: CopySpec) -> str:
        client, queue = self._client, self._queue
        if isinstance(spec, AggregatorSpec):
            await start_aggregator(client, spec, queue=queue)
        elif isinstance(spec, VoteSpec):
            await start_vote(client, spec, queue=queue)
        elif isinstance(spec, SagaSpec):
            await start_saga(client, spec, queue=queue)
        else:
            await start_plan(client, spec, queue=queue)
        return spec.workflow_id

    async def _prepare(
        self,
        pattern: Pattern,
        run: PatternRun,
        before: Sequence[TimelineEntry],
        point: TimelineEntry,
    ) -> Prepared | None:
        if pattern == Pattern.AGGREGATOR:
            return await self._aggregator(run, before, point)
        if pattern == Pattern.VOTE:
            return await self._vote(run, before, point)
        if pattern == Pattern.SAGA:
            return await self._saga(run, before)
        return await self._plan_copy(run, before)

    async def _aggregator(
        self, run: PatternRun, before: Sequence[TimelineEntry], point: TimelineEntry
    ) -> Prepared | None:
        handle = aggregator_run(self._client, run.workflow_id)
        spec, _ = parse_aggregator_input(await started_input(self._client, handle))
        record = await aggregator_record(handle)
        past = aggregator_past(spec, record, before, run=run, point=point, origin=self._origin)
        if past is None:
            return None
        name = spec.aggregator_id
        copy = self._copy(spec, name, {}, past)
        emitted = {record.emitted.event.id} if record.emitted else set()
        return Prepared(Pattern.AGGREGATOR, name, run.workflow_id, copy, len(past.slots), emitted)

    async def _vote(
        self, run: PatternRun, before: Sequence[TimelineEntry], point: TimelineEntry
    ) -> Prepared | None:
        handle = vote_run(self._client, run.workflow_id)
        spec = parse_model(VoteSpec, await started_input(self._client, handle), "vote")
        record = await vote_record(handle)
        past = vote_past(spec, record, before, point=point, origin=self._origin)
        if past is None:
            return None
        name = spec.vote_id
        events = self._announced(f"/vote/{name}", record.events)
        return self._renamed(Pattern.VOTE, run, spec, name, past, len(past.ballots), events)

    async def _saga(self, run: PatternRun, before: Sequence[TimelineEntry]) -> Prepared | None:
        handle = saga_handle(self._client, contract.saga_id_of(run.workflow_id))
        spec = parse_model(SagaSpec, await started_input(self._client, handle), "saga")
        record = await saga_record(handle)
        past = saga_past(spec, record, before, origin=self._origin)
        if past is None:
            return None
        events = {row.event_id for row in record.events}
        return self._renamed(Pattern.SAGA, run, spec, spec.saga_id, past, len(past.steps), events)

    async def _plan_copy(self, run: PatternRun, before: Sequence[TimelineEntry]) -> Prepared | None:
        handle = plan_run(self._client, run.workflow_id)
        spec = parse_model(PlanSpec, await started_input(self._client, handle), "plan")
        if spec.planner is not None:
            raise RewindRefused(
                f"plan {spec.plan_id!r} of {self._plan.original!r} was written by its planner, "
                "so it cannot be rewound with the correlation: rewind it from a written spec"
            )
        record = await plan_record(handle)
        past = plan_past(spec, record, before, origin=self._origin)
        if past is None:
            return None
        name = spec.plan_id
        events = self._announced(f"/plan/{name}", record.events)
        return self._renamed(Pattern.PLAN, run, spec, name, past, len(past.tasks), events)

    def _announced(self, source: str, kept: Sequence[TimelineEntry]) -> set[str]:
        """The ids of what a plan or vote announced: those its record keeps and those of the
        log's rows after the point from it (`source`, its team's too), since a record keeps
        only its newest."""
        later = [item.row for item in self._plan.redelivered]
        theirs = [r for r in later if r.agent == source or r.agent.startswith(f"{source}/")]
        return {row.event_id for row in kept} | {row.event_id for row in theirs}

    def _renamed(
        self,
        pattern: Pattern,
        run: PatternRun,
        spec: S,
        name: str,
        past: BaseModel,
        taken: int,
        events: set[str],
    ) -> Prepared:
        """A vote's, saga's or plan's copy: under its own id (its `<pattern>_id` field, made from
        the original's id `name`), with the fixed agents over its own."""
        renamed = {f"{pattern.value}_id": self._named(name)}
        copy = self._copy(spec, name, self._agents, past, **renamed)
        return Prepared(pattern, name, run.workflow_id, copy, taken, events)

    def _named(self, name: str) -> str:
        return copy_name(name, self._plan.original, self._plan.copy_id)

    def _copy(
        self, spec: S, name: str, agents: Mapping[str, AgentConfig], past: BaseModel, **fields: str
    ) -> S:
        """A copy's spec: `--spec NAME=FILE`'s document or the original's, in the copy's
        correlation with its own id (`fields`), its past, and the fixed `agents` over its own;
        validated as a spec that came in would be."""
        document = dict(self._specs.get(name) or spec.model_dump(mode="json"))
        if agents:
            fixed = {n: a.model_dump(mode="json") for n, a in agents.items()}
            document["agents"] = {**document.get("agents", {}), **fixed}
        document |= {
            **fields,
            "correlation_id": self._plan.copy_id,
            "rewind": past.model_dump(mode="json"),
        }
        kind = type(spec)
        return parse_model(kind, document, kind.__name__.removesuffix("Spec").lower())


async def pattern_runs(client: Client, correlation_id: str) -> list[tuple[Pattern, PatternRun]]:
    """The correlation's aggregators, votes, sagas and plans as visibility lists them, each from
    its first run's start to its last run's close."""
    clauses = " OR ".join(contract.pattern_clause(pattern) for pattern in COPIED)
    query = f"({clauses}) AND {contract.CORRELATION_ID.name} = '{correlation_id}'"
    runs: dict[str, tuple[Pattern, PatternRun]] = {}
    async for execution in client.list_workflows(query):
        pattern = Pattern(str(execution.typed_search_attributes.get(contract.COORD_PATTERN)))
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
        f"{contract.COORD_PATTERN.name} != '{Pattern.DLQ.value}'"
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


async def attached(client: Client, correlation_id: str, listeners: set[str]) -> None:
    """Until the copy's chain lists every aggregator copy among its listeners, or has ended
    (rewound past its end: there is nothing to attach to). NoWorker when they have not
    attached within ATTACH_WAIT seconds (no worker took their first task)."""

    async def poll() -> None:
        while True:
            state = await chain_state(client, correlation_id)
            if state.status not in LISTENING or listeners <= set(state.listeners):
                return
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
