"""The Aggregator workflow: the phase1-complete join, with deadlines and quorums."""

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from coord.infra.signals import running
from coord.models.aggregator.spec import AggregatorSpec, AggregatorState, AggregatorStatus
from coord.models.events.envelope import EventEnvelope
from coord.models.events.joins import JoinState, Slot
from coord.models.wire import contract
from coord.starter import api
from coord.starter.api.aggregators import publish_to_aggregator
from coord.worker import build_worker
from tests.agents import GatedAgents
from tests.helpers import (
    API,
    TEST_PLAN,
    WIREFRAME,
    approved,
    completed,
    eventually,
    phase1,
    user_story,
)


async def aggregate(
    client: Client, task_queue: str, spec: AggregatorSpec, events: list[EventEnvelope]
) -> AggregatorState:
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)
        for envelope in events:
            await handle.signal("event", envelope.model_dump(mode="json"))
        return await asyncio.wait_for(handle.result(), 30)


async def test_all_three_in_any_order_complete_phase1(client: Client, task_queue: str) -> None:
    plan = completed(TEST_PLAN)
    events = [
        plan,
        completed(("TestPlanCompleted", "/someone-else")),
        EventEnvelope.new("Unrelated", "/x"),
        plan,
        completed(WIREFRAME),
        completed(API),
    ]
    state = await aggregate(client, task_queue, phase1(), events)
    assert state.status == AggregatorStatus.COMPLETED
    assert state.emitted is not None and state.emitted.event.type == "Phase1CompletedEvent"
    assert [s.status for s in state.slots] == ["received"] * 3
    assert (state.matched, state.duplicates, state.unmatched) == (3, 1, 2)
    assert state.emitted.event.causation_id == events[-1].event.id
    assert state.progress == "3/3 events received; completed"


async def test_two_of_three_then_the_deadline_emits_a_partial_timeout(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    state = await aggregate(
        time_env.client, task_queue, phase1(), [completed(API), completed(WIREFRAME)]
    )
    assert state.status == AggregatorStatus.TIMED_OUT
    assert state.emitted is not None and state.emitted.event.type == "Phase1TimeoutEvent"
    payload = state.emitted.payload
    assert list(payload["inputs"]) == ["APIDesignCompleted", "WireframeCompleted"]
    assert payload["missing"] == [{"type": "TestPlanCompleted", "from": "/test-engineer"}]
    assert state.progress == "2/3 events received; timed_out"


@pytest.mark.parametrize("quorum", [{"at_least": 2}, {"threshold": 0.67}, {"mode": "any"}])
async def test_quorums_complete_early(
    client: Client, task_queue: str, quorum: dict[str, Any]
) -> None:
    needed = 1 if quorum.get("mode") == "any" else 2
    events = [completed(WIREFRAME), completed(API)][:needed]
    state = await aggregate(client, task_queue, phase1(**quorum), events)
    assert state.status == AggregatorStatus.COMPLETED
    assert sum(s.status == "received" for s in state.slots) == needed


def test_threshold_reads_as_the_seed_means_it() -> None:
    slots = [Slot(type=t) for t in "ABC"]
    assert JoinState.of(slots, threshold=0.67).needed == 2
    assert JoinState.of(slots, threshold=0.7).needed == 3
    assert JoinState.of([Slot(type=t) for t in "ABCDE"], threshold=0.5).needed == 3


async def test_keep_latest_replaces_the_slot(client: Client, task_queue: str) -> None:
    first, second = completed(API), completed(API)
    events = [first, second, completed(WIREFRAME), completed(TEST_PLAN)]
    state = await aggregate(client, task_queue, phase1(keep="latest", timeout="1m"), events)
    assert state.emitted is not None
    assert state.emitted.payload["inputs"]["APIDesignCompleted"]["event_id"] == second.event.id


async def test_the_emitted_event_carries_each_joined_event_with_its_payload(
    client: Client, task_queue: str
) -> None:
    """The same shape a joined chain agent receives (`JoinState.inputs`): keyed by slot."""
    events = [completed(kind) for kind in (API, WIREFRAME, TEST_PLAN)]
    state = await aggregate(client, task_queue, phase1(), events)
    assert state.emitted is not None
    inputs = state.emitted.payload["inputs"]
    assert list(inputs) == ["APIDesignCompleted", "WireframeCompleted", "TestPlanCompleted"]
    for envelope, joined in zip(events, inputs.values(), strict=True):
        assert joined["event_id"] == envelope.event.id
        assert joined["source"] == envelope.event.source
        assert joined["payload"] == envelope.payload


async def test_first_event_starts_the_aggregator_and_is_not_lost(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    spec = phase1(correlation_id=correlation_id)
    async with build_worker(client, task_queue):
        workflow_id = await publish_to_aggregator(
            client, completed(API, correlation_id), spec, queue=task_queue
        )
        for kind in (WIREFRAME, TEST_PLAN):
            assert await api.deliver(client, completed(kind, correlation_id), to=workflow_id)
        state = await asyncio.wait_for(api.aggregator_handle(client, workflow_id).result(), 30)
        with pytest.raises(api.Undeliverable, match="has ended"):
            await api.deliver(client, completed(API, correlation_id), to=workflow_id)
    assert workflow_id == f"aggregator-{spec.aggregator_id}~{correlation_id}"
    assert not state.published_to_chain, "no chain exists for this correlation"
    assert state.status == AggregatorStatus.COMPLETED


async def test_two_scoped_aggregators_whose_ids_joined_the_same_both_run(
    client: Client, task_queue: str
) -> None:
    """Aggregator `X-a` scoped to `b` and aggregator `X` scoped to `a-b`: joined by `-` both
    were `aggregator-X-a-b`, and the second was refused as already running."""
    stem = f"phase1-{uuid.uuid4().hex[:8]}"
    specs = [phase1(aggregator_id=f"{stem}-a", correlation_id="b")]
    specs.append(phase1(aggregator_id=stem, correlation_id="a-b"))
    async with build_worker(client, task_queue):
        handles = [await api.start_aggregator(client, spec, queue=task_queue) for spec in specs]
        for handle in handles:
            await api.cancel_aggregator(client, handle.id)
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 30)
    assert [h.id for h in handles] == [f"aggregator-{stem}-a~b", f"aggregator-{stem}~a-b"]


async def test_a_worker_restart_between_events_loses_nothing(
    client: Client, task_queue: str
) -> None:
    spec = phase1()
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)
        await handle.signal("event", completed(API).model_dump(mode="json"))

        async def recorded() -> bool:
            return (await api.aggregator_state(client, handle.id)).matched == 1

        await eventually(recorded)
    await handle.signal("event", completed(WIREFRAME).model_dump(mode="json"))
    async with build_worker(client, task_queue, GatedAgents().registry()):
        await handle.signal("event", completed(TEST_PLAN).model_dump(mode="json"))
        state = await asyncio.wait_for(handle.result(), 30)
    assert state.status == AggregatorStatus.COMPLETED and state.matched == 3


async def test_lookback_counts_what_the_chain_already_recorded_and_emits_into_it(
    client: Client, task_queue: str
) -> None:
    """A join registered late misses nothing, and its result joins the chain's event log."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    gates = GatedAgents(names=["frontend-specialist"])
    chain_spec = user_story()
    async with build_worker(client, task_queue, gates.registry()):
        await api.publish(client, approved(correlation_id), spec=chain_spec, queue=task_queue)
        await gates.wait_started("frontend-specialist")
        spec = phase1(correlation_id=correlation_id, lookback=True)
        state = await asyncio.wait_for(
            (await api.start_aggregator(client, spec, queue=task_queue)).result(), 30
        )
        assert state.status == AggregatorStatus.COMPLETED
        assert state.published_to_chain

        async def in_chain() -> bool:
            timeline = await api.chain_timeline(client, correlation_id)
            return "Phase1CompletedEvent" in [e.event for e in timeline]

        await eventually(in_chain)
        gates.released["frontend-specialist"].set()
        await asyncio.wait_for(api.chain_handle(client, correlation_id).result(), 30)


async def test_publish_by_correlation_reaches_chain_and_aggregators(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    spec = phase1(correlation_id=correlation_id)
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)

        async def listed() -> bool:
            return handle.id in await running(client, contract.Pattern.AGGREGATOR, correlation_id)

        await eventually(listed)
        targets = await api.deliver(client, completed(API, correlation_id), spec=user_story())
        assert targets.reached == [handle.id, f"chain-{correlation_id}"]
        state = await api.aggregator_state(client, handle.id)
    assert state.matched == 1
    assert state.progress == (
        "1/3 events received, waiting for WireframeCompleted from /ux-designer, "
        "TestPlanCompleted from /test-engineer"
    )


async def test_aggregator_hears_the_events_its_chain_records(
    client: Client, task_queue: str
) -> None:
    """The composition: the chain's agents publish, the phase1 join completes, and its
    result is published back into the chain."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    gates = GatedAgents(names=["frontend-specialist"])
    async with build_worker(client, task_queue, gates.registry()):
        await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        handle = await api.start_aggregator(
            client, phase1(correlation_id=correlation_id), queue=task_queue
        )

        async def attached() -> bool:
            return handle.id in (await api.chain_state(client, correlation_id)).listeners

        await eventually(attached)
        await api.publish(client, approved(correlation_id))
        state = await asyncio.wait_for(handle.result(), 30)
        gates.released["frontend-specialist"].set()
        chain = await asyncio.wait_for(api.chain_handle(client, correlation_id).result(), 30)
        timeline = await api.chain_timeline(client, correlation_id)
    assert state.status == AggregatorStatus.COMPLETED and state.published_to_chain
    assert "Phase1CompletedEvent" in [e.event for e in timeline]
    assert chain.status == "completed"


async def test_a_chain_past_its_terminal_event_waits_for_its_aggregator_to_publish_and_leave(
    client: Client, task_queue: str
) -> None:
    """The chain meets its terminal event while its phase-1 aggregator still waits: it stays
    running, records the aggregator's result when the join completes, and only then ends."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    terminal = EventEnvelope.new(
        "TestingCompleted", "/test-engineer", payload={}, correlation_id=correlation_id
    )
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        handle = await api.start_aggregator(
            client, phase1(correlation_id=correlation_id), queue=task_queue
        )

        async def attached() -> bool:
            return handle.id in (await api.chain_state(client, correlation_id)).listeners

        await eventually(attached)
        await api.publish(client, terminal)

        async def terminal_seen() -> bool:
            return (await api.chain_state(client, correlation_id)).terminal_seen

        await eventually(terminal_seen)
        assert (await api.chain_state(client, correlation_id)).status == "running"
        for kind in (API, WIREFRAME, TEST_PLAN):
            await api.publish(client, completed(kind, correlation_id))
        state = await asyncio.wait_for(handle.result(), 30)
        ended = await asyncio.wait_for(chain.result(), 30)
        timeline = [entry.event for entry in await api.chain_timeline(client, correlation_id)]
    assert state.status == AggregatorStatus.COMPLETED and state.published_to_chain
    assert ended.status == "completed" and ended.listeners == []
    assert timeline.index("Phase1CompletedEvent") > timeline.index("TestingCompleted")


async def test_cancelled_aggregator_says_so_and_emits_nothing(
    client: Client, task_queue: str
) -> None:
    """Its final record stays readable without a worker (a cancelled run keeps it in its memo)."""
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, phase1(), queue=task_queue)
        await handle.signal("event", completed(API).model_dump(mode="json"))
        await api.cancel_aggregator(client, handle.id)
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 30)
    state = await asyncio.wait_for(api.aggregator_state(client, handle.id), 10)
    assert state.status == AggregatorStatus.CANCELLED
    assert state.emitted is None and state.matched == 1
    # Cancelled again, it says how it ended in its record's word, not the server's `canceled`.
    with pytest.raises(api.Conflict, match=r"has already ended \(cancelled\); nothing to cancel$"):
        await api.cancel_aggregator(client, handle.id)
