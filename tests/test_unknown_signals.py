"""A signal no handler takes (a misspelt `event`, one meant for another workflow) reaches a
chain or an aggregator from outside like any event: it is counted, rejected and parked with
what it carried, never left unread, and no workflow task fails for it."""

import asyncio
import uuid

from temporalio.client import Client

from coord.models.dlq.letter import DlqSelection
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import parked, phase1, routing_spec, task_failures


async def test_a_chain_parks_a_signal_it_has_no_handler_for(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"typo-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        await handle.signal("evnt", {"event": {"type": "A"}})
        [entry] = await parked(client, task_queue, 1, DlqSelection(correlation_id=correlation_id))
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 30)
        letter = await api.dlq_entry(client, entry.entry_id)
        failures = await task_failures(handle)
    assert (letter.failure_type, letter.target_workflow) == ("invalid_input", handle.id)
    assert letter.message == "signal 'evnt': a chain takes no such signal"
    assert letter.raw == [{"event": {"type": "A"}}]
    assert state.rejected_count == 1 and state.dead_lettered == 1
    assert failures == []


async def test_an_aggregator_parks_a_signal_it_has_no_handler_for(
    client: Client, task_queue: str
) -> None:
    spec = phase1()
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)
        await handle.signal("rerun", "not for an aggregator")
        [entry] = await parked(client, task_queue, 1)
        state = await api.aggregator_state(client, handle.id)
        letter = await api.dlq_entry(client, entry.entry_id)
        await handle.cancel()
        failures = await task_failures(handle)
    assert (letter.failure_type, letter.target_workflow) == ("invalid_input", handle.id)
    assert letter.message == "signal 'rerun': an aggregator takes no such signal"
    assert letter.raw == ["not for an aggregator"]
    assert state.received == 1 and state.rejected_count == 1
    assert failures == []
