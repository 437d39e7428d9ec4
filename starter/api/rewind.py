"""Rewind a correlation onto a copy (`coord rewind`) and compare two correlations (`coord diff`).

A rewind reads the original chain's log, splits it at the rewind point
(`coord.models.rewind.plan`), starts the copy's chain marked with where it comes from, hands it
the past as recorded events (matched, never run again), then re-delivers what came from outside
after the point in its original order and timing; from the point on, the copy runs for real
with its own agents and spec. The original is only read, never sent anything."""

import asyncio
from collections.abc import Iterator, Sequence

from temporalio.client import Client

from coord.models.chain.spec import (
    RECORDED_BATCH,
    ChainInput,
    ChainSpec,
    RecordedEvents,
    RewindOrigin,
)
from coord.models.events.envelope import EventEnvelope
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.config import AgentConfig
from coord.models.rewind.diff import CorrelationDiff, diff_logs
from coord.models.rewind.plan import RewindPlan, plan_rewind
from coord.models.wire import contract
from coord.models.wire.sizes import json_size
from coord.starter.api.chains import chain_handle, chain_timeline, publish, start_chain
from coord.starter.api.sagas import correlation_events

RECORDED_BATCH_BYTES = 512 * 1024
"""A `recorded` signal's payloads at most, well under the server's 2 MB a payload."""


async def rewind_chain(
    client: Client,
    original: str,
    *,
    to: str,
    copy_id: str,
    spec: ChainSpec | None = None,
    agents: dict[str, AgentConfig] | None = None,
    speed: float | None = None,
    queue: str | None = None,
) -> RewindPlan:
    """Rewind the chain of `original` to the event `to` onto the new correlation `copy_id`,
    with `spec` instead of the original's and `agents` declared inline (fixed agents); the
    past is re-delivered its original gaps divided by `speed` (None or 0: at once). Returns the
    plan it followed. RewindRefused when the log before the point is incomplete."""
    plan = plan_rewind(
        await chain_timeline(client, original), original=original, copy_id=copy_id, point=to
    )
    copy_spec = spec or await original_spec(client, original)
    if agents:
        copy_spec = copy_spec.model_copy(update={"agents": {**copy_spec.agents, **agents}})
    origin = RewindOrigin(correlation_id=original, event_id=to)
    handle = await start_chain(client, copy_spec, copy_id, queue=queue, rewind_of=origin)
    for batch in batches(plan.recorded, copy_id):
        await handle.signal(
            contract.RECORDED_SIGNAL, RecordedEvents(events=batch).model_dump(mode="json")
        )
    await redeliver(client, plan, speed)
    return plan


async def original_spec(client: Client, original: str) -> ChainSpec:
    """The spec the original chain runs with, from its current run's input."""
    history = await chain_handle(client, original).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [raw] = await client.data_converter.decode(started.input.payloads[:1])
    return ChainInput.model_validate(raw).spec


def moved(row: TimelineEntry, copy_id: str) -> EventEnvelope:
    """A row of the original as an event of the copy: the same id, type, cause and payload."""
    envelope = row.to_envelope()
    envelope.event.correlation_id = copy_id
    envelope.routing.partition_key = copy_id
    return envelope


def batches(rows: Sequence[TimelineEntry], copy_id: str) -> Iterator[list[EventEnvelope]]:
    """The past in signals of at most RECORDED_BATCH events and about RECORDED_BATCH_BYTES."""
    batch: list[EventEnvelope] = []
    size = 0
    for row in rows:
        envelope = moved(row, copy_id)
        if batch and (len(batch) == RECORDED_BATCH or size > RECORDED_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(envelope)
        size += json_size(row.payload)
    if batch:
        yield batch


async def redeliver(client: Client, plan: RewindPlan, speed: float | None) -> None:
    """What reached the original from outside after the point, sent to the copy in order."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    for after, row in plan.schedule(speed):
        await asyncio.sleep(max(0.0, started + after - loop.time()))
        await publish(client, moved(row, plan.copy_id))


async def diff_correlations(client: Client, left: str, right: str) -> CorrelationDiff:
    """The correlations `left` and `right` side by side (a rewound copy beside its original)."""
    return diff_logs(left, await _in_order(client, left), right, await _in_order(client, right))


async def _in_order(client: Client, correlation_id: str) -> list[TimelineEntry]:
    """The correlation table numbered in its own order: the chain's rows and those of the
    patterns beside it share one sequence."""
    rows = await correlation_events(client, correlation_id)
    return [row.model_copy(update={"seq": n}) for n, row in enumerate(rows, start=1)]
