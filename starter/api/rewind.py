"""Rewind a correlation onto a copy (`coord rewind`) and compare two correlations (`coord diff`).

A rewind reads the original chain's whole log (`read_log`), splits it at the rewind point
(`coord.models.rewind.plan`), starts the copy's chain marked with where it comes from, hands it
the past as recorded events (matched, never run again), copies the aggregators and votes at work
at the point with their slots and ballots then (`rewind_patterns`), then re-delivers what came
from outside after the point in its original order and timing; from the point on, the copy runs
for real with its own agents and specs. The original is only read, never sent anything."""

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle

from coord.models.chain.spec import (
    RECORDED_BATCH,
    ChainInput,
    ChainSpec,
    RecordedEvents,
)
from coord.models.events.envelope import EventEnvelope
from coord.models.events.log import LogCheck
from coord.models.events.rewind import RewindOrigin
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.config import AgentConfig
from coord.models.plan.rewind import reused_tasks
from coord.models.plan.spec import PlanRewind, PlanSpec, PlanState
from coord.models.rewind.diff import CorrelationDiff, diff_logs, pair_outcomes
from coord.models.rewind.plan import RewindPlan, RewindRefused, plan_rewind, require_whole_log
from coord.models.saga.spec import RecordedStep, SagaRewind, SagaSpec, SagaState
from coord.models.wire import contract
from coord.models.wire.sizes import json_size
from coord.starter.api.chains import chain_handle, publish, start_chain
from coord.starter.api.common import Conflict, NotFound, api_call, described, started_input
from coord.starter.api.log import read_log
from coord.starter.api.plans import named_plan, plan_state, start_plan
from coord.starter.api.rewind_patterns import PatternRewind, listed_runs
from coord.starter.api.sagas import correlation_events, saga_handle, saga_record, start_saga

M = TypeVar("M", bound=BaseModel)

RECORDED_BATCH_BYTES = 512 * 1024
"""A `recorded` signal's payloads at most, well under the server's 2 MB a payload."""


@api_call
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
    specs: Mapping[str, Mapping[str, Any]] | None = None,
    replacing: bool = False,
) -> RewindPlan:
    """Rewind the correlation `original` to the event `to` onto the new correlation
    `copy_id`: its chain, with `spec` instead of the original's, and each aggregator, vote,
    saga and plan at work at that point (`rewind_patterns`), with `specs[name]` (a spec
    document) instead of the original's where given; `agents` are declared inline in every copy
    (fixed agents). What came from outside after the point is re-delivered its original gaps
    divided by `speed` (None or 0: at once). Returns the plan it followed. RewindRefused when
    the log has a gap anywhere, or a name of `specs` matches no pattern at work; Conflict when
    `copy_id` already has runs (`new_correlation`). `replacing`: the copy's chain may have
    ended already (an unfinished copy made again), a new run after it."""
    log = await whole_log(client, original)
    plan = plan_rewind(log, original=original, copy_id=copy_id, point=to)
    if not replacing:
        await new_correlation(client, copy_id)
    point = next(row for row in log if row.event_id == plan.point)
    patterns = PatternRewind(client, plan, agents=agents, specs=specs, queue=queue)
    plan.made_by_copies(await patterns.prepare(plan.recorded, point))
    copy_spec = spec or await original_spec(client, original)
    if agents:
        copy_spec = copy_spec.model_copy(update={"agents": {**copy_spec.agents, **agents}})
    origin = RewindOrigin(original=original, at=plan.point)
    await start_chain(
        client, copy_spec, copy_id, queue=queue, rewind_of=origin, replacing=replacing
    )
    await hand_over(client, plan, speed, patterns=patterns)
    return plan


async def new_correlation(client: Client, copy_id: str) -> None:
    """Refuses a copy onto a correlation that already has runs (a chain, saga, plan, vote or
    aggregator, running or ended), naming one: the copy's events would share a table with
    theirs, `coord diff` would compare a mixture, and a running saga or plan of it would
    publish into the copy's chain. Visibility lists a run a moment after it starts; a chain it
    has not listed yet is still refused by the chain's own start."""
    taken = await listed_runs(client, copy_id)
    if taken:
        run = taken[0]
        raise Conflict(
            f"the copy's correlation {copy_id!r} is taken: it already has {run.workflow_id} "
            f"({run.status or 'started'}); a copy needs a correlation id of its own"
        )


async def hand_over(
    client: Client,
    plan: RewindPlan,
    speed: float | None,
    held: frozenset[str] = frozenset(),
    patterns: PatternRewind | None = None,
) -> None:
    """The copy is sent its past as recorded events, then its `patterns` are started (they
    attach to a chain that holds its past), then what came from outside after the point, then
    the mark that its hand-over is complete (`ChainState.rewind_complete`): a copy without the
    mark was interrupted. `held`: the events the copy has already (a hand-over finished after
    an interruption), never sent twice."""
    rest = plan.model_copy(
        update={
            "recorded": [row for row in plan.recorded if row.event_id not in held],
            "redelivered": [item for item in plan.redelivered if item.row.event_id not in held],
        }
    )
    handle = chain_handle(client, plan.copy_id)
    for batch in batches(rest.recorded, plan.copy_id):
        await handle.signal(
            contract.RECORDED_SIGNAL, RecordedEvents(events=batch).model_dump(mode="json")
        )
    if patterns is not None:
        await patterns.start()
    await redeliver(client, rest, speed)
    complete = RecordedEvents(events=[], complete=True)
    await handle.signal(contract.RECORDED_SIGNAL, complete.model_dump(mode="json"))


async def whole_log(client: Client, original: str) -> list[TimelineEntry]:
    """Every row of the original's log; RewindRefused naming what is missing when it has a gap
    anywhere (a copy must start from a state the original had, and see all it saw after)."""
    check = LogCheck()
    log = [row async for row in read_log(client, original, check=check)]
    require_whole_log(check, original)
    return log


async def original_spec(client: Client, original: str) -> ChainSpec:
    """The spec the original chain runs with, from its current run's input."""
    return (await started_with(client, chain_handle(client, original), ChainInput)).spec


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


@api_call
async def rewind_saga(
    client: Client,
    saga_id: str,
    *,
    to_step: int,
    copy_id: str,
    agents: dict[str, AgentConfig] | None = None,
    input: dict[str, Any] | None = None,
    queue: str | None = None,
) -> WorkflowHandle[Any, SagaState]:
    """Re-run the saga `saga_id` from its step `to_step` (numbered from 1) as the new saga
    `copy_id`, its own correlation: the steps before are the original's (results, events and
    compensations as they stood, never run again), the rest run with `agents` declared inline
    (fixed agents) and `input` merged into the saga's input. RewindRefused when the original
    did not complete the steps before; Conflict when `copy_id` already has runs."""
    original = saga_handle(client, saga_id)
    record = await saga_record(original)
    spec = await started_with(client, original, SagaSpec)
    if not 1 < to_step <= len(spec.steps):
        raise RewindRefused(f"--to-step: {to_step} is not a step after the first of {saga_id!r}")
    if copy_id == saga_id:
        raise RewindRefused(f"--as: the copy needs its own saga id, not {saga_id!r}")
    await new_correlation(client, copy_id)
    reused = [recorded_step(record, index) for index in range(1, to_step)]
    point = spec.steps[to_step - 1].name
    rewind = SagaRewind(
        of=RewindOrigin(original=saga_id, at=f"step {to_step} {point}"), steps=reused
    )
    fields = {"saga_id": copy_id, "input": {**spec.input, **(input or {})}}
    copy = copied(spec, copy_id, agents, rewind, **fields)
    return await start_saga(client, copy, queue=queue)


@api_call
async def rewind_plan(
    client: Client,
    plan_id: str,
    *,
    copy_id: str,
    to_task: str | None = None,
    agents: dict[str, AgentConfig] | None = None,
    queue: str | None = None,
) -> WorkflowHandle[Any, PlanState]:
    """Re-run the plan `plan_id` as the new plan `copy_id`, its own correlation: `to_task` and
    what depends on it run again (without it, every task that did not succeed), the other
    tasks that succeeded are reused as they stood, never run again; `agents` are declared
    inline (fixed agents). RewindRefused for a planned plan, or a task it does not have;
    Conflict when `copy_id` already has runs."""
    original = await named_plan(client, plan_id)
    await described(original, NotFound(f"plan {plan_id!r} does not exist"))
    spec = await started_with(client, original, PlanSpec)
    if spec.planner is not None:
        raise RewindRefused(f"plan {plan_id!r} was written by its planner: rewind it by hand")
    if copy_id == plan_id:
        raise RewindRefused(f"--as: the copy needs its own plan id, not {plan_id!r}")
    await new_correlation(client, copy_id)
    try:
        reused = reused_tasks(spec, await plan_state(client, plan_id), to_task)
    except ValueError as error:
        raise RewindRefused(str(error)) from None
    at = to_task or "its unfinished tasks"
    rewind = PlanRewind(of=RewindOrigin(original=plan_id, at=at), tasks=reused)
    copy = copied(spec, copy_id, agents, rewind, plan_id=copy_id)
    return await start_plan(client, copy, queue=queue)


S = TypeVar("S", SagaSpec, PlanSpec)


def copied(
    spec: S,
    copy_id: str,
    agents: dict[str, AgentConfig] | None,
    rewind: SagaRewind | PlanRewind,
    **fields: Any,
) -> S:
    """A rewound copy's spec: its own id (`fields`) and correlation, the fixed `agents` over the
    original's inline ones, and its past; validated again, as a spec that came in would be."""
    update = {
        "correlation_id": copy_id,
        "agents": {**spec.agents, **(agents or {})},
        "rewind": rewind,
        **fields,
    }
    return type(spec).model_validate(spec.model_copy(update=update).model_dump())


def recorded_step(record: SagaState, index: int) -> RecordedStep:
    """Step `index` of the original as it completed: its result is the payload of the event it
    announced. Refused when it did not complete (nothing to reuse)."""
    done = next((d for d in record.completed_steps if d.step == index), None)
    event = next((e for e in record.events if done and e.event_id == done.event_id), None)
    if done is None or event is None:
        raise RewindRefused(
            f"--to-step: step {index} of {record.saga_id!r} did not complete, so there is no "
            "result to reuse; rewind to it or to an earlier step"
        )
    return RecordedStep(name=done.name, result=event.payload, event=event)


async def started_with(client: Client, handle: WorkflowHandle[Any, Any], model: type[M]) -> M:
    """What the workflow's current run was started with, read from its history."""
    return model.model_validate(await started_input(client, handle))


@api_call
async def diff_correlations(client: Client, left: str, right: str) -> CorrelationDiff:
    """The correlations `left` and `right` side by side (a rewound copy beside its original)."""
    compared = diff_logs(left, await _in_order(client, left), right, await _in_order(client, right))
    runs = [await listed_runs(client, left), await listed_runs(client, right)]
    compared.outcomes = pair_outcomes(left, runs[0], right, runs[1])
    return compared


async def _in_order(client: Client, correlation_id: str) -> list[TimelineEntry]:
    """The correlation table numbered in its own order: the chain's rows and those of the
    patterns beside it share one sequence."""
    rows = await correlation_events(client, correlation_id)
    return [row.model_copy(update={"seq": n}) for n, row in enumerate(rows, start=1)]
