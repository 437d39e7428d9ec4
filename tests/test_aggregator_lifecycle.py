"""An aggregator's life around its chain: what it does with events after it has finished
(listened-to ones are dropped, addressed ones dead-lettered, duplicates counted), detaching
from its chain, and continuing-as-new under thousands of events."""

import asyncio
import uuid
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from coord.models.aggregator.spec import AggregatorStatus
from coord.models.events.envelope import EventEnvelope
from coord.starter import api
from coord.worker import WORKFLOWS, build_worker
from tests.agents import GatedAgents
from tests.helpers import (
    API,
    TEST_PLAN,
    WIREFRAME,
    approved,
    completed,
    eventually,
    phase1,
    signal,
    state_shows,
    user_story,
)


def as_json(envelope: EventEnvelope) -> dict[str, Any]:
    return envelope.model_dump(mode="json")


async def test_after_it_finished_it_parks_only_events_addressed_to_it(
    client: Client, task_queue: str
) -> None:
    """A worker without activities keeps the parking of an invalid envelope pending, so the
    finished aggregator stays open while the test sends it more events."""
    first = completed(API)
    async with Worker(client, task_queue=task_queue, workflows=list(WORKFLOWS)):
        handle = await api.start_aggregator(client, phase1(), queue=task_queue)
        await handle.signal("event", {"event": {"type": ""}})
        await signal(handle, first, completed(WIREFRAME), completed(TEST_PLAN))
        await state_shows(client, handle, lambda s: s.status == AggregatorStatus.COMPLETED)
        await handle.signal("chain_event", as_json(completed(API)))
        await handle.signal("chain_event", as_json(first))
        await handle.signal("event", as_json(first))
        await handle.signal("event", as_json(EventEnvelope.new("EventDeadLettered", "/dlq")))
        await handle.signal("event", as_json(completed(API)))
        finished = await state_shows(client, handle, lambda s: s.rejected_count == 2)
    async with build_worker(client, task_queue):
        state = await asyncio.wait_for(handle.result(), 30)
    for record in (finished, state):
        assert record.status == AggregatorStatus.COMPLETED
        assert (record.matched, record.duplicates, record.ignored_after_finish) == (3, 2, 2)
        assert record.rejected_count == 2 and "the aggregator ended" in record.rejected[-1]
        assert record.received == 9


async def signals_sent(client: Client, handle: WorkflowHandle[Any, Any]) -> list[tuple[str, Any]]:
    """The signals the workflow sent, with their decoded argument."""
    history = await handle.fetch_history()
    converter = client.data_converter
    sent = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            attributes = event.signal_external_workflow_execution_initiated_event_attributes
            [arg] = await converter.decode(attributes.input.payloads)
            sent.append((attributes.signal_name, arg))
    return sent


async def test_a_finished_aggregator_detaches_from_its_chain(
    client: Client, task_queue: str
) -> None:
    """It publishes its result into the chain, then detaches (a chain past its terminal event
    waits for its listeners to leave); what the chain forwarded after the end, its own result
    among them, is ignored, not parked."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    gates = GatedAgents(names=["frontend-specialist"])
    async with build_worker(client, task_queue, gates.registry()):
        await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        handle = await api.start_aggregator(
            client, phase1(correlation_id=correlation_id), queue=task_queue
        )

        async def listening(expected: bool) -> bool:
            listeners = (await api.chain_state(client, correlation_id)).listeners
            return (handle.id in listeners) == expected

        await eventually(lambda: listening(True))
        await api.publish(client, approved(correlation_id))
        state = await asyncio.wait_for(handle.result(), 30)
        await eventually(lambda: listening(False))
        gates.released["frontend-specialist"].set()
        await asyncio.wait_for(api.chain_handle(client, correlation_id).result(), 30)
    assert state.status == AggregatorStatus.COMPLETED and state.published_to_chain
    assert state.rejected_count == 0
    names = [name for name, _ in await signals_sent(client, handle)]
    assert names == ["attach", "event", "detach"]
    assert ("detach", handle.id) in await signals_sent(client, handle)


async def test_an_aggregator_started_is_attached_before_its_first_workflow_task(
    client: Client, task_queue: str
) -> None:
    """`start_aggregator` returns with the aggregator attached to its chain, though no worker
    has run it yet (none serves its queue here): the chain reaches its terminal event, waits
    for it, and records its result once a worker runs it."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    aggregator_queue = f"{task_queue}-aggregator"
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        handle = await api.start_aggregator(
            client, phase1(correlation_id=correlation_id), queue=aggregator_queue
        )
        assert handle.id in (await api.chain_state(client, correlation_id)).listeners
        await api.publish(client, approved(correlation_id))

        async def terminal_recorded() -> bool:
            timeline = await api.chain_timeline(client, correlation_id)
            return "TestingCompleted" in {entry.event for entry in timeline}

        await eventually(terminal_recorded, 60)
        async with build_worker(client, aggregator_queue):
            state = await asyncio.wait_for(handle.result(), 60)
            await asyncio.wait_for(chain.result(), 60)
        events = [entry.event for entry in await api.chain_timeline(client, correlation_id)]
    assert state.status == AggregatorStatus.COMPLETED and state.published_to_chain
    assert events.index("TestingCompleted") < events.index("Phase1CompletedEvent")


async def test_thousands_of_events_continue_as_new_and_keep_the_count(
    client: Client, task_queue: str
) -> None:
    """The session's server suggests continue-as-new after 300 history events: 1,000 unmatched
    events and 50 duplicates take several runs, which carry the join, the counts, the recent
    ids and the deadline."""
    unmatched = [EventEnvelope.new("Unrelated", "/flood") for _ in range(1000)]
    duplicates = unmatched[-50:]
    limit = asyncio.Semaphore(16)
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, phase1(timeout="10m"), queue=task_queue)
        first_run = await handle.describe()
        deadline = (await state_shows(client, handle, lambda s: s.deadline)).deadline
        await signal(handle, completed(API))

        async def send(envelope: EventEnvelope) -> None:
            async with limit:
                await signal(handle, envelope)

        await asyncio.gather(*(send(envelope) for envelope in unmatched))
        await asyncio.gather(*(send(envelope) for envelope in duplicates))
        await signal(handle, completed(WIREFRAME), completed(TEST_PLAN))
        state = await asyncio.wait_for(handle.result(), 60)
        runs = await run_count(client, handle.id, first_run.run_id)
    assert state.status == AggregatorStatus.COMPLETED
    assert (state.matched, state.unmatched, state.duplicates) == (3, 1000, 50)
    assert state.received == 1053
    assert state.deadline == deadline
    assert runs > 1


async def run_count(client: Client, workflow_id: str, run_id: str) -> int:
    """Follow the runs from the first, each continued-as-new into the next."""
    runs = 1
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        last = history.events[-1]
        if last.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return runs
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        runs += 1
