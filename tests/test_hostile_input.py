"""Hostile input through the plain-JSON path the Temporal CLI uses: every workflow input ends as a
typed failure naming the field, every signal is counted and parked, and no workflow task fails."""

import asyncio
import inspect
import json
import time
import uuid
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import RawValue
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from coord.infra.devserver import installed_binary
from coord.infra.failures import TypedFailures
from coord.models.aggregator.spec import AggregatorState
from coord.models.chain.spec import ChainSpec, ChainState
from coord.models.dlq.letter import DlqEntry
from coord.models.events.filters import VIEW_LIST_ITEMS, compile_filter, evaluate
from coord.models.mesh.retry import RetryConfig
from coord.models.saga.spec import SagaSpec
from coord.models.wire.contract import FailureType, failure
from coord.models.wire.specs import MAX_JSON_DEPTH, SpecError, parse_model
from coord.worker import WORKFLOWS, build_worker
from coord.workflows._runtime.arguments import SurplusStartArguments
from tests.helpers import eventually, task_failures
from tests.workers import run

HOSTILE_DEPTH = 250


def plain_json(text: str) -> RawValue:
    """Exactly what `temporal workflow start|signal --input TEXT` sends: a json/plain payload."""
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=text.encode()))


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def saga_spec(**overrides: Any) -> dict[str, Any]:
    return {"saga_id": f"hostile-{uuid.uuid4().hex[:8]}", "steps": [{"name": "Step"}], **overrides}


def chain_spec(**overrides: Any) -> dict[str, Any]:
    """One subscription whose filter the tests' events never meet: the chain just records."""
    return {
        "name": "hostile",
        "triggers": ["Poke"],
        "subscriptions": [{"agent": "nobody", "events": ["Poke"], "filter": "has(payload.run)"}],
        "alerts": None,
        **overrides,
    }


def chain_input(**spec_overrides: Any) -> dict[str, Any]:
    return {"spec": chain_spec(**spec_overrides), "correlation_id": f"h-{uuid.uuid4().hex[:8]}"}


def aggregator_spec(**overrides: Any) -> dict[str, Any]:
    return {
        "aggregator_id": f"hostile-{uuid.uuid4().hex[:8]}",
        "wait_for": [{"type": "A"}],
        "timeout": "1h",
        "on_complete": "Done",
        "on_timeout": "Late",
        **overrides,
    }


def envelope(event_type: str = "Poke", **payload: Any) -> dict[str, Any]:
    return {"event": {"type": event_type, "source": "/fuzz"}, "payload": payload}


async def closed_with(handle: WorkflowHandle[Any, Any], timeout: float = 30) -> ApplicationError:
    """The typed failure the run ended with; fails at once if a workflow task fails instead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        failures = await task_failures(handle)
        assert not failures, f"workflow task failed: {failures[0]}"
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            with pytest.raises(WorkflowFailureError) as error:
                await handle.result()
            assert isinstance(error.value.cause, ApplicationError)
            return error.value.cause
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} still running after {timeout}s")


async def start(
    client: Client, workflow: str, text: str, task_queue: str
) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        workflow,
        plain_json(text),
        id=f"hostile-{workflow}-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
    )


@pytest.mark.parametrize(
    ("error", "traced"),
    [
        (failure(FailureType.INVALID_SPEC, "saga spec: steps: empty"), False),
        (ApplicationError("refused", type="AgentsOwnType"), True),
        (ValueError("a bug"), True),
    ],
    ids=["product-type", "agents-own-type", "bug"],
)
def test_only_the_products_typed_failures_leave_their_stack_trace_out(
    error: Exception, traced: bool
) -> None:
    converted = Failure()
    try:
        raise error
    except Exception as raised:
        TypedFailures().to_failure(raised, DataConverter.default.payload_converter, converted)
    assert bool(converted.stack_trace) == traced


@pytest.mark.parametrize(
    ("workflow", "text", "failure_type", "message"),
    [
        (
            "Saga",
            json.dumps(saga_spec(input={"d": json.loads(nested(150))})),
            "invalid_spec",
            f"input: nested deeper than {MAX_JSON_DEPTH} levels",
        ),
        ("Saga", nested(HOSTILE_DEPTH), "invalid_spec", "saga spec: cannot be decoded"),
        ("ReactiveChain", nested(HOSTILE_DEPTH), "invalid_input", "chain input: cannot be decoded"),
        ("Aggregator", nested(HOSTILE_DEPTH), "invalid_spec", "aggregator spec: cannot be decoded"),
        (
            "Saga",
            json.dumps(saga_spec(steps=[{"name": "Step", "timeout": -5}])),
            "invalid_spec",
            "steps[0].timeout: must be between 1ms and 366d",
        ),
        (
            "Saga",
            json.dumps(saga_spec(steps=[{"name": "Step", "retry": {"max_retries": 2**63}}])),
            "invalid_spec",
            "steps[0].retry.max_retries: Input should be less than or equal to 2147483646",
        ),
        (
            "ReactiveChain",
            json.dumps(chain_input(idle_timeout=-1)),
            "invalid_input",
            "spec.idle_timeout: must be between",
        ),
        (
            "Aggregator",
            json.dumps(aggregator_spec(timeout="99999999d")),
            "invalid_spec",
            "timeout: must be at most 366d",
        ),
        (
            "Aggregator",
            json.dumps(aggregator_spec(timeout=10**12)),
            "invalid_spec",
            "timeout: must be between",
        ),
        (
            "AgentLedger",
            json.dumps({"agent_queue": ""}),
            "invalid_input",
            "ledger start: agent_queue: String should have at least 1 character",
        ),
    ],
    ids=[
        "saga-input-too-deep",
        "saga-nested",
        "chain-nested",
        "aggregator-nested",
        "negative-step-timeout",
        "max-retries-out-of-range",
        "negative-idle-timeout",
        "aggregator-timeout-overflow",
        "aggregator-timeout-seconds-overflow",
        "ledger-empty-agent-queue",
    ],
)
async def test_malformed_inputs_end_as_typed_failures_naming_the_field(
    client: Client, task_queue: str, workflow: str, text: str, failure_type: str, message: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await start(client, workflow, text, task_queue)
        failure = await closed_with(handle)
    assert failure.type == failure_type
    assert message in failure.message
    assert "\n" not in failure.message
    assert failure.failure is not None and failure.failure.stack_trace == ""  # `TypedFailures`


async def test_a_start_without_input_fails_typed(client: Client, task_queue: str) -> None:
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            "Saga", id=f"hostile-empty-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        failure = await closed_with(handle)
    assert failure.type == "invalid_spec" and failure.message == "saga spec: no input given"


async def test_temporal_cli_start_nested_250_deep_fails_typed(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    address = dev_env.client.service_client.config.target_host
    workflow_id = f"hostile-cli-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        code, _, err = await run(
            installed_binary("temporal"),
            "workflow",
            "start",
            "--address",
            address,
            "--type",
            "Aggregator",
            "--task-queue",
            task_queue,
            "--workflow-id",
            workflow_id,
            "--input",
            json.dumps({**aggregator_spec(), "wait_for": json.loads(nested(HOSTILE_DEPTH))}),
        )
        assert code == 0, err
        failure = await closed_with(client.get_workflow_handle(workflow_id))
    assert failure.type == "invalid_spec"
    assert "recursion limit exceeded" in failure.message


async def chain_state(handle: WorkflowHandle[Any, Any]) -> ChainState:
    state: ChainState = await handle.query("state", result_type=ChainState)
    return state


async def wait_for_state(
    handle: WorkflowHandle[Any, Any], done: Any, timeout: float = 30
) -> ChainState:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert not await task_failures(handle)
        state = await chain_state(handle)
        if done(state):
            return state
        await asyncio.sleep(0.1)
    raise AssertionError(f"chain state never reached the condition: {state}")


async def test_undecodable_and_invalid_signals_are_counted_and_parked_not_dropped(
    client: Client, task_queue: str
) -> None:
    """Signals the SDK could not decode into the handler's parameter used to vanish."""
    hostile = [nested(HOSTILE_DEPTH), "null", '"text"', "[1, 2]", json.dumps(envelope("")), "{"]
    async with build_worker(client, task_queue):
        handle = await start(client, "ReactiveChain", json.dumps(chain_input()), task_queue)
        for text in hostile:
            await handle.signal("event", plain_json(text))
        await handle.signal("event")
        await handle.signal("event", plain_json(json.dumps(envelope())))
        state = await wait_for_state(handle, lambda s: s.received == len(hostile) + 2)
        await handle.signal("close")
        await handle.result()
        assert not await task_failures(handle)
    assert state.events_seen == 1
    assert state.rejected_count == len(hostile) + 1
    assert state.dead_lettered == len(hostile) + 1
    # Plain JSON is validated when a workflow task takes it, after what its handler refused.
    reasons = [r.reason for r in state.rejected]
    assert any("Invalid JSON: recursion limit exceeded" in reason for reason in reasons)
    assert "event: no input given" in reasons


async def test_aggregator_counts_undecodable_events(client: Client, task_queue: str) -> None:
    async with build_worker(client, task_queue):
        handle = await start(client, "Aggregator", json.dumps(aggregator_spec()), task_queue)
        await handle.signal("event", plain_json(nested(HOSTILE_DEPTH)))
        await handle.signal("event", plain_json(json.dumps(envelope("A"))))
        await asyncio.wait_for(handle.result(), 30)
        state = await handle.query("state", result_type=AggregatorState)
        assert not await task_failures(handle)
    assert state.matched == 1
    assert len(state.rejected) == 1 and "recursion limit exceeded" in state.rejected[0]


@pytest.mark.parametrize("listener", ['""', "null", '"  "', "{}", nested(HOSTILE_DEPTH)])
async def test_an_invalid_attach_is_rejected_and_the_chain_keeps_working(
    client: Client, task_queue: str, listener: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await start(client, "ReactiveChain", json.dumps(chain_input()), task_queue)
        await handle.signal("attach", plain_json(listener))
        await handle.signal("event", plain_json(json.dumps(envelope())))
        state = await wait_for_state(handle, lambda s: s.events_seen == 1)
        await handle.signal("close")
        await handle.result()
        assert not await task_failures(handle)
    assert state.listeners == [] and state.rejected_count == 1
    assert state.rejected[0].reason.startswith("attach: ")


FAILING_FILTERS = {
    "payload.items[0] == 1": envelope(items=[]),
    "1 / payload.n == 1": envelope(n=0),
    "payload.n * 2 > 0": envelope(n=2**62),
    "payload.missing == 1": envelope(),
}


async def test_filter_errors_mean_no_match_and_show_in_the_chain_state(
    client: Client, task_queue: str
) -> None:
    subscriptions = [
        {"agent": "nobody", "name": f"s{i}", "events": ["Poke"], "filter": expression}
        for i, expression in enumerate(FAILING_FILTERS)
    ]
    text = json.dumps(chain_input(subscriptions=subscriptions))
    async with build_worker(client, task_queue):
        handle = await start(client, "ReactiveChain", text, task_queue)
        for event in FAILING_FILTERS.values():
            await handle.signal("event", plain_json(json.dumps(event)))
        state = await wait_for_state(handle, lambda s: s.events_seen == len(FAILING_FILTERS))
        await handle.signal("close")
        await handle.result()
        assert not await task_failures(handle)
    # Each event meets every filter: the ones it breaks count, the others simply do not match.
    assert state.filter_errors >= len(FAILING_FILTERS)
    assert state.queued == 0 and state.running == []
    assert state.last_filter_error is not None and "filter" in state.last_filter_error


def test_each_filter_error_kind_is_no_match_with_a_reason() -> None:
    for expression, event in FAILING_FILTERS.items():
        outcome = evaluate(expression, event)
        assert not outcome.matched and outcome.error, expression


def test_an_expensive_filter_reads_a_bounded_view_and_stays_fast() -> None:
    expression = "payload.items.all(x, payload.items.exists(y, y == x))"
    event = envelope(items=list(range(4000)), text="x" * 100_000)
    started = time.monotonic()
    assert evaluate(expression, event).matched
    assert time.monotonic() - started < 0.5
    assert evaluate(f"size(payload.items) == {VIEW_LIST_ITEMS}", event).matched


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("a.all(x, a.exists(y, a.map(z, z)))", "more than 2 list macros"),
        ("1" + " + 1" * 1000, "longer than 2000 characters"),
        ("(" * 300, "Failed to parse"),
    ],
)
def test_filters_are_checked_at_spec_load(expression: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        compile_filter(expression)
    spec = chain_spec(subscriptions=[{"agent": "a", "events": ["Poke"], "filter": expression}])
    with pytest.raises(SpecError, match=r"subscriptions\[0\]\.filter"):
        parse_model(ChainSpec, spec, "chain")


@pytest.mark.parametrize("text", ["0s", "-1s", "367d", "99999999999999999999d", "P1000Y"])
def test_durations_are_bounded(text: str) -> None:
    with pytest.raises(SpecError, match="initial_delay: "):
        parse_model(RetryConfig, {"initial_delay": text}, "retry")


def test_user_data_nesting_is_bounded() -> None:
    deep: Any = {}
    for _ in range(MAX_JSON_DEPTH):
        deep = {"d": deep}
    with pytest.raises(SpecError, match=f"input: nested deeper than {MAX_JSON_DEPTH}"):
        parse_model(SagaSpec, saga_spec(input=deep), "spec")
    parse_model(SagaSpec, saga_spec(input=deep["d"]), "spec")


@pytest.mark.parametrize(
    ("letter", "message"),
    [
        (plain_json(nested(HOSTILE_DEPTH)), "dead letter: cannot be decoded"),
        (None, "dead letter: no input given"),
    ],
)
async def test_a_dead_letter_that_does_not_decode_is_kept(
    client: Client, task_queue: str, letter: RawValue | None, message: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            "DeadLetterEntry",
            *([letter] if letter else []),
            id=f"hostile-dlq-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )

        async def kept() -> bool:
            assert not await task_failures(handle)
            entry: DlqEntry = await handle.query("entry", result_type=DlqEntry)
            return entry.failure_type == "invalid_dead_letter" and entry.status == "parked"

        await eventually(kept)
        entry = await handle.query("entry", result_type=DlqEntry)
        await handle.terminate("test done")
    assert entry.message.startswith(message)


async def test_surplus_signal_arguments_are_rejected_and_a_surplus_close_still_closes(
    client: Client, task_queue: str
) -> None:
    """`temporal workflow signal --input a --input b` used to fail the task with a TypeError."""
    event = plain_json(json.dumps(envelope()))
    async with build_worker(client, task_queue):
        handle = await start(client, "ReactiveChain", json.dumps(chain_input()), task_queue)
        await handle.signal("event", args=[event, plain_json("1")])
        await handle.signal("attach", args=[plain_json('"a"'), plain_json('"b"')])
        await handle.signal("close", plain_json("1"))
        await asyncio.wait_for(handle.result(), 30)
        assert not await task_failures(handle)
        state = await chain_state(handle)
    assert state.rejected_count == 2 and state.listeners == []
    assert [r.reason for r in state.rejected] == [
        "event: expected one input, got 2",
        "attach: expected one input, got 2",
    ]


async def test_a_saga_started_with_two_inputs_fails_typed(client: Client, task_queue: str) -> None:
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            "Saga",
            args=[plain_json(json.dumps(saga_spec())), plain_json("{}")],
            id=f"hostile-two-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        failure = await closed_with(handle)
    assert failure.type == "invalid_spec"
    assert failure.message == "saga spec: expected one input, got 2"


def plan_spec() -> dict[str, Any]:
    return {"plan_id": f"two-{uuid.uuid4().hex[:8]}", "tasks": [{"id": "a", "agent": "x"}]}


def test_every_workflow_built_from_its_start_input_folds_surplus_arguments() -> None:
    """A `@workflow.init` taking the input is called before any interceptor can fold a second
    input: each such workflow needs the metaclass, or two inputs fail every workflow task."""
    for cls in WORKFLOWS:
        init = inspect.signature(cls.__init__)  # type: ignore[misc]
        if len(init.parameters) > 1:
            assert isinstance(cls, SurplusStartArguments), cls.__name__


@pytest.mark.parametrize(
    ("workflow", "spec", "failure_type"),
    [
        ("ReactiveChain", chain_input, "invalid_input"),
        ("Aggregator", aggregator_spec, "invalid_spec"),
        ("TaskGraph", plan_spec, "invalid_spec"),
    ],
)
async def test_a_chain_or_aggregator_started_with_two_inputs_fails_typed(
    client: Client, task_queue: str, workflow: str, spec: Any, failure_type: str
) -> None:
    """The SDK builds these from their start arguments before any interceptor: a TypeError
    there used to fail every workflow task."""
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            workflow,
            args=[plain_json(json.dumps(spec())), plain_json("{}")],
            id=f"hostile-two-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        failure = await closed_with(handle)
        assert not await task_failures(handle)
    assert failure.type == failure_type
    assert failure.message.endswith("expected one input, got 2")


async def test_surplus_arguments_reach_an_async_handler_as_one_rejected_input(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await start(client, "Aggregator", json.dumps(aggregator_spec()), task_queue)
        await handle.signal("event", args=[plain_json("1"), plain_json("2")])
        await handle.signal("event", plain_json(json.dumps(envelope("A"))))
        await asyncio.wait_for(handle.result(), 30)
        state = await handle.query("state", result_type=AggregatorState)
        assert not await task_failures(handle)
    assert state.matched == 1 and state.rejected == ["event: expected one input, got 2"]
