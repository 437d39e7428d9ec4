"""Shared by the API modules: starting and cancelling a run, why an event could not be delivered,
and closed runs."""

import functools
import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, ParamSpec, Protocol, TypeVar

from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.types import MethodAsyncSingleParam, MethodSyncOrAsyncNoParam

from coord.infra.dead_letters import park_dead_letter
from coord.infra.logs import get_logger
from coord.infra.queues import task_queue_pollers
from coord.infra.search_attributes import SetupNeeded
from coord.infra.signals import target_name
from coord.infra.temporal import (
    ConnectionSettings,
    ServerUnreachable,
    reconnecting,
    server_gone,
    task_queue,
    unreachable,
)
from coord.models.dlq.letter import DeadLetter
from coord.models.events.envelope import EventEnvelope
from coord.models.wire import contract
from coord.models.wire.errors import CoordError, RunFailed, ServerRefused

log = get_logger("coord.api")
R = TypeVar("R")
M = TypeVar("M", bound=BaseModel)
P = ParamSpec("P")
MISSING_SEARCH_ATTRIBUTE = re.compile(r"no mapping defined for search attribute (\w+)")


class Startable(Protocol):
    """A spec a run starts from: it names its workflow id and goes as JSON."""

    @property
    def workflow_id(self) -> str: ...

    def model_dump(self, *, mode: str, exclude_unset: bool) -> dict[str, Any]: ...


class Recorded(Protocol):
    """A run's record, which says what lists find the run by."""

    def search_attributes(self) -> contract.SearchValues: ...


class Ended(Protocol):
    """A run's final record, which says how it ended in its pattern's own words."""

    @property
    def status(self) -> StrEnum: ...


E = TypeVar("E", bound=Ended)
Outcome = Callable[[WorkflowHandle[Any, E]], Awaitable[E]]
"""How a pattern reads an ended run's final record (`saga_outcome`, `plan_outcome`, ...)."""


class Undeliverable(CoordError, RuntimeError):
    """The event could not be delivered; the message says why and what to do."""


class Conflict(CoordError, RuntimeError):
    """The workflow's state forbids the operation: its id is running, or it has ended."""


class NotFound(CoordError, RuntimeError):
    """No workflow with that id."""


class NoWorker(CoordError, RuntimeError):
    """No worker polls the task queue, so nothing would ever run; the message says which."""


def server_error(error: RPCError, call: str = "") -> CoordError:
    """The CoordError a refused server call means, by its status (the CLI's exit code follows
    from the class: docs/cli.md), its message naming the `call` and the server's words. A call
    no server answered (`server_gone`: down from the start, or stopped while a `--wait` waited)
    is ServerUnreachable with the line a failed connect gives, naming the configured address
    (the one `connect` uses)."""
    words = f"{call}: {error.message}" if call else error.message
    missing = MISSING_SEARCH_ATTRIBUTE.search(error.message)
    if missing:
        return SetupNeeded([missing.group(1)])
    if error.status == RPCStatusCode.NOT_FOUND:
        return NotFound(words)
    if error.status == RPCStatusCode.ALREADY_EXISTS:
        return Conflict(words)
    if server_gone(error):
        return unreachable(ConnectionSettings.load().address)
    if error.status == RPCStatusCode.DEADLINE_EXCEEDED:
        return ServerUnreachable(f"the Temporal server did not answer: {words}")
    return ServerRefused(f"{words} ({error.status.name.lower()})")


def api_call(fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """The API's edge: a server's refusal or a run's bare failure leaves a public function as a
    CoordError naming the function, with Temporal's own error as its `__cause__`."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except RPCError as error:
            raise server_error(error, fn.__name__) from error
        except WorkflowFailureError as error:
            raise RunFailed(f"{fn.__name__}: {contract.failure_message(error)}") from error

    return call


async def ended_or_missing(
    handle: WorkflowHandle[Any, E],
    name: str,
    consequence: str,
    error: RPCError,
    outcome: Outcome[E],
) -> Exception:
    """Why an operation on a workflow was refused with NOT_FOUND: there is no such workflow,
    or it has already ended (then `consequence` says what did not happen, and `ended_as` how
    it ended)."""
    if error.status != RPCStatusCode.NOT_FOUND:
        return error
    try:
        description = await handle.describe()
    except RPCError:
        return NotFound(f"{name} does not exist")
    ended = await ended_as(handle, description, outcome)
    return Conflict(f"{name} has already ended ({ended}); {consequence}")


RECORD_KEPT = (
    WorkflowExecutionStatus.COMPLETED,
    WorkflowExecutionStatus.FAILED,
    WorkflowExecutionStatus.CANCELED,
)
"""The ends whose runs keep their final record without a worker (result, failure, memo)."""


async def ended_as(
    handle: WorkflowHandle[Any, E], description: WorkflowExecutionDescription, outcome: Outcome[E]
) -> str:
    """How an ended run ended, in its record's own words (`cancelled`, as its state says, not
    the server's `canceled`; `compensated`, for a saga that ends as a failed workflow), or the
    server's status when its record cannot be read (a run that refused its spec, one
    terminated, whose record only a worker could answer for)."""
    server_word = description.status.name.lower() if description.status else "unknown"
    if description.status not in RECORD_KEPT:
        return server_word
    try:
        return (await outcome(handle)).status.value
    except Exception:  # any reason the record does not read: the server's word then
        return server_word


async def start_run(
    client: Client,
    run: MethodAsyncSingleParam[Any, Any, R],
    spec: Startable,
    first: Recorded,
    queue: str | None,
    summary: str,
    details: str | None,
    *,
    eager: bool = False,
    memo: Mapping[str, Any] | None = None,
) -> WorkflowHandle[Any, R]:
    """Starts the workflow whose `run` takes `spec`, under the spec's workflow id, on `queue`
    (else the configured task queue). The spec goes as plain JSON, which the run decodes and
    checks itself (a malformed one fails the run naming the field), holding what the spec sets
    (what its file said, and what its validation derived), not every default: the run decodes
    it to the same spec, as it decodes a plain-JSON start from the Temporal CLI, and the
    history keeps what the user wrote (a five-step saga's start: 1.1 KB, not 4.2 KB, bytes
    the server and the worker handle in every read of the start); the UI shows `summary` and
    `details`; the run starts with the search attributes of its `first` record, so that lists
    find it from its first moment.

    `eager` asks the server to hand the run's first workflow task back in the start call's
    answer, to a worker on this same client that polls `queue`, instead of queuing it: the run
    starts a round trip sooner, and its history says `eager_execution_accepted`. For callers
    whose worker shares their client (the demo, tests, a program hosting its own worker); off
    by default, since a remote caller has no worker to take the task (the server then queues
    it as usual). `memo`: what the run's start event carries besides (a version)."""
    return await client.start_workflow(
        run,
        spec.model_dump(mode="json", exclude_unset=True),
        id=spec.workflow_id,
        task_queue=queue or task_queue(),
        static_summary=summary,
        static_details=details,
        search_attributes=contract.as_start_attributes(first.search_attributes()),
        request_eager_start=eager,
        memo=memo,
    )


async def cancel_running(
    handle: WorkflowHandle[Any, E],
    name: str,
    outcome: Outcome[E],
    consequence: str = "nothing to cancel",
) -> None:
    """Cancels the run `name` says (`plan 'p1'`). Refused when there is none, and when it has
    ended (naming how, `ended_as`; `consequence` says what did not happen): the server would
    accept the request and nothing would happen."""
    description = await described(handle, NotFound(f"{name} does not exist"))
    if description.status != WorkflowExecutionStatus.RUNNING:
        ended = await ended_as(handle, description, outcome)
        raise Conflict(f"{name} has already ended ({ended}); {consequence}")
    await handle.cancel()


async def named_workflow_id(client: Client, name: str, prefix: str) -> str:
    """What a user names a run by, its own id or its workflow id, as its workflow id: the run
    whose own id it is (`<prefix><name>`) when that run exists, else the workflow id it spells.
    A run started from the Temporal CLI may have any workflow id, so a name without `prefix`
    is asked for as given too; one that is neither is taken as the run's own id (the reader
    then says it does not exist)."""
    own = prefix + name
    if await workflow_exists(client, own):
        return own
    if name.startswith(prefix) or await workflow_exists(client, name):
        return name
    return own


async def workflow_exists(client: Client, workflow_id: str) -> bool:
    """Whether the server knows a workflow by this id (running or ended)."""
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def described(
    handle: WorkflowHandle[Any, Any], missing: Exception
) -> WorkflowExecutionDescription:
    """The workflow's description; raises `missing` when there is no such workflow."""
    try:
        return await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise missing from error
        raise


async def started_input(client: Client, handle: WorkflowHandle[Any, Any]) -> Any:
    """What the workflow's current run was started with, decoded, unvalidated: from its first
    event, so only the history's first page is read (a long plan's whole history is not)."""
    first = await anext(aiter(handle.fetch_history_events()))
    started = first.workflow_execution_started_event_attributes
    [raw] = await client.data_converter.decode(started.input.payloads[:1])
    return raw


async def closed_with_result(handle: WorkflowHandle[Any, Any]) -> bool:
    """The run has ended keeping its final record, readable without a worker: in its result,
    its failure's details, or (cancelled runs have neither) its memo."""
    description = await handle.describe()
    return description.status in RECORD_KEPT


QUERY_PATIENCE = timedelta(seconds=5)
"""How long a query waits for a worker's answer before the caller looks elsewhere (the run's
task queue, for `answered`; `coord agents` shows its rows without the ledgers'): the server
holds a query until a worker takes it, up to 30 s, and one with no worker would only time
out."""

REASK_PATIENCE = timedelta(seconds=20)
"""How long `answered` waits for its second asking, the one a worker seen polling should
answer (a busy worker, a long replay): the server lists a stopped worker's pollers for minutes
after it stopped, so a bound is what turns that into a refusal rather than a wait."""

UNANSWERED = (
    RPCStatusCode.CANCELLED,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.FAILED_PRECONDITION,
)
"""How a query no worker took comes back: timed out (ours or the server's), or refused at once
(FAILED_PRECONDITION, "no poller seen for task queue recently") when the server has seen no
poller on the queue lately."""


async def answered(
    client: Client | None,
    handle: WorkflowHandle[Any, Any],
    query: MethodSyncOrAsyncNoParam[Any, R],
) -> R:
    """A running run's `query`: one not answered within QUERY_PATIENCE is asked once more,
    for up to REASK_PATIENCE, while a worker polls the run's task queue (a busy worker, a long
    replay); refused (NoWorker) when none does, when the server says none polled lately, or
    when the second asking goes unanswered too. Without a `client` to ask the queue with, the
    query alone, waiting as the server does."""
    if client is None:
        return await handle.query(query)
    try:
        return await handle.query(query, rpc_timeout=QUERY_PATIENCE)
    except RPCError as error:
        if error.status not in UNANSWERED:
            raise
        refused = error.status == RPCStatusCode.FAILED_PRECONDITION
    queue = (await handle.describe()).task_queue
    if refused or not await task_queue_pollers(client, queue):
        raise _no_worker(handle, queue)
    try:
        return await handle.query(query, rpc_timeout=REASK_PATIENCE)
    except RPCError as error:
        if error.status not in UNANSWERED:
            raise
        raise _no_worker(handle, queue) from error


def _no_worker(handle: WorkflowHandle[Any, Any], queue: str) -> NoWorker:
    return NoWorker(
        f"{handle.id} cannot answer: no worker polls its task queue {queue!r} (start one: "
        "`coord worker`)"
    )


async def current_record(
    handle: WorkflowHandle[Any, M],
    outcome: Callable[[WorkflowHandle[Any, M]], Awaitable[M]],
    state: MethodSyncOrAsyncNoParam[Any, M],
    name: str,
    client: Client | None = None,
    *,
    unkept: Callable[[WorkflowHandle[Any, M]], Awaitable[M]] | None = None,
) -> M:
    """A run's record now: a running run answers its `state` query (`answered`, given the
    `client`), an ended one its `outcome` (result, failure or memo), so no worker is needed to
    read it. A run that ended keeping none (terminated, timed out) answers `unkept`, when
    given (a saga's says it was terminated), else its `state` query. `name` is the run in the
    user's words (`plan 'p1'`): NotFound when there is no such run, RunFailed when it failed
    without a record (a spec it refused), each saying so."""
    description = await described(handle, NotFound(f"{name} does not exist"))
    ended_unkept = description.status not in (*RECORD_KEPT, WorkflowExecutionStatus.RUNNING)
    if ended_unkept and unkept is not None:
        return await unkept(handle)
    if description.status not in RECORD_KEPT:
        return await answered(client, handle, state)
    try:
        return await outcome(handle)
    except RunFailed as failed:
        words = contract.failure_message(failed)
        raise RunFailed(f"{name} failed: {words}") from failed.__cause__


LAST_EVENTS = 50
"""The events read back from a run's end to find its last completed workflow task."""

UNFINISHED_TASK = (
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
)
"""A workflow task not completed: the work its run would do next."""


async def ended_mid_task(client: Client, handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the run ended (terminated, timed out) with work its workflow had not finished:
    no workflow task completed after the last one scheduled (its first one included), or none
    among its last events. Its `state` query would replay it up to its end and run that work
    on (a local activity's agent again, whose marker its history lacks), or find no task
    completed to answer from; its record is then read from what the server kept instead."""
    execution = WorkflowExecution(workflow_id=handle.id, run_id=handle.run_id or "")
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace, execution=execution, maximum_page_size=LAST_EVENTS
    )
    response = await client.workflow_service.get_workflow_execution_history_reverse(request)
    for event in response.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return False
        if event.event_type in UNFINISHED_TASK:
            return True
    return True


async def kept_record(handle: WorkflowHandle[Any, Any], key: str, record: type[R]) -> R | None:
    """The final record a run kept in its memo under `key`: how a cancelled run, which has
    neither result nor failure details, stays readable without a worker."""
    description = await handle.describe()
    kept: R | None = await description.memo_value(key, None, type_hint=record)
    return kept


async def ended_record(handle: WorkflowHandle[Any, M], key: str, record: type[M]) -> M:
    """Waits for the run to end and returns its final record however it ended: its result, the
    record a typed failure carries in its details, or (cancelled) the one kept in its memo under
    `key`. A run that refused its spec is raised, whatever it carries: it never was a saga, plan,
    vote or aggregator, so whatever record it kept describes nothing (a saga's says `failed`,
    an aggregator's would wait for nothing); a read says the run failed and why, the same for
    each pattern. A wait the server's connection recycling cuts is taken up again
    (`reconnecting`)."""
    try:
        return await reconnecting(handle.result)
    except WorkflowFailureError as failure:
        cause = failure.cause
        if refused_spec(failure):
            raise
        if isinstance(cause, ApplicationError) and cause.details:
            return record.model_validate(cause.details[0])
        kept = await kept_record(handle, key, record)
        if kept is None:
            raise
        return kept


def refused_spec(failure: WorkflowFailureError) -> bool:
    """The run failed because its spec (its start input) did not validate."""
    return contract.failure_type_of(failure.cause) == contract.FailureType.INVALID_SPEC


async def undeliverable(
    client: Client, workflow_id: str, envelope: EventEnvelope, error: Exception, missing: str
) -> Undeliverable:
    """Why an event could not be delivered: it has ended (then it is logged with the whole
    event, so nothing is lost silently), or nothing is there (NotFound, raised, saying
    `missing`: as a read of what does not exist, and nothing parked)."""
    description = await described(client.get_workflow_handle(workflow_id), NotFound(missing))
    status = description.status.name.lower() if description.status else "unknown"
    message = (
        f"{target_name(workflow_id)} has ended ({status}); "
        f"event {envelope.event.id} ({envelope.event.type}) was not delivered: {error}"
    )
    now = datetime.now(UTC)
    letter = DeadLetter(
        event=envelope,
        target_workflow=workflow_id,
        failure_type=contract.FailureType.TARGET_ENDED,
        message=message,
        first_failed_at=now,
        last_failed_at=now,
    )
    queue = description.task_queue or task_queue()
    entry_id = await park_dead_letter(client, letter, queue)
    log.info("event for an ended workflow parked", workflow_id=workflow_id, dead_letter=entry_id)
    return Undeliverable(f"{message}; parked as dead letter {entry_id}")
