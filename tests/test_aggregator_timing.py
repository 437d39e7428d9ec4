"""The aggregator's timing and slot bookkeeping: the deadline armed first and counted from the
start, a lookback that cannot hold the join hostage, the outcome decided by the join, events
ordered by their own time, and what happens when a cancel, a signal or the deadline lands in
the workflow task that completes the join."""

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from coord.models.aggregator.spec import AggregatorSpec, AggregatorStatus
from coord.models.events.envelope import EventEnvelope, EventHeader
from coord.models.wire import contract
from coord.starter import api
from coord.starter.api.aggregators import publish_to_aggregator
from coord.worker import build_worker
from tests.helpers import (
    API,
    TEST_PLAN,
    WIREFRAME,
    completed,
    eventually,
    phase1,
    signal,
    state_shows,
    user_story,
)


def at(kind: tuple[str, str], timestamp: datetime, correlation_id: str | None = None) -> Any:
    """An event of `kind` that happened at `timestamp`, as plain JSON (what a signal carries)."""
    envelope = EventEnvelope(
        event=EventHeader(
            type=kind[0], source=kind[1], timestamp=timestamp, correlation_id=correlation_id
        ),
        payload={"at": timestamp.isoformat()},
    )
    return envelope.model_dump(mode="json")


async def history_types(handle: WorkflowHandle[Any, Any]) -> list[str]:
    history = await handle.fetch_history()
    return [
        EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in history.events
    ]


async def coord_status(handle: WorkflowHandle[Any, Any]) -> str | None:
    description = await handle.describe()
    return description.typed_search_attributes.get(contract.COORD_STATUS)


async def test_deadline_is_armed_first_and_passes_while_the_chain_does_not_answer(
    client: Client, task_queue: str
) -> None:
    """The chain's worker is away, so the lookback's query hangs: the deadline still passes on
    time, and the lookback's retries are bounded."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    await api.start_chain(client, user_story(), correlation_id, queue=f"{task_queue}-nobody")
    spec = phase1(correlation_id=correlation_id, lookback=True, timeout="2s")
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)
        state = await asyncio.wait_for(handle.result(), 20)
        history = await handle.fetch_history()
    await api.chain_handle(client, correlation_id).terminate()
    assert state.status == AggregatorStatus.TIMED_OUT
    assert state.emitted is not None and len(state.emitted.payload["missing"]) == 3
    commands = [
        EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
        for e in history.events
        if e.event_type
        in (
            EventType.EVENT_TYPE_TIMER_STARTED,
            EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
        )
    ]
    assert commands[:3] == [
        "TIMER_STARTED",
        "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED",
        "ACTIVITY_TASK_SCHEDULED",
    ]
    lookback = next(
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )
    assert lookback.activity_type.name == "chain_events"
    assert lookback.retry_policy.maximum_attempts == 4


async def test_a_chain_that_cannot_answer_is_recorded_and_the_join_goes_on(
    client: Client, task_queue: str
) -> None:
    """`chain-<id>` is not a chain (here: another aggregator), so it answers no timeline query:
    the lookback fails for good at once, is recorded, and live events still complete the join."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    impostor = phase1(aggregator_id="impostor")
    async with build_worker(client, task_queue):
        impostor_handle = await client.start_workflow(
            "Aggregator",
            impostor.model_dump(mode="json"),
            id=f"chain-{correlation_id}",
            task_queue=task_queue,
        )
        handle = await api.start_aggregator(
            client, phase1(correlation_id=correlation_id, lookback=True), queue=task_queue
        )
        state = await state_shows(client, handle, lambda s: s.lookback_failure)
        assert "does not answer the timeline query" in (state.lookback_failure or "")
        await signal(handle, *(completed(k, correlation_id) for k in (API, WIREFRAME, TEST_PLAN)))
        state = await asyncio.wait_for(handle.result(), 20)
        await impostor_handle.cancel()
    assert state.status == AggregatorStatus.COMPLETED
    assert state.lookback_failure is not None


async def test_deadline_counts_from_the_start_not_from_the_first_worker(
    client: Client, task_queue: str
) -> None:
    """No worker runs until the deadline has passed: the first workflow task times the join
    out at once, without arming a timer for another full timeout."""
    handle = await api.start_aggregator(client, phase1(timeout="2s"), queue=task_queue)
    await signal(handle, completed(API))
    started = (await handle.describe()).start_time
    assert started is not None

    async def deadline_passed() -> bool:
        return datetime.now(UTC) > started + timedelta(seconds=2.5)

    await eventually(deadline_passed)
    async with build_worker(client, task_queue):
        state = await asyncio.wait_for(handle.result(), 20)
    assert state.status == AggregatorStatus.TIMED_OUT and state.matched == 1
    assert "TIMER_STARTED" not in await history_types(handle)


async def test_a_satisfied_join_completes_when_the_deadline_fires_in_the_same_task(
    client: Client, task_queue: str
) -> None:
    """The deadline timer fires while no worker runs; the last event arrives after it; the
    worker then sees both in one workflow task. The join is complete: `completed`."""
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, phase1(timeout="2s"), queue=task_queue)
        await signal(handle, completed(API), completed(WIREFRAME))
        await state_shows(client, handle, lambda s: s.matched == 2)

    async def fired() -> bool:
        return "TIMER_FIRED" in await history_types(handle)

    await eventually(fired)
    await signal(handle, completed(TEST_PLAN))
    async with build_worker(client, task_queue):
        state = await asyncio.wait_for(handle.result(), 20)
    assert state.status == AggregatorStatus.COMPLETED
    assert state.emitted is not None and state.emitted.event.type == "Phase1CompletedEvent"
    assert state.emitted.payload["missing"] == []


async def test_a_cancel_and_other_events_landing_with_the_completing_event(
    client: Client, task_queue: str
) -> None:
    """The last event, a duplicate, an unrelated event and a cancel, all in one workflow task:
    the join is complete, so it completes (the cancel changes nothing) and counts each event."""
    first = completed(API)
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, phase1(), queue=task_queue)
        await signal(handle, first, completed(WIREFRAME))
        await state_shows(client, handle, lambda s: s.matched == 2)
    await signal(handle, completed(TEST_PLAN), first, EventEnvelope.new("Unrelated", "/x"))
    await handle.cancel()
    async with build_worker(client, task_queue):
        state = await asyncio.wait_for(handle.result(), 30)
        assert await coord_status(handle) == "completed"
    assert state.status == AggregatorStatus.COMPLETED
    assert (state.matched, state.duplicates, state.unmatched, state.rejected_count) == (3, 1, 1, 0)


async def test_a_cancel_during_lookback_says_cancelled(client: Client, task_queue: str) -> None:
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    await api.start_chain(client, user_story(), correlation_id, queue=f"{task_queue}-nobody")
    spec = phase1(correlation_id=correlation_id, lookback=True)
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)

        async def looking_back() -> bool:
            pending = (await handle.describe()).raw_description.pending_activities
            return any(a.activity_type.name == "chain_events" for a in pending)

        await eventually(looking_back)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 20)
        state = await api.aggregator_state(client, handle.id)
        assert await coord_status(handle) == "cancelled"
    await api.chain_handle(client, correlation_id).terminate()
    assert state.status == AggregatorStatus.CANCELLED and state.emitted is None


async def test_seconds_left_is_counted_when_read(client: Client, task_queue: str) -> None:
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, phase1(timeout="1m"), queue=task_queue)
        first = await state_shows(client, handle, lambda s: s.seconds_left is not None)
        assert first.seconds_left is not None
        later = first.seconds_left - 1.5
        await state_shows(client, handle, lambda s: (s.seconds_left or 0) < later)
        await api.cancel_aggregator(client, handle.id)


async def test_keep_latest_holds_the_newest_event_though_lookback_offers_it_last(
    client: Client, task_queue: str
) -> None:
    """An hour-old score is in the chain's log; a fresh one starts the aggregator (so it is
    offered first), then the lookback offers the old one: the fresh one stays."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC)
    score, done = ("ScoreReported", "/judge"), ("ReviewDone", "/reviewer")
    spec = AggregatorSpec.model_validate(
        {
            "aggregator_id": f"scores-{uuid.uuid4().hex[:8]}",
            "wait_for": [{"type": score[0]}, {"type": done[0]}],
            "timeout": "1m",
            "on_complete": "Scored",
            "on_timeout": "NotScored",
            "keep": "latest",
            "correlation_id": correlation_id,
            "lookback": True,
        }
    )
    old = at(score, now - timedelta(hours=1), correlation_id)
    fresh = at(score, now, correlation_id)
    async with build_worker(client, task_queue):
        await api.publish(
            client, EventEnvelope.model_validate(old), spec=user_story(), queue=task_queue
        )

        async def recorded() -> bool:
            timeline = await api.chain_timeline(client, correlation_id)
            return old["event"]["id"] in [entry.event_id for entry in timeline]

        await eventually(recorded)
        await publish_to_aggregator(
            client, EventEnvelope.model_validate(fresh), spec, queue=task_queue
        )
        handle = api.aggregator_handle(client, spec.workflow_id)
        await state_shows(client, handle, lambda s: s.matched == 2)
        await handle.signal("event", at(done, now, correlation_id))
        state = await asyncio.wait_for(handle.result(), 20)
        await api.close_chain(client, correlation_id)
    assert state.slots[0].event_id == fresh["event"]["id"]


async def test_keep_latest_with_repeated_slots_replaces_the_oldest(
    client: Client, task_queue: str
) -> None:
    now = datetime.now(UTC)
    scores = [at(API, now + timedelta(seconds=i)) for i in range(4)]
    spec = phase1(
        wait_for=[{"type": API[0]}, {"type": API[0]}, {"type": TEST_PLAN[0]}],
        keep="latest",
        timeout="1m",
    )
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)
        for score in scores:
            await handle.signal("event", score)
        await handle.signal("event", at(TEST_PLAN, now))
        state = await asyncio.wait_for(handle.result(), 20)
    held = {slot.event_id for slot in state.slots[:2]}
    assert held == {scores[2]["event"]["id"], scores[3]["event"]["id"]}


async def test_keep_first_holds_the_earliest_event_whatever_the_arrival_order(
    client: Client, task_queue: str
) -> None:
    now = datetime.now(UTC)
    later, earlier = at(API, now), at(API, now - timedelta(minutes=5))
    spec = phase1(keep="first", timeout="1m")
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)
        for event in (later, earlier, at(WIREFRAME, now), at(TEST_PLAN, now)):
            await handle.signal("event", event)
        state = await asyncio.wait_for(handle.result(), 20)
    assert state.slots[0].event_id == earlier["event"]["id"]
