"""A chain's local runs that start together run side by side in one local activity (a batch):
which results come back in its marker, how long it may take, and, on a chain, a run whose
result did not fit running again on its own, and a failure no retry fixes ending its run at
once with its type and attempt."""

import asyncio
import uuid
from collections import Counter
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio.client import Client

from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentFn, AgentRegistry, AgentRequest
from coord.models.mesh.batches import (
    BATCH_MARGIN,
    BATCH_RESULT_BYTES,
    BatchedFailure,
    BatchedOutcome,
    BatchedRun,
    LocalBatch,
    batch_timeout,
    results_that_fit,
)
from coord.models.wire.contract import FailureType
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import parked, run_chain
from tests.test_agent_placement import (
    _agent_tasks,
    _replays_from_every_task,
    local_activity_types,
    local_agent_runs,
)

FANNED = ("first", "second", "third")
LARGE = 300 * 1024
"""A result's bytes: one fits a batch's marker, two do not."""


def test_results_fit_a_batch_in_order_while_their_bytes_allow() -> None:
    half = BATCH_RESULT_BYTES // 2
    assert results_that_fit([half, None, half, 1]) == [True, True, True, False]
    assert results_that_fit([half + 1, half, 10]) == [True, False, True], "a smaller one fits"
    assert results_that_fit([BATCH_RESULT_BYTES + 1]) == [False]


def test_a_batch_takes_its_slowest_runs_time_and_a_margin() -> None:
    request = AgentRequest(agent="a", event=EventEnvelope.new("Go", "/go"))
    runs = [BatchedRun(request=request, timeout_s=s) for s in (1.0, 7.5, 2.0)]
    assert batch_timeout(LocalBatch(runs=runs)) == timedelta(seconds=7.5) + BATCH_MARGIN


def test_an_outcome_without_result_or_failure_runs_again() -> None:
    failed = BatchedFailure(type=FailureType.TIMEOUT, message="late")
    assert BatchedOutcome().again
    assert not BatchedOutcome(failure=failed).again


def _fanned(*, announced: bool = False, **subscription: Any) -> ChainSpec:
    """Three subscriptions on `Go`, one per agent of FANNED, each with `subscription`; each
    publishes `<agent>-done` when `announced`, else nothing."""
    return ChainSpec.model_validate(
        {
            "name": "fanned",
            "triggers": ["Go"],
            "max_concurrency": 4,
            "subscriptions": [
                {
                    "agent": name,
                    "events": ["Go"],
                    "publishes": {"on_success": f"{name}-done"} if announced else {"events": []},
                    **subscription,
                }
                for name in FANNED
            ],
            "alerts": None,
        }
    )


def _serving(agent: AgentFn) -> AgentRegistry:
    """The three agents, each `agent`."""
    registry = AgentRegistry()
    for name in FANNED:
        registry.register(name)(agent)
    return registry


def _counted(calls: Counter[str], output: Mapping[str, Any]) -> AgentRegistry:
    """The three agents, counting their calls, each returning `output`."""

    async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        calls[context.agent] += 1
        return output

    return _serving(agent)


def _overlapping(running: Counter[str]) -> AgentRegistry:
    """The three agents, counting how many of them run at once (`most`)."""

    async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.1)  # the agent's work: long enough for the others to start
        running["now"] -= 1
        return {}

    return _serving(agent)


async def test_a_chain_runs_local_agents_starting_together_in_one_batch_and_replays(
    client: Client, task_queue: str
) -> None:
    """Three subscriptions on one event, the chain allowing four runs at once: their local runs
    go side by side in one local activity (one at a time: a replay may hand several local
    results to the chain at once, which it would take in another order than it recorded), and
    the chain replays from every workflow task."""
    running: Counter[str] = Counter()
    go = EventEnvelope.new("Go", "/go")
    spec = _fanned(announced=True)
    async with build_worker(client, task_queue, _overlapping(running)):
        state, timeline = await run_chain(client, task_queue, spec, [go])
        history = await api.chain_handle(client, state.correlation_id).fetch_history()
    assert {row.event for row in timeline} == {"Go", *(f"{name}-done" for name in FANNED)}
    assert running["most"] == len(FANNED), "side by side"
    events = list(history.events)
    assert _agent_tasks(events) == {} and local_agent_runs(events) == len(FANNED)
    assert local_activity_types(events) == ["run_agents"], "one batch"
    await _replays_from_every_task(history)


async def test_runs_whose_results_do_not_fit_their_batch_run_again_on_their_own(
    client: Client, task_queue: str
) -> None:
    """Three runs of 300 KiB results: the first comes back in the batch, the other two are
    called again, each in a local activity of its own, and every run succeeds."""
    calls: Counter[str] = Counter()
    go = EventEnvelope.new("Go", "/go")
    async with build_worker(client, task_queue, _counted(calls, {"blob": "x" * LARGE})):
        state, _ = await run_chain(client, task_queue, _fanned(), [go])
        events = [
            e async for e in api.chain_handle(client, state.correlation_id).fetch_history_events()
        ]
    assert state.dead_lettered == 0 and not state.running
    assert sorted(calls.values()) == [1, 2, 2], "two called again"
    assert local_activity_types(events) == ["run_agents", "run_agent", "run_agent"]
    assert _agent_tasks(events) == {}


async def test_a_failure_no_retry_fixes_ends_its_batched_run_at_once(
    client: Client, task_queue: str
) -> None:
    """An output that does not validate (`invalid_payload`, never retried) fails each run in
    its batch after one call, parked with its type and attempt, though the subscription allows
    retries."""
    calls: Counter[str] = Counter()
    go = EventEnvelope.new("Go", "/go", correlation_id=f"bad-{uuid.uuid4().hex[:8]}")
    spec = _fanned(retry={"max_retries": 3, "initial_delay": "10ms", "jitter": "none"})
    async with build_worker(client, task_queue, _counted(calls, {"publish": 5})):
        state, _ = await run_chain(client, task_queue, spec, [go])
        entries = await parked(client, task_queue, len(FANNED))
        letters = [await api.dlq_entry(client, row.entry_id) for row in entries]
    assert dict(calls) == dict.fromkeys(FANNED, 1), "one call each"
    assert state.dead_lettered == len(FANNED)
    assert {(e.failure_type, e.attempts) for e in letters} == {(FailureType.INVALID_PAYLOAD, 1)}


async def test_a_batched_run_past_its_timeout_fails_timeout_and_frees_the_others(
    client: Client, task_queue: str
) -> None:
    """One agent of the three outlives its subscription's one-second timeout in their batch: it
    is parked `timeout` after its one attempt, and the other two succeed in that same batch."""
    calls: Counter[str] = Counter()

    async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        calls[context.agent] += 1
        if context.agent == "second":
            await asyncio.sleep(5)
        return {}

    go = EventEnvelope.new("Go", "/go", correlation_id=f"late-{uuid.uuid4().hex[:8]}")
    spec = _fanned(announced=True, timeout="1s", retry={"max_retries": 0})
    async with build_worker(client, task_queue, _serving(agent)):
        state, timeline = await run_chain(client, task_queue, spec, [go])
        [row] = await parked(client, task_queue, 1)
        letter = await api.dlq_entry(client, row.entry_id)
    assert dict(calls) == dict.fromkeys(FANNED, 1)
    assert state.dead_lettered == 1
    assert {row.event for row in timeline} == {"Go", "first-done", "third-done"}
    assert (letter.failure_type, letter.attempts, letter.target_agent) == ("timeout", 1, "second")
