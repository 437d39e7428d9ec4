"""Rewind many correlations at once (`coord rewind --all`), and count what changed between
each original and its copy (`coord diff --summary`).

The batch selects by visibility (the chains started in a window, never copies), narrows by a
CEL filter on each correlation's first event (the variables a chain subscription's filter
sees), and rewinds each through `rewind_chain` onto `<original><suffix>`, a few at a time. A
correlation that cannot be rewound is a line of the report, never the end of the batch."""

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import NamedTuple

from temporalio.client import Client

from coord.infra.event_log import segment_store
from coord.infra.temporal import task_queue
from coord.models.chain.spec import ChainSpec, ChainState
from coord.models.events.filters import compile_filter, evaluate
from coord.models.events.log import LogCheck
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.config import AgentConfig
from coord.models.rewind.batch import (
    MAX_BATCH,
    MAX_CONCURRENCY,
    BatchLine,
    BatchRefused,
    BatchReport,
    LineStatus,
    Resumed,
    copy_name,
    window_query,
)
from coord.models.rewind.plan import RewindRefused, plan_rewind, require_whole_log
from coord.models.rewind.summary import (
    ChainRecord,
    DiffSummary,
    PairSummary,
    pair_summary,
    summarise,
)
from coord.models.wire import contract
from coord.models.wire.errors import CoordError
from coord.starter.api.chains import chain_running, chain_state
from coord.starter.api.common import NotFound, api_call, workflow_exists
from coord.starter.api.log import read_log
from coord.starter.api.rewind import diff_correlations, hand_over, rewind_chain

OnLine = Callable[[BatchLine, int], None]
"""Told of each correlation done, with how many the batch selected."""


async def originals(
    client: Client, since: datetime, until: datetime, queue: str | None
) -> AsyncIterator[str]:
    """The correlations whose chain started in [since, until) on `queue` (default: the
    coordinator's, $COORD_TASK_QUEUE) and is not itself a copy, each once (a chain that
    continued as new lists one run per history). BatchRefused past MAX_BATCH."""
    seen: set[str] = set()
    async for execution in client.list_workflows(window_query(since, until, queue or task_queue())):
        attributes = execution.typed_search_attributes
        correlation = attributes.get(contract.CORRELATION_ID)
        copy_of = attributes.get(contract.REWIND_OF)
        if correlation is None or copy_of is not None or correlation in seen:
            continue
        if len(seen) == MAX_BATCH:
            raise BatchRefused(f"--since/--until: more than {MAX_BATCH} chains; narrow the window")
        seen.add(correlation)
        yield correlation


class Copy(NamedTuple):
    """A copy an earlier run of the batch made: its record, and whether its chain still runs."""

    record: ChainState
    running: bool


async def existing_copy(client: Client, original: str, copy_id: str) -> Copy | None:
    """The copy, if it exists. RewindRefused when its name is taken by a chain that is no copy
    of `original`: that chain is never finished, made again or counted as the copy."""
    try:
        running = await chain_running(client, copy_id)
    except NotFound:
        return None
    record = await chain_state(client, copy_id)
    if not (record.rewind_of or "").startswith(f"{original}@"):
        raise RewindRefused(
            f"--suffix: {copy_id!r} is taken by a chain that is not a copy of {original!r}"
        )
    return Copy(record, running)


async def exists(client: Client, correlation_id: str) -> bool:
    """Whether the correlation has a chain (running or ended)."""
    return await workflow_exists(client, contract.chain_workflow_id(correlation_id))


def rewind_point(log: list[TimelineEntry], to_type: str | None) -> TimelineEntry:
    """The first event of `to_type` in the log (without one: its first event)."""
    found = next((row for row in log if to_type in (None, row.event)), None)
    if found is None:
        wanted = f"no {to_type} event" if to_type else "no event"
        raise RewindRefused(f"--to-type: its log holds {wanted}")
    return found


def unmatched(where: str | None, first: TimelineEntry) -> str | None:
    """Why the correlation's first event fails the `--where` filter (None: it passes), as a
    subscription's filter sees the event: one that cannot be evaluated on it does not match."""
    if where is None:
        return None
    outcome = evaluate(where, first.to_envelope().model_dump(mode="json"))
    if outcome.matched:
        return None
    return f"--where: {outcome.error}" if outcome.error else "--where: no match"


class Batch:
    """One `rewind_many`: what every correlation of it shares."""

    def __init__(
        self,
        client: Client,
        *,
        suffix: str,
        where: str | None,
        to_type: str | None,
        spec: ChainSpec | None,
        agents: dict[str, AgentConfig] | None,
        queue: str | None,
    ) -> None:
        self.client, self.suffix, self.where, self.to_type = client, suffix, where, to_type
        self.spec, self.agents, self.queue = spec, agents, queue

    async def one(self, original: str) -> BatchLine:
        """Rewind one correlation; its refusal becomes its line."""
        copy_id = copy_name(original, self.suffix)
        try:
            return await self._rewound(original, copy_id)
        except CoordError as refusal:
            return BatchLine(
                original=original, copy_id=copy_id, status=LineStatus.REFUSED, reason=str(refusal)
            )

    async def _rewound(self, original: str, copy_id: str) -> BatchLine:
        """A copy whose hand-over completed is skipped; one left halfway by an earlier run is
        finished while it runs, made again once it has ended (never skipped: it would stand as
        a what-if that never saw its whole past)."""
        line = BatchLine(original=original, copy_id=copy_id, status=LineStatus.SKIPPED)
        copy = await existing_copy(self.client, original, copy_id)
        if copy is not None and copy.record.rewind_complete:
            return line
        check = LogCheck()
        log = [row async for row in read_log(self.client, original, check=check)]
        if not log:
            raise RewindRefused("its log holds no event yet")
        if reason := unmatched(self.where, log[0]):
            return line.model_copy(update={"status": LineStatus.FILTERED, "reason": reason})
        require_whole_log(check, original)
        if copy is not None and copy.running:
            return await self._finished(line, log, copy.record)
        point = rewind_point(log, self.to_type).event_id
        if copy is not None:
            await segment_store().remove(copy_id)
        plan = await rewind_chain(
            self.client,
            original,
            to=point,
            copy_id=copy_id,
            spec=self.spec,
            agents=self.agents,
            queue=self.queue,
            replacing=copy is not None,
        )
        update = {
            "status": LineStatus.REWOUND,
            "point": point,
            "recorded": len(plan.recorded),
            "resumed": Resumed.REMADE if copy is not None else None,
        }
        return line.model_copy(update=update)

    async def _finished(
        self, line: BatchLine, log: list[TimelineEntry], copy: ChainState
    ) -> BatchLine:
        """The running copy is sent what its interrupted hand-over had not sent yet (from the
        point it was made at), then the mark that it is complete."""
        point = (copy.rewind_of or "").partition("@")[2]
        plan = plan_rewind(log, original=line.original, copy_id=line.copy_id, point=point)
        held = frozenset([row.event_id async for row in read_log(self.client, line.copy_id)])
        await hand_over(self.client, plan, None, held)
        update = {
            "status": LineStatus.REWOUND,
            "point": plan.point,
            "recorded": len(plan.recorded),
            "resumed": Resumed.FINISHED,
        }
        return line.model_copy(update=update)


@api_call
async def rewind_many(
    client: Client,
    *,
    since: datetime,
    until: datetime,
    suffix: str,
    where: str | None = None,
    to_type: str | None = None,
    spec: ChainSpec | None = None,
    agents: dict[str, AgentConfig] | None = None,
    concurrency: int = 8,
    queue: str | None = None,
    on_line: OnLine | None = None,
) -> BatchReport:
    """Rewind every chain started in [since, until) on `queue` (default: the coordinator's,
    $COORD_TASK_QUEUE; the copies run there too), never a copy, whose first event matches
    `where`, onto `<original><suffix>`, at its first event of `to_type` (default: its first
    event), `concurrency` at a time. A copy whose hand-over completed is skipped, and one an
    interrupted run left halfway is finished (or made again once it has ended), so running the
    batch again finishes an interrupted one. `on_line` hears of each correlation as it is done
    (a progress display)."""
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise BatchRefused(f"--concurrency: {concurrency} is not between 1 and {MAX_CONCURRENCY}")
    copy_name("", suffix)
    if where is not None:
        try:
            compile_filter(where)
        except ValueError as error:
            raise BatchRefused(f"--where: {error}") from None
    batch = Batch(
        client, suffix=suffix, where=where, to_type=to_type, spec=spec, agents=agents, queue=queue
    )
    gate = asyncio.Semaphore(concurrency)

    selected = [original async for original in originals(client, since, until, queue)]

    async def gated(original: str) -> BatchLine:
        async with gate:
            line = await batch.one(original)
        if on_line:
            on_line(line, len(selected))
        return line

    return BatchReport(lines=list(await asyncio.gather(*(gated(c) for c in selected))))


async def record(client: Client, correlation_id: str) -> ChainRecord:
    state = await chain_state(client, correlation_id)
    return ChainRecord(
        status=state.status.value,
        terminal_seen=state.terminal_seen,
        dead_lettered=state.dead_lettered,
    )


@api_call
async def diff_summary(
    client: Client,
    *,
    since: datetime,
    until: datetime,
    suffix: str,
    concurrency: int = 8,
    queue: str | None = None,
) -> DiffSummary:
    """Every chain started in [since, until) on `queue` (never a copy; as `rewind_many`)
    beside its copy `<C><suffix>`: their rows compared and their outcomes, counted."""
    gate = asyncio.Semaphore(concurrency)

    async def compared(original: str) -> tuple[str, PairSummary | None]:
        copy_id = copy_name(original, suffix)
        async with gate:
            if not await exists(client, copy_id):
                return original, None
            rows = await diff_correlations(client, original, copy_id)
            left, right = await record(client, original), await record(client, copy_id)
        return original, pair_summary(rows, left, right)

    selected = [original async for original in originals(client, since, until, queue)]
    done = await asyncio.gather(*(compared(c) for c in selected))
    pairs = [pair for _, pair in done if pair is not None]
    return summarise(pairs, [original for original, pair in done if pair is None])
