"""Sagas: start, wait, read the coordinator record, cancel; a correlation's events."""

import functools
from collections.abc import AsyncIterator
from typing import Any

from temporalio import exceptions
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import TerminatedError
from temporalio.service import RPCError

from coord.infra.hosted_placements import chain_runs, hosted_placements
from coord.infra.temporal import task_queue
from coord.models.events.timeline import TimelineEntry, logical_order
from coord.models.mesh.placement import MAX_PLACED, Placement, PlacementAnswer
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire import contract
from coord.models.wire.versions import SAGA_VERSION
from coord.starter.api.chains import chain_timeline
from coord.starter.api.common import (
    NotFound,
    answered,
    api_call,
    cancel_running,
    current_record,
    ended_mid_task,
    ended_record,
    named_workflow_id,
    refused_spec,
    start_run,
)
from coord.starter.api.correlation import pattern_rows
from coord.workflows.saga import Saga


def saga_summary(spec: SagaSpec) -> str:
    steps = " → ".join(step.name for step in spec.steps)
    return f"Saga {spec.name} ({spec.saga_id}): {steps}"


@api_call
async def start_saga(
    client: Client, spec: SagaSpec, *, queue: str | None = None, eager: bool = True
) -> WorkflowHandle[Any, SagaState]:
    """Start the saga on `queue` (default: $COORD_TASK_QUEUE); `saga_outcome(handle)` waits for
    its record. The server refuses (WorkflowAlreadyStartedError) a saga id already running.
    `eager`, the default: this client's own worker, when one polls `queue` with a free slot,
    takes its first task from the start's answer (`start_run`), a round trip sooner; a client
    without one starts it as usual, so asking costs nothing (a saga's latency is what it is
    held to). A saga is listed `in_progress` from its start: its run then writes its status
    only when it changes. The start carries the saga runtime version (SAGA_VERSION): the run
    takes the patches of that version without recording a marker for them. When this process
    hosts the worker of `queue` (`build_worker`), the start also says where the saga's agents
    run and whether its chain runs (`placed_here`): the run's first workflow task then asks its
    worker nothing."""
    first = SagaState(
        saga_id=spec.saga_id, correlation_id=spec.correlation_id, status=SagaStatus.IN_PROGRESS
    )
    summary = saga_summary(spec)
    if spec.rewind is not None:
        first.rewind_of = spec.rewind.of.search_value()
        summary = f"{summary} ({spec.rewind.of.describe()})"
    details = spec.description or None
    memo: dict[str, Any] = {contract.SAGA_VERSION_MEMO: SAGA_VERSION}
    placed = await placed_here(client, spec, queue or task_queue())
    if placed is not None:
        memo[contract.SAGA_PLACEMENTS_MEMO] = placed.model_dump(mode="json")
    return await start_run(
        client, Saga.run, spec, first, queue, summary, details, eager=eager, memo=memo
    )


async def placed_here(client: Client, spec: SagaSpec, queue: str) -> PlacementAnswer | None:
    """Where the saga's agents run, as the worker this process runs on `queue` places them, and
    whether its correlation's chain runs (one read of the server): what the run's look-up would
    ask. None when this process runs no worker there (or several), when an agent would run
    locally (a local run's place is the worker's to say), or when the server does not answer:
    the run then asks its worker."""
    agents = spec.agents_run()
    placements = hosted_placements(queue, agents) if len(agents) <= MAX_PLACED else None
    if placements is None or Placement.LOCAL in placements.values():
        return None
    try:
        running = await chain_runs(client, spec.correlation_id)
    except RPCError:
        return None
    return PlacementAnswer(agents=placements, chain_runs=running)


def saga_handle(client: Client, saga_id: str) -> WorkflowHandle[Any, SagaState]:
    """The handle of a saga, by its saga id (`saga-<saga_id>`)."""
    return client.get_workflow_handle_for(Saga.run, contract.saga_workflow_id(saga_id))


@api_call
async def saga_outcome(
    handle: WorkflowHandle[Any, SagaState], client: Client | None = None
) -> SagaState:
    """Wait for the saga to end and return its final record, whether it completed or not: a
    failed run carries it in its failure, a cancelled one in its memo (`ended_record`). A run
    that kept neither (cancelled before sagas kept their record in the memo, terminated, timed
    out) answers its `state` query, replayed by a worker (`answered`: given the `client`,
    refused with NoWorker when none answers, as every read that needs a worker is; without
    one, the query waits as the server holds it); a terminated or timed-out one's says how it
    ended (`SagaState.cut_short`), not the status it was left in. One that ended so in the
    middle of a workflow task (`ended_mid_task`, given the `client`: its first one, or one
    running local agents) is not queried: replaying it would run that task's work on, a local
    agent again; its record holds its ids and how it ended alone. A run that refused its spec
    is raised (`ended_record`)."""
    try:
        return await ended_record(handle, contract.SAGA_RECORD_MEMO, SagaState)
    except WorkflowFailureError as failure:
        if refused_spec(failure):
            raise
        how = ended_by(failure.cause)
        if how is None:
            return await answered(client, handle, Saga.state)
        if client is not None and await ended_mid_task(client, handle):
            return (await _started_record(handle)).cut_short(f"{how}{UNREAD_STEPS}")
        return (await answered(client, handle, Saga.state)).cut_short(how)


def ended_by(cause: BaseException | None) -> str | None:
    """How the server or an operator ended the run, when it did (`SagaState.cut_short`)."""
    if isinstance(cause, TerminatedError):
        return f"terminated: {cause.message or 'no reason given'}"
    if isinstance(cause, exceptions.TimeoutError):
        return "timed out: the run passed its execution timeout"
    return None


UNREAD_STEPS = " (during a workflow task: its steps are not read, which would run them again)"
"""What the record of a saga ended mid-task says of the steps it does not show."""


async def _started_record(handle: WorkflowHandle[Any, SagaState]) -> SagaState:
    """The record a saga starts with: its ids, from its workflow id and search attributes."""
    description = await handle.describe()
    correlation_id = description.typed_search_attributes.get(contract.CORRELATION_ID)
    saga_id = contract.saga_id_of(handle.id)
    return SagaState(saga_id=saga_id, correlation_id=correlation_id or saga_id)


async def saga_record(
    handle: WorkflowHandle[Any, SagaState], client: Client | None = None
) -> SagaState:
    """Closed sagas answer from their result, so no worker is needed to read them; a running
    one its `state` query (`answered`, given the `client`), and so does a terminated one,
    saying it was (`saga_outcome`). NotFound without such a saga."""
    name = f"saga {contract.saga_id_of(handle.id)!r}"
    outcome = functools.partial(saga_outcome, client=client)
    return await current_record(handle, outcome, Saga.state, name, client, unkept=outcome)


async def named_saga(client: Client, saga: str) -> WorkflowHandle[Any, SagaState]:
    """The saga a user names by its saga id or its workflow id (`named_workflow_id`)."""
    workflow_id = await named_workflow_id(client, saga, contract.SAGA_ID_PREFIX)
    return client.get_workflow_handle_for(Saga.run, workflow_id)


@api_call
async def saga_state(client: Client, saga: str) -> SagaState:
    """The saga's record (`saga`: its saga id or workflow id): steps done, compensations, the
    events it published; an ended saga's read without a worker."""
    return await saga_record(await named_saga(client, saga), client)


@api_call
async def cancel_saga(client: Client, saga_id: str) -> None:
    """Refused when the saga has ended: the server would accept the request and nothing would
    run, so a caller would believe compensations are under way. `saga_id` may be its workflow
    id too."""
    handle = await named_saga(client, saga_id)
    name = f"saga {saga_id!r}"
    outcome = functools.partial(saga_outcome, client=client)
    await cancel_running(handle, name, outcome, "nothing to cancel, no compensation runs")


@api_call
async def correlation_events(client: Client, correlation_id: str) -> list[TimelineEntry]:
    """The correlation table: the chain's timeline, which holds the events of the sagas,
    aggregators, plans and votes that ran beside it, and every event of theirs it does not hold
    (no chain, or one started later), in logical order (`logical_order`: the chain's sequence,
    then causation; never wall clock). With neither a chain nor any pattern's run, the chain's
    lookup error says what is missing."""
    no_chain: NotFound | None = None
    try:
        entries = await chain_timeline(client, correlation_id)
    except NotFound as error:
        entries, no_chain = [], error
    records = [
        (await saga_record(handle, client)).events
        async for handle in correlated_sagas(client, correlation_id)
    ]
    records += await pattern_rows(client, correlation_id)
    if no_chain is not None and not records:
        raise no_chain
    return logical_order(entries, records)


async def correlated_sagas(
    client: Client, correlation_id: str
) -> AsyncIterator[WorkflowHandle[Any, SagaState]]:
    """Every run of a saga of this correlation, running or closed."""
    query = (
        f"{contract.pattern_clause(contract.Pattern.SAGA)} AND "
        f"{contract.CORRELATION_ID.name} = '{correlation_id}'"
    )
    async for execution in client.list_workflows(query):
        yield client.get_workflow_handle_for(Saga.run, execution.id, run_id=execution.run_id)
