"""Aggregators: start (or start with the first event), read the status table, cancel."""

from datetime import UTC, datetime
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from coord.infra.temporal import task_queue
from coord.infra.tracing import correlation_parent
from coord.models.aggregator.spec import AggregatorSpec, AggregatorState
from coord.models.events.envelope import EventEnvelope
from coord.models.wire import contract
from coord.starter.api.common import (
    Conflict,
    api_call,
    cancel_running,
    current_record,
    ended_record,
    log,
    named_workflow_id,
    undeliverable,
)
from coord.workflows.aggregator import Aggregator


def _aggregator_start_options(spec: AggregatorSpec, queue: str | None) -> dict[str, Any]:
    scope = f" for {spec.correlation_id}" if spec.correlation_id else ""
    waits = ", ".join(slot.describe() for slot in spec.wait_for)
    return {
        "id": spec.workflow_id,
        "task_queue": queue or task_queue(),
        "static_summary": f"Aggregator {spec.aggregator_id}{scope}: waits for {waits}",
        "static_details": spec.description or None,
        "search_attributes": contract.as_start_attributes(
            AggregatorState(
                aggregator_id=spec.aggregator_id,
                correlation_id=spec.correlation_id,
                rewind_of=spec.rewind.of.search_value() if spec.rewind else None,
            ).search_attributes()
        ),
        "id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE,
    }


@api_call
async def start_aggregator(
    client: Client, spec: AggregatorSpec, *, queue: str | None = None, eager: bool = False
) -> WorkflowHandle[Any, AggregatorState]:
    """Start an aggregator on `queue` (default: $COORD_TASK_QUEUE); its first events may arrive
    before it (`lookback`). Undeliverable when one with its workflow id already exists.
    `eager`: this client's own worker takes its first task (`start_run`). When it returns,
    the aggregator is attached to its correlation's running chain (`_attach_to_chain`)."""
    try:
        handle = await client.start_workflow(
            Aggregator.run,
            spec.model_dump(mode="json"),
            request_eager_start=eager,
            **_aggregator_start_options(spec, queue),
        )
    except WorkflowAlreadyStartedError:
        raise Conflict(f"{spec.workflow_id} already exists (running or ended)") from None
    await _attach_to_chain(client, spec)
    return handle


async def _attach_to_chain(client: Client, spec: AggregatorSpec) -> None:
    """The aggregator attaches itself from its first workflow task, which may come after the
    caller's next publish: a chain whose agents all run in its own workflow task can reach its
    terminal event and end before then, without the aggregator's result. The starter attaches
    it first (the chain keeps each listener once), so a chain that ends waits for it. Nothing
    to do without a correlation or a running chain; any other refusal leaves the attach to the
    aggregator."""
    if spec.correlation_id is None:
        return
    chain = client.get_workflow_handle(contract.chain_workflow_id(spec.correlation_id))
    try:
        with correlation_parent(spec.correlation_id):  # the signal carries no event to tell it
            await chain.signal(contract.ATTACH_SIGNAL, spec.workflow_id)
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            log.warning("aggregator_attach_left_to_it", chain=chain.id, error=error.message)


async def publish_to_aggregator(
    client: Client, envelope: EventEnvelope, spec: AggregatorSpec, *, queue: str | None = None
) -> str:
    """Signal-with-start: the first event starts the aggregator, and is never lost to a race."""
    try:
        await client.start_workflow(
            Aggregator.run,
            spec.model_dump(mode="json"),
            start_signal=contract.EVENT_SIGNAL,
            start_signal_args=[envelope.model_dump(mode="json")],
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            **_aggregator_start_options(spec, queue),
        )
    except (RPCError, WorkflowAlreadyStartedError) as error:
        missing = f"no workflow {spec.workflow_id!r}"
        raise await undeliverable(client, spec.workflow_id, envelope, error, missing) from None
    return spec.workflow_id


def aggregator_handle(client: Client, workflow_id: str) -> WorkflowHandle[Any, AggregatorState]:
    """The handle of an aggregator, by its workflow id or its aggregator id; a name that starts
    with `aggregator-` is taken as a workflow id (`named_aggregator` asks which it is)."""
    return aggregator_run(client, contract.as_aggregator_workflow_id(workflow_id))


async def named_aggregator(client: Client, name: str) -> WorkflowHandle[Any, AggregatorState]:
    """The aggregator a user names by its own id or its workflow id (`named_workflow_id`)."""
    prefix = contract.AGGREGATOR_ID_PREFIX
    return aggregator_run(client, await named_workflow_id(client, name, prefix))


def aggregator_run(client: Client, workflow_id: str) -> WorkflowHandle[Any, AggregatorState]:
    """The aggregator whose workflow id is `workflow_id`, as given (a listing's,
    `named_aggregator`'s): one started from the Temporal CLI may have any."""
    return client.get_workflow_handle_for(Aggregator.run, workflow_id)


@api_call
async def cancel_aggregator(client: Client, workflow_id: str) -> str:
    """Stop an aggregator before it completes or times out; its record (kept in its memo)
    stays readable with `aggregator_state`. Returns the cancelled run's workflow id."""
    handle = await named_aggregator(client, workflow_id)
    await cancel_running(handle, aggregator_name(handle), _aggregator_outcome)
    return handle.id


@api_call
async def aggregator_state(client: Client, workflow_id: str) -> AggregatorState:
    """The record, with the time left until the deadline as of now (the query cannot know
    the time: it answers as of the run's last workflow task). An ended run is read without a
    worker: from its result, or a cancelled one from its memo."""
    return await aggregator_record(await named_aggregator(client, workflow_id), client)


async def aggregator_record(
    handle: WorkflowHandle[Any, AggregatorState], client: Client | None = None
) -> AggregatorState:
    """`aggregator_state`'s record, of the aggregator `handle` names (`current_record`: a
    running one's by `answered`, given the `client`; one whose spec was invalid raises its
    failure, as a plan or vote does, rather than answer a record it never had)."""
    name = aggregator_name(handle)
    record = await current_record(handle, _aggregator_outcome, Aggregator.state, name, client)
    return record.as_of(datetime.now(UTC))


@api_call
async def _aggregator_outcome(handle: WorkflowHandle[Any, AggregatorState]) -> AggregatorState:
    """An ended aggregator's record: its result, or a cancelled one's memo (`ended_record`)."""
    return await ended_record(handle, contract.AGGREGATOR_RECORD_MEMO, AggregatorState)


def aggregator_name(handle: WorkflowHandle[Any, Any]) -> str:
    """The aggregator in the user's words: `aggregator 'phase1~story-42'`."""
    return f"aggregator {handle.id.removeprefix(contract.AGGREGATOR_ID_PREFIX)!r}"
