"""Reactive chains: start, publish (signal-with-start), read the timeline, close; and where an
event goes, all in one place (`deliver`): one workflow (`to`), its correlation's chain and every
running aggregator scoped to that correlation, or every running chain (`broadcast`). Each target
is signalled on its own, and the `Delivery` says which were reached and why each other was
skipped."""

import contextlib
import os
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from coord.infra.signals import running, signal_each, target_name
from coord.infra.temporal import task_queue
from coord.models.aggregator.spec import AggregatorSpec
from coord.models.chain.spec import (
    SERVER_SIGNALS_PER_RUN,
    ChainInput,
    ChainSpec,
    ChainState,
)
from coord.models.events.delivery import Delivery
from coord.models.events.envelope import EventEnvelope
from coord.models.events.rewind import RewindOrigin
from coord.models.events.timeline import TimelineEntry
from coord.models.wire import contract
from coord.starter.api.aggregators import publish_to_aggregator
from coord.starter.api.common import (
    Conflict,
    NotFound,
    NoWorker,
    Undeliverable,
    answered,
    api_call,
    closed_with_result,
    described,
    ended_or_missing,
    undeliverable,
)
from coord.workflows.chain.reactive import ReactiveChain


def chain_summary(spec: ChainSpec, correlation_id: str) -> str:
    return f"Chain {spec.name} for {correlation_id}"


def chain_handle(client: Client, correlation_id: str) -> WorkflowHandle[Any, ChainState]:
    """The handle of the chain of a correlation (`chain-<correlation_id>`)."""
    return client.get_workflow_handle_for(
        ReactiveChain.run, contract.chain_workflow_id(correlation_id)
    )


def _chain_start_options(
    spec: ChainSpec,
    correlation_id: str,
    queue: str | None,
    rewind_of: RewindOrigin | None = None,
    replacing: bool = False,
) -> dict[str, Any]:
    copy_of = rewind_of.search_value() if rewind_of is not None else None
    first = ChainState(correlation_id=correlation_id, spec=spec.name, rewind_of=copy_of)
    summary = chain_summary(spec, correlation_id)
    if rewind_of is not None:
        summary = f"{summary} ({rewind_of.describe()})"
    return {
        "id": contract.chain_workflow_id(correlation_id),
        "task_queue": queue or task_queue(),
        "static_summary": summary,
        "static_details": spec.description or None,
        "search_attributes": contract.as_start_attributes(first.search_attributes()),
        "id_reuse_policy": (
            WorkflowIDReusePolicy.ALLOW_DUPLICATE
            if replacing
            else WorkflowIDReusePolicy.REJECT_DUPLICATE
        ),
        "task_timeout": CHAIN_TASK_TIMEOUT,
    }


SIGNALS_PER_RUN_ENV = "COORD_SIGNALS_PER_RUN"
CHAIN_TASK_TIMEOUT = timedelta(seconds=30)
"""Three times Temporal's default, inherited across continue-as-new: a busy worker that must
replay a run under a flood finishes the replay instead of timing out and starting over."""
ANSWER_TIME = timedelta(seconds=30)
"""How long an acknowledged publish waits for a worker to take the event up and answer."""
PUBLISH_PATIENCE = timedelta(seconds=60)
"""How long a publish waits, retrying, for a chain that is at the server's limit to continue."""


class ChainBusy(Undeliverable):
    """The server refused the event for now: the chain's run has taken all the signals the
    server allows one run, or is closing, while it continues as new. Nothing was delivered or
    parked; publishing again is safe (events are deduplicated by id)."""


def signals_per_run() -> int:
    """The server's `history.maximumSignalsPerExecution`, when it is not the default: chains
    started from here continue-as-new well before it."""
    return int(os.environ.get(SIGNALS_PER_RUN_ENV, SERVER_SIGNALS_PER_RUN))


def _chain_input(
    spec: ChainSpec, correlation_id: str, rewind_of: RewindOrigin | None = None
) -> dict[str, Any]:
    return ChainInput(
        spec=spec,
        correlation_id=correlation_id,
        signals_per_run=signals_per_run(),
        rewind_of=rewind_of,
    ).model_dump(mode="json", exclude={"rewind_of"} if rewind_of is None else None)


def refused_for_now(error: BaseException) -> bool:
    """What the server answers while a chain's run is full or closing, until it has continued
    as new: past its limit of signals per run, InvalidArgument "exceeded workflow execution limit
    for signal events"; while the run is closing, ResourceExhausted; an acknowledged publish's
    `chain_busy` refusal while the run is overdue to continue as new."""
    if isinstance(error, WorkflowUpdateFailedError):
        return contract.failure_type_of(error.cause) == contract.FailureType.CHAIN_BUSY
    if not isinstance(error, RPCError):
        return False
    full = error.status == RPCStatusCode.INVALID_ARGUMENT and "limit for signal" in error.message
    return full or error.status == RPCStatusCode.RESOURCE_EXHAUSTED


async def with_backpressure(
    send: Callable[[], Awaitable[None]],
    correlation_id: str,
    what: str = "the event",
    again: str = "nothing was delivered or parked: publish it again",
) -> None:
    """Sends, and while the server refuses for now, waits (backing off, with jitter, so many
    publishers do not come back at once) and sends again, to the new run, for at most
    `PUBLISH_PATIENCE`; then says so with `ChainBusy` (`what` was refused; `again`)."""
    retrying = AsyncRetrying(
        retry=retry_if_exception(refused_for_now),
        wait=wait_random_exponential(multiplier=0.05, max=2),
        stop=stop_after_delay(PUBLISH_PATIENCE),
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                await send()
    except (RPCError, WorkflowUpdateFailedError) as error:
        if not refused_for_now(error):
            raise
        raise ChainBusy(
            f"the chain for correlation id {correlation_id!r} refused {what} for "
            f"{PUBLISH_PATIENCE.total_seconds():.0f}s while continuing as new "
            f"({contract.failure_message(error)}); {again}"
        ) from None


@api_call
async def start_chain(
    client: Client,
    spec: ChainSpec,
    correlation_id: str,
    *,
    queue: str | None = None,
    rewind_of: RewindOrigin | None = None,
    eager: bool = False,
    replacing: bool = False,
) -> WorkflowHandle[Any, ChainState]:
    """Start the chain of `correlation_id` on `queue` (default: $COORD_TASK_QUEUE), waiting for
    its triggers (a rewound copy names its original in `rewind_of`). Undeliverable when the
    correlation already has a chain, running or ended (`replacing`: ended is allowed, a new
    run after it). `eager`: this client's own worker takes its first task (`start_run`)."""
    try:
        return await client.start_workflow(
            ReactiveChain.run,
            _chain_input(spec, correlation_id, rewind_of),
            request_eager_start=eager,
            **_chain_start_options(spec, correlation_id, queue, rewind_of, replacing),
        )
    except WorkflowAlreadyStartedError:
        raise Conflict(
            f"a chain for correlation id {correlation_id!r} already exists (running or ended)"
        ) from None


@api_call
async def deliver(
    client: Client,
    envelope: EventEnvelope,
    *,
    spec: ChainSpec | AggregatorSpec | None = None,
    to: str | None = None,
    queue: str | None = None,
) -> Delivery:
    """Deliver an event where it belongs: to one workflow (`to`), or to its correlation's chain
    and every running aggregator scoped to that correlation, each on its own: a target that has
    ended, or a chain that does not exist, is skipped and reported; only an event that reached
    nothing fails (NotFound when the correlation has no chain and no running aggregator). An
    aggregator spec starts that aggregator with the event (signal-with-start)."""
    if isinstance(spec, AggregatorSpec):
        return Delivery(reached=[await publish_to_aggregator(client, envelope, spec, queue=queue)])
    if to is not None:
        await signal_event(client, to, envelope)
        return Delivery(reached=[to])
    correlation_id = envelope.event.correlation_id or ""
    aggregators = await running(client, contract.Pattern.AGGREGATOR, correlation_id)
    delivery = await signal_each(client, aggregators, envelope.model_dump(mode="json"))
    try:
        delivery.reached.append(await publish(client, envelope, spec=spec, queue=queue))
    except (Undeliverable, NotFound) as error:
        if not delivery.reached:
            raise
        delivery.skipped.append(str(error))
    return delivery


@api_call
async def broadcast(client: Client, envelope: EventEnvelope) -> Delivery:
    """Deliver a topic-wide event (an alert, say) to every running chain; each takes it as its
    own correlation's. A chain that has ended since it was listed is skipped and reported; only
    an event that reached no chain fails."""
    event = envelope.model_dump(mode="json")
    event["event"]["correlation_id"] = None
    chains = await running(client, contract.Pattern.CHAIN)
    delivery = await signal_each(client, chains, event)
    if not delivery.reached:
        skipped = f" ({'; '.join(delivery.skipped)})" if delivery.skipped else ""
        raise Undeliverable(f"no running chain took event {envelope.event.id}{skipped}")
    return delivery


def chain_correlation(envelope: EventEnvelope) -> str:
    """The correlation id of the chain an event is published to; Undeliverable without one."""
    correlation_id = envelope.event.correlation_id
    if not correlation_id:
        raise Undeliverable("the event has no correlation_id, so it belongs to no chain")
    return correlation_id


@api_call
async def publish(
    client: Client,
    envelope: EventEnvelope,
    *,
    spec: ChainSpec | None = None,
    queue: str | None = None,
) -> str:
    """Deliver an event to its correlation's chain. With a spec the chain is started if needed
    (signal-with-start), so an event published before the chain exists is not lost. NotFound
    without a spec when the correlation has no chain; Undeliverable when it has ended (the
    event is parked)."""
    correlation_id = chain_correlation(envelope)
    event = envelope.model_dump(mode="json")

    async def send() -> None:
        if spec is None:
            await chain_handle(client, correlation_id).signal(ReactiveChain.event, event)
        else:
            await client.start_workflow(
                ReactiveChain.run,
                _chain_input(spec, correlation_id),
                start_signal=contract.EVENT_SIGNAL,
                start_signal_args=[event],
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                **_chain_start_options(spec, correlation_id, queue),
            )

    try:
        await with_backpressure(send, correlation_id)
    except (RPCError, WorkflowAlreadyStartedError) as error:
        raise await _not_delivered(client, correlation_id, envelope, error) from None
    return contract.chain_workflow_id(correlation_id)


def _no_chain(correlation_id: str) -> str:
    return (
        f"no chain for correlation id {correlation_id!r}; start one with "
        "`coord chain start SPEC --correlation-id ...` or publish with --spec"
    )


async def _not_delivered(
    client: Client, correlation_id: str, envelope: EventEnvelope, error: Exception
) -> Undeliverable:
    """Why a publish to the chain of `correlation_id` did not land (the event then parked)."""
    workflow_id = contract.chain_workflow_id(correlation_id)
    return await undeliverable(client, workflow_id, envelope, error, _no_chain(correlation_id))


async def _not_taken(
    client: Client, correlation_id: str, envelope: EventEnvelope, error: Exception
) -> contract.PublishAnswer:
    """An acknowledged publish the server would not hand to the chain: a refusal when the chain
    has ended (its publisher has the answer, so nothing is parked, as for any refusal);
    NotFound when there is no chain; Undeliverable when the server refused for another reason."""
    workflow_id = contract.chain_workflow_id(correlation_id)
    handle = client.get_workflow_handle(workflow_id)
    description = await described(handle, NotFound(_no_chain(correlation_id)))
    if description.status in (None, WorkflowExecutionStatus.RUNNING):
        raise Undeliverable(f"{workflow_id} did not take event {envelope.event.id}: {error}")
    return contract.PublishAnswer(
        verdict="refused",
        event_id=envelope.event.id,
        workflow_id=workflow_id,
        failure_type=contract.FailureType.CHAIN_ENDED,
        reason=(
            f"the chain has ended ({description.status.name.lower()}); nothing was recorded "
            "or parked"
        ),
    )


@api_call
async def publish_acked(
    client: Client,
    envelope: EventEnvelope,
    *,
    spec: ChainSpec | None = None,
    queue: str | None = None,
    answer_time: timedelta = ANSWER_TIME,
) -> contract.PublishAnswer:
    """Deliver an event to its correlation's chain and learn at once what became of it (the
    `publish` update): accepted with its timeline number, a duplicate of an event seen before,
    or refused and why (nothing recorded or parked), `chain_ended` when the chain has ended. With
    a spec the chain is started if needed (update-with-start). NotFound when there is no
    chain; NoWorker when no worker answered within `answer_time`."""
    correlation_id = chain_correlation(envelope)
    answers: list[contract.PublishAnswer] = []

    async def send() -> None:
        answers.append(await _ask(client, envelope, spec, queue, answer_time))

    try:
        await with_backpressure(send, correlation_id)
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise NoWorker(
            f"the chain for correlation id {correlation_id!r}: no worker took the event up "
            f"within {answer_time.total_seconds():g}s (is one running on its task queue?); "
            "publish it again: events are deduplicated by id"
        ) from None
    except (RPCError, WorkflowAlreadyStartedError) as error:
        return await _not_taken(client, correlation_id, envelope, error)
    return answers[-1]


async def _ask(
    client: Client,
    envelope: EventEnvelope,
    spec: ChainSpec | None,
    queue: str | None,
    answer_time: timedelta,
) -> contract.PublishAnswer:
    """One acknowledged publish: the chain's answer, or its validator's refusal as an answer
    (a `chain_busy` one is raised, for `with_backpressure` to publish again)."""
    correlation_id = envelope.event.correlation_id or ""
    event = envelope.model_dump(mode="json")
    try:
        if spec is None:
            answer: contract.PublishAnswer = await chain_handle(
                client, correlation_id
            ).execute_update(
                contract.PUBLISH_UPDATE,
                event,
                result_type=contract.PublishAnswer,
                rpc_timeout=answer_time,
            )
            return answer
        start = WithStartWorkflowOperation(
            ReactiveChain.run,
            _chain_input(spec, correlation_id),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            **_chain_start_options(spec, correlation_id, queue),
        )
        started: contract.PublishAnswer = await client.execute_update_with_start_workflow(
            contract.PUBLISH_UPDATE,
            event,
            start_workflow_operation=start,
            result_type=contract.PublishAnswer,
            rpc_timeout=answer_time,
        )
        return started
    except WorkflowUpdateFailedError as refused:
        if refused_for_now(refused):
            raise
        kind = contract.failure_type_of(refused.cause)
        return contract.PublishAnswer(
            verdict="refused",
            event_id=envelope.event.id,
            workflow_id=contract.chain_workflow_id(correlation_id),
            failure_type=kind,
            # A validator's refusal comes back as "<type>: <message>".
            reason=contract.failure_message(refused.cause).removeprefix(f"{kind}: "),
        )


@api_call
async def chain_state(client: Client, correlation_id: str) -> ChainState:
    """The chain's record: an ended chain's from its result (no worker needed), a running
    one's from its `state` query."""
    handle = chain_handle(client, correlation_id)
    await described(handle, no_chain(correlation_id))
    if await closed_with_result(handle):
        with contextlib.suppress(WorkflowFailureError):
            return await handle.result()
    return await answered(client, handle, ReactiveChain.state)


@api_call
async def chain_timeline(client: Client, correlation_id: str) -> list[TimelineEntry]:
    """The correlation table: one row per event the chain saw, with the ids linking each to
    its cause (`causation_id`, `causes`), oldest first."""
    handle = chain_handle(client, correlation_id)
    await described(handle, no_chain(correlation_id))
    return await answered(client, handle, ReactiveChain.timeline)


@api_call
async def chain_running(client: Client, correlation_id: str) -> bool:
    """Whether the correlation's chain is still running (NotFound: it has none)."""
    description = await described(chain_handle(client, correlation_id), no_chain(correlation_id))
    return description.status == WorkflowExecutionStatus.RUNNING


def no_chain(correlation_id: str) -> NotFound:
    """What a read of a correlation without a chain raises, in the user's words."""
    return NotFound(f"no chain for correlation id {correlation_id!r}")


@api_call
async def close_chain(client: Client, correlation_id: str) -> None:
    """A run that is full or closing is waited for, as a publish is: the close goes to the run
    it continues as (`with_backpressure`)."""
    handle = chain_handle(client, correlation_id)

    async def send() -> None:
        await handle.signal(ReactiveChain.close)

    try:
        await with_backpressure(
            send, correlation_id, "the close", "it is still open: close it again"
        )
    except RPCError as error:
        name = target_name(handle.id)
        raise await ended_or_missing(
            handle, name, "nothing to close", error, _chain_outcome
        ) from None


async def _chain_outcome(handle: WorkflowHandle[Any, ChainState]) -> ChainState:
    """An ended chain's record, its result (`closed`, `idle_closed`: it ended as completed)."""
    return await handle.result()


async def signal_event(client: Client, workflow_id: str, envelope: EventEnvelope) -> None:
    try:
        await client.get_workflow_handle(workflow_id).signal(
            contract.EVENT_SIGNAL, envelope.model_dump(mode="json")
        )
    except RPCError as error:
        raise await undeliverable(
            client, workflow_id, envelope, error, f"no workflow {workflow_id!r}"
        ) from None
