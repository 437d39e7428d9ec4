"""Property-based fuzzing of the saga, the chain and the aggregator through the plain-JSON path
the Temporal CLI uses: generated and hostile specs and signals, and one property, that no
workflow task ever fails. Every run ends with a typed failure or keeps running healthily.

The default suite runs 25 examples per workflow with a fixed seed; `make fuzz` runs the heavier
variants (marked `fuzz_heavy`, deselected otherwise): 300 random examples per workflow."""

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from coord.worker import WorkerSet, build_worker
from tests.helpers import task_failures

EXAMPLES = 25
HEAVY_EXAMPLES = 300
SIGNALS = 8
SETTLE_SECONDS = 20
TYPED_FAILURES = {
    "Saga": {"invalid_spec", "saga_compensated", "saga_failed", "compensation_failed"},
    "ReactiveChain": {"invalid_input"},
    "Aggregator": {"invalid_spec"},
}

HOSTILE_SCALARS: list[Any] = [
    None, True, 0, -1, 1.5, -1e308, 2**31, 2**63, 2**64 + 1, "", " ", "-5s", "0s", "99999999d",
    "P1000Y", "1e20s", "x" * 300, "évènement", "\u0000", [], {}, [None], {"": ""},
]  # fmt: skip


def deeply_nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
hostile_values = st.one_of(
    st.sampled_from(HOSTILE_SCALARS),
    st.integers(min_value=30, max_value=260).map(deeply_nested),
    json_values,
)
raw_texts = st.one_of(
    st.sampled_from(["", "{", "null", "1e400", "NaN", '"\\ud800"', "[" * 300, "{}" * 3]),
    st.integers(min_value=190, max_value=300).map(lambda d: "[" * d + "]" * d),
)


def plain_json(text: str) -> RawValue:
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=text.encode()))


def paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in `document` a mutation can hit, containers included."""
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            found += paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += paths(value, (*prefix, index))
    return found


def _child(parent: Any, key: Any) -> Any:
    if isinstance(parent, dict):
        return parent.get(key)
    if isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        return parent[key]
    return None


def mutated(document: Any, changes: list[tuple[tuple[Any, ...], Any]]) -> Any:
    """`document` with each change applied, but for those an earlier change made moot."""
    document = json.loads(json.dumps(document))
    for path, value in changes:
        parent = document
        for part in path[:-1]:
            parent = _child(parent, part)
        if isinstance(parent, dict) or _child(parent, path[-1]) is not None:
            parent[path[-1]] = value
    return document


def specs(base: dict[str, Any], extra_keys: list[str]) -> st.SearchStrategy[str]:
    """The valid base spec, with a few fields replaced by hostile values (or new keys added),
    as the JSON text a user would pass to `temporal workflow start --input`."""
    places = paths(base) + [(key,) for key in extra_keys]
    changes = st.lists(st.tuples(st.sampled_from(places), hostile_values), max_size=3)
    mutations = changes.map(lambda c: json.dumps(mutated(base, c)))
    return st.one_of(mutations, mutations, raw_texts, json_values.map(json.dumps))


def saga_base() -> dict[str, Any]:
    step = {
        "name": "Step",
        "agent": "ghost",
        "compensation": "ghost-undo",
        "timeout": "5s",
        "schedule_to_start_timeout": "200ms",  # no worker serves ghost: agent_unavailable soon
        "retry": {"max_retries": 0, "initial_delay": "100ms"},
    }
    return {"saga_id": "fuzz", "input": {"k": [1, {"v": "x"}]}, "steps": [step]}


def chain_base() -> dict[str, Any]:
    subscription = {
        "agent": "ghost",
        "events": ["Poke"],
        "filter": "payload.n > 0",
        "timeout": "5s",
        "schedule_to_start_timeout": "200ms",
        "retry": {"max_retries": 0},
    }
    spec = {"name": "fuzz", "triggers": ["Poke"], "subscriptions": [subscription]}
    return {"spec": spec, "correlation_id": "fuzz"}


def aggregator_base() -> dict[str, Any]:
    return {
        "aggregator_id": "fuzz",
        "wait_for": [{"type": "A"}, {"type": "B", "from": "/b"}],
        "timeout": "1h",
        "on_complete": "Done",
        "on_timeout": "Late",
        "mode": "all",
    }


def envelope_base() -> dict[str, Any]:
    return {
        "event": {"type": "Poke", "source": "/fuzz", "id": "evt-1", "correlation_id": "fuzz"},
        "payload": {"n": 1, "items": [1, 2]},
        "routing": {"topic": None, "priority": "normal"},
    }


Signal = tuple[str, list[str]]
"""A signal's name and its inputs: usually one, sometimes none or two (`--input a --input b`)."""
signal_inputs = st.one_of(
    st.lists(specs(envelope_base(), ["extra"]), min_size=1, max_size=1),
    st.lists(specs(envelope_base(), ["extra"]), max_size=2),
)
signal_names = st.sampled_from(["event", "event", "chain_event", "attach", "detach", "rerun"])
signals = st.lists(st.tuples(signal_names, signal_inputs), max_size=SIGNALS)


@pytest.fixture
async def fuzz_worker(client: Client, task_queue: str) -> AsyncIterator[WorkerSet]:
    async with build_worker(client, task_queue) as worker:
        yield worker


async def settled(handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionStatus:
    """Waits until the run has closed, or has nothing left to do (no workflow task or activity
    pending); fails at once when a workflow task fails."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        failures = await task_failures(handle)
        assert not failures, f"{handle.id}: workflow task failed: {failures[0]}"
        description = await handle.describe()
        raw = description.raw_description
        idle = not raw.HasField("pending_workflow_task") and not raw.pending_activities
        if description.status != WorkflowExecutionStatus.RUNNING or idle:
            assert description.status is not None
            return description.status
        await asyncio.sleep(0.05)
    raise AssertionError(f"{handle.id} never settled")


async def check_run(
    client: Client,
    queue: str,
    workflow: str,
    text: str,
    sent: list[Signal],
) -> None:
    handle = await client.start_workflow(
        workflow, plain_json(text), id=f"fuzz-{workflow}-{uuid.uuid4().hex[:12]}", task_queue=queue
    )
    for name, inputs in sent:
        try:
            await handle.signal(name, args=[plain_json(text) for text in inputs])
        except Exception:  # the run may have ended already: that is its outcome, checked below
            break
    status = await settled(handle)
    if status == WorkflowExecutionStatus.RUNNING:
        with contextlib.suppress(RPCError):  # it may have ended meanwhile: healthy either way
            await handle.terminate("fuzz example done")
        return
    assert status == WorkflowExecutionStatus.FAILED, status
    with pytest.raises(WorkflowFailureError) as error:
        await handle.result()
    cause = error.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type in TYPED_FAILURES[workflow], cause
    assert "\n" not in cause.message


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        derandomize=examples == EXAMPLES,
    )


def saga_property(examples: int) -> Any:
    @fuzz_settings(examples)
    @given(text=specs(saga_base(), ["unknown"]))
    async def prop(client: Client, task_queue: str, fuzz_worker: WorkerSet, text: str) -> None:
        await check_run(client, task_queue, "Saga", text, [])

    return prop


def chain_property(examples: int) -> Any:
    @fuzz_settings(examples)
    @given(text=specs(chain_base(), ["carried"]), sent=signals)
    async def prop(
        client: Client, task_queue: str, fuzz_worker: WorkerSet, text: str, sent: list[Signal]
    ) -> None:
        await check_run(client, task_queue, "ReactiveChain", text, sent)

    return prop


def aggregator_property(examples: int) -> Any:
    @fuzz_settings(examples)
    @given(text=specs(aggregator_base(), ["at_least", "threshold"]), sent=signals)
    async def prop(
        client: Client, task_queue: str, fuzz_worker: WorkerSet, text: str, sent: list[Signal]
    ) -> None:
        await check_run(client, task_queue, "Aggregator", text, sent)

    return prop


test_saga_inputs_never_fail_a_workflow_task = saga_property(EXAMPLES)
test_chain_inputs_and_signals_never_fail_a_workflow_task = chain_property(EXAMPLES)
test_aggregator_inputs_and_signals_never_fail_a_workflow_task = aggregator_property(EXAMPLES)
test_saga_heavy = pytest.mark.fuzz_heavy(saga_property(HEAVY_EXAMPLES))
test_chain_heavy = pytest.mark.fuzz_heavy(chain_property(HEAVY_EXAMPLES))
test_aggregator_heavy = pytest.mark.fuzz_heavy(aggregator_property(HEAVY_EXAMPLES))
