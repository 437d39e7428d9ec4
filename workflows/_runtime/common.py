"""Helpers shared by the workflows."""

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import Priority, RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, RetryState

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.dlq.letter import DeadLetter
    from coord.models.events.envelope import EventEnvelope
    from coord.models.events.priority import task_priority
    from coord.models.mesh.agents import AgentRequest
    from coord.models.mesh.assignment import Assignment, CapabilityRoute
    from coord.models.mesh.retry import RetryConfig
    from coord.models.plan.spec import TaskError
    from coord.models.wire import contract
    from coord.models.wire.specs import (
        MAX_JSON_DEPTH,
        SpecError,
        describe_validation_error,
        json_depth,
        parse_model,
    )
    from coord.models.wire.versions import (
        AGENT_QUEUES_PATCH,
        AGENT_RUN_PRIORITY_PATCH,
        CAPABILITY_ROUTING_PATCH,
        COUNTED_RETRIES_PATCH,
        DEAD_LETTER_PATCH,
        ROUTING_PICKS_BATCHED_PATCH,
        SIGNALS_RUN_TO_THE_END_PATCH,
    )
    from coord.workflows._runtime import calls

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def counted_retries(request: AgentRequest, retry: RetryConfig) -> tuple[AgentRequest, RetryPolicy]:
    """The request and the server's retry policy of a `run_agent` retried by `retry`:
    `start_activity(..., request, retry_policy=policy)` with `request, policy =
    counted_retries(request, retry)`, wherever a step's, subscription's or task's agent runs.
    The policy's backoff and non-retryable types are `retry`'s; the budget travels in the
    request (activities/run_tally.py counts it)."""
    if not workflow.patched(COUNTED_RETRIES_PATCH):
        return request, retry.to_retry_policy()
    return request.model_copy(update={"budget": retry.budget()}), retry.to_counted_policy()


class AgentDispatch(TypedDict, total=False):
    """The activity options that say where a `run_agent` goes and how long it may wait there."""

    task_queue: str
    schedule_to_start_timeout: timedelta
    priority: Priority


def agent_dispatch(
    request: AgentRequest, schedule_to_start: timedelta, *, agent_queue: bool = True
) -> AgentDispatch:
    """Where every workflow sends a `run_agent` (`start_activity(..., **agent_dispatch(...))`).

    A named agent runs on its own task queue (`agent_task_queue`, next to this workflow's
    queue), served by whichever workers declare it; if none takes the run within
    `schedule_to_start` it fails `agent_unavailable`. An agent declared inline by the spec
    stays on this workflow's queue: any coordinator worker that allows its kind can run it, and
    no worker declares it to poll a queue of its own. So does every run when `agent_queue` is
    False (a plan's `dispatch: coordinator`), handed over eagerly to the worker scheduling it.

    Either way the run waits its turn by its event's priority and its correlation's fairness
    key (`task_priority`), where the server orders tasks so."""
    dispatch = _agent_queue(request, schedule_to_start) if agent_queue else AgentDispatch()
    if workflow.patched(AGENT_RUN_PRIORITY_PATCH):
        dispatch["priority"] = task_priority(request.event, workflow.info().workflow_id)
    return dispatch


def _agent_queue(request: AgentRequest, schedule_to_start: timedelta) -> AgentDispatch:
    if request.config is not None or not workflow.patched(AGENT_QUEUES_PATCH):
        return {}
    home = workflow.info().task_queue
    return {
        "task_queue": contract.agent_task_queue(request.agent, home),
        "schedule_to_start_timeout": schedule_to_start,
    }


CHOOSE_AGENT_TIMEOUT = timedelta(seconds=30)
CHOOSE_AGENT_RETRY = RetryPolicy(maximum_attempts=5)
"""Reading the server may fail for a moment; `no_capable_agent` is not retried."""


async def assign_agent(route: CapabilityRoute | None, summary: str) -> Assignment | None:
    """The agent picked for a run that names capabilities (saga step, chain subscription, plan
    task), with every candidate's bid, for the caller to record and dispatch `run_agent` to
    (`agent_dispatch`); None for a run that names its agent. Raises the activity's error
    (`no_capable_agent` when no declared agent offers enough) like a failed run."""
    if route is None or not workflow.patched(CAPABILITY_ROUTING_PATCH):
        return None
    assignment: Assignment = await calls.execute(
        refs.CHOOSE_AGENT,
        route,
        start_to_close_timeout=CHOOSE_AGENT_TIMEOUT,
        retry_policy=CHOOSE_AGENT_RETRY,
        summary=f"choose agent: {summary}",
    )
    return assignment


async def assign_agents(routes: Sequence[CapabilityRoute], summary: str) -> list[Assignment | None]:
    """The agents picked for runs started together, in order, in one `choose_agents`: each pick
    counts as load on its agent for the picks after it, so the runs spread over the capable
    agents. None for a route no declared agent offers enough for (`assign_agent` asked alone
    fails it `no_capable_agent`, like an unbatched pick). Raises the activity's error."""
    picks: list[Assignment | None] = await calls.execute(
        refs.CHOOSE_AGENTS,
        list(routes),
        start_to_close_timeout=CHOOSE_AGENT_TIMEOUT,
        retry_policy=CHOOSE_AGENT_RETRY,
        summary=f"choose agents: {summary}",
    )
    return picks


class AgentPicker:
    """One workflow's picks by capability, batched: every `pick` asked in the same workflow
    step (the runs of a plan's wave, granted their slots together) goes into one
    `assign_agents`, sent once the step's other coroutines have asked theirs."""

    def __init__(self) -> None:
        self._asked: list[tuple[CapabilityRoute, str, asyncio.Future[Assignment | None]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def pick(self, route: CapabilityRoute | None, summary: str) -> Assignment | None:
        """As `assign_agent` (None for a run naming its agent; the activity's error raised),
        the pick made together with the others of this step."""
        if route is None or not workflow.patched(CAPABILITY_ROUTING_PATCH):
            return None
        if not workflow.patched(ROUTING_PICKS_BATCHED_PATCH):
            return await assign_agent(route, summary)
        picked: asyncio.Future[Assignment | None] = asyncio.get_running_loop().create_future()
        if not self._asked:
            asyncio.get_running_loop().call_soon(self._send)
        self._asked.append((route, summary, picked))
        assignment = await picked
        return assignment if assignment is not None else await assign_agent(route, summary)

    def _send(self) -> None:
        asked, self._asked = self._asked, []
        sending = asyncio.create_task(self._choose(asked))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _choose(
        self, asked: list[tuple[CapabilityRoute, str, asyncio.Future[Assignment | None]]]
    ) -> None:
        summary = ", ".join(each for _, each, _ in asked)
        try:
            picks = await assign_agents([route for route, _, _ in asked], summary[:200])
        except ActivityError as error:  # every run of the batch fails as its own pick would
            for _, _, picked in asked:
                if not picked.done():
                    picked.set_exception(error)
            return
        for (_, _, picked), assignment in zip(asked, picks, strict=True):
            if not picked.done():  # a run cancelled meanwhile no longer waits
                picked.set_result(assignment)


if TYPE_CHECKING:
    PlainInput = Any
else:
    PlainInput = RawValue
"""The type of workflow and handler parameters: clients send any plain JSON (the Temporal CLI,
typed starters passing dicts), the worker hands over the raw payload for `decode_input`. The SDK
reads the runtime annotation (RawValue); type checkers see what callers may pass."""

NO_INPUT: PlainInput = RawValue(Payload())
"""The default of every workflow and handler parameter: a start or signal sent without input then
reaches our code, which refuses it, instead of failing the workflow task with a TypeError."""


class InvalidInput(SpecError):
    """A workflow input or handler argument that does not decode or validate. `raw` is what it
    carried, fit to record and park: its JSON, or its text when that is not JSON or nests too
    deep to carry."""

    def __init__(self, message: str, raw: Any) -> None:
        super().__init__(message)
        self.raw = raw


def decode_json(value: RawValue, source: str) -> Any:
    """The plain JSON a workflow input or handler argument carries. Workflows and handlers take
    their arguments raw and decode them here, so one that does not even decode (nested too deep,
    not JSON) is refused like one that does not validate, instead of being dropped by the SDK
    (signals) or failing the workflow task (inputs)."""
    if value is NO_INPUT:
        raise InvalidInput(f"{source}: no input given", None)
    try:
        decoded = workflow.payload_converter().from_payload(value.payload)
    except Exception as error:  # any converter failure: the payload is the sender's fault
        reason = describe_validation_error(error) if isinstance(error, ValidationError) else error
        raise InvalidInput(f"{source}: cannot be decoded: {reason}", _text(value)) from None
    sent = value.payload.metadata.get(contract.ARGUMENT_COUNT_METADATA)
    if sent is not None:
        message = f"{source}: expected one input, got {sent.decode()}"
        raise InvalidInput(message, decoded if _plain_json(decoded) else _text(value))
    return decoded


def decode_input(model: type[M], value: RawValue, source: str) -> M:
    """`model` from a raw argument; raises InvalidInput with what to record and park."""
    decoded = decode_json(value, source)
    try:
        return parse_model(model, decoded, source)
    except SpecError as error:
        raise InvalidInput(str(error), decoded if _plain_json(decoded) else _text(value)) from None


def _text(value: RawValue) -> str:
    return value.payload.data.decode(errors="replace")


def _plain_json(value: Any) -> bool:
    """Whether `value` can be recorded as is: JSON, shallow enough that the records carrying it
    stay decodable (binary and protobuf payloads decode to other things)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return json_depth(value) <= MAX_JSON_DEPTH


def attempts(error: ActivityError, retry_policy: RetryPolicy) -> int:
    """The attempt `run_agent` reported with its failure. A timeout is Temporal's, so the agent
    could not report it: when the server gave up because the policy's attempts were used up,
    that maximum is the count; 1 when nothing says more."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.details:
        detail = cause.details[0]
        if isinstance(detail, dict) and isinstance(detail.get("attempt"), int):
            return int(detail["attempt"])
    if error.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED and retry_policy.maximum_attempts:
        return retry_policy.maximum_attempts
    return 1


async def park(
    failure_type: str,
    message: str,
    *,
    event: EventEnvelope | None = None,
    raw: Any = None,
    target_agent: str | None = None,
    attempt_count: int = 1,
    replay: Literal["signal", "rerun", "run_agent"] = "signal",
    idempotency_key: str | None = None,
    inputs: dict[str, Any] | None = None,
    causation_depth: int | None = None,
) -> None:
    """Hand what this workflow could not handle to the dead-letter queue; nothing is dropped.

    Runs recorded before the queue existed replay without it (the `dead-letter-queue` patch)."""
    if not workflow.patched(DEAD_LETTER_PATCH):
        return
    now = workflow.now()
    letter = DeadLetter(
        event=event,
        raw=raw,
        target_workflow=workflow.info().workflow_id,
        target_agent=target_agent,
        failure_type=failure_type,
        message=message,
        attempts=attempt_count,
        first_failed_at=now,
        last_failed_at=now,
        replay=replay,
        idempotency_key=idempotency_key,
        inputs=inputs or {},
        causation_depth=causation_depth,
    )
    await calls.execute(
        refs.PARK_DEAD_LETTER,
        letter,
        start_to_close_timeout=timedelta(seconds=30),
        summary=f"dead-letter: {failure_type}",
    )


def upsert_search_attributes(values: contract.SearchValues) -> None:
    workflow.upsert_search_attributes([key.value_set(value) for key, value in values.items()])


async def signal_if_running(workflow_id: str, signal: str, arg: Any) -> bool:
    """Signals another workflow; False when it does not run (never started, or ended), which
    the sender treats as that workflow's business, never as its own failure.

    A cancel of the awaiting task does not reach the signal: the SDK would send the signal's
    cancel even when its outcome has already arrived in the same workflow task, and Core's
    state machine fails that task (`Invalid transition in state machine`), which is how an
    aggregator completing on its last event while its chain attach resolved got stuck."""
    sending = _signal(workflow_id, signal, arg)
    if workflow.patched(SIGNALS_RUN_TO_THE_END_PATCH):
        return await asyncio.shield(sending)
    return await sending


async def _signal(workflow_id: str, signal: str, arg: Any) -> bool:
    try:
        await workflow.get_external_workflow_handle(workflow_id).signal(signal, arg)
    except ApplicationError:
        return False
    return True


async def signal_chain(correlation_id: str, signal: str, arg: Any) -> bool:
    """Signals the chain of a correlation; False when it has none running."""
    return await signal_if_running(contract.chain_workflow_id(correlation_id), signal, arg)


async def uncancellable(awaitable: Awaitable[T], on_cancel: Callable[[], None] | None = None) -> T:
    """Run to the end even if the workflow is cancelled (again) meanwhile. A cancel landing in
    the same workflow task as the end does not replace the outcome; `on_cancel` is told."""
    task = asyncio.ensure_future(awaitable)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if on_cancel is not None:
                on_cancel()
            if task.done():
                return task.result()


def task_error(error: ActivityError) -> TaskError:
    """How an activity failed for good, as the record shows it: the failure type, and the
    agent's own words (without the type `str()` puts in front)."""
    innermost: BaseException = error
    while innermost.__cause__ is not None:
        innermost = innermost.__cause__
    message = innermost.message if isinstance(innermost, FailureError) else str(innermost)
    return TaskError(type=contract.failure_type_of(error), message=message)
