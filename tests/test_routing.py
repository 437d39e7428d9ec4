"""Delivery to several targets: each on its own, an ended one skipped and reported."""

import asyncio
import uuid

from temporalio.client import Client

from coord.infra.signals import signal_each
from coord.models.dlq.letter import DlqSelection
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import API, completed, phase1, routing_spec


async def test_an_ended_target_is_skipped_and_the_others_still_reached(
    client: Client, task_queue: str
) -> None:
    """The listing of running aggregators and chains is eventually consistent, so a listed target
    may have ended: the event still reaches every other target, and is not parked for one that
    merely listened."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    ended_correlation = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        aggregator = await api.start_aggregator(
            client, phase1(correlation_id=correlation_id, timeout="1s"), queue=task_queue
        )
        await asyncio.wait_for(aggregator.result(), 30)
        ended_chain = await api.start_chain(
            client, routing_spec(), ended_correlation, queue=task_queue
        )
        await api.close_chain(client, ended_correlation)
        await asyncio.wait_for(ended_chain.result(), 30)
        chain = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        raw = completed(API, correlation_id).model_dump(mode="json")
        delivery = await signal_each(client, [aggregator.id, ended_chain.id, chain.id], raw)
        state = await api.chain_state(client, correlation_id)
        letters = await api.dlq_entries(client, DlqSelection(), queue=task_queue)
        await api.close_chain(client, correlation_id)
    assert delivery.reached == [chain.id]
    assert [line.split(":")[0] for line in delivery.skipped] == [
        aggregator.id,
        f"the chain for correlation id {ended_correlation!r}",
    ]
    assert all("completed" in line for line in delivery.skipped)
    assert state.received == 1
    assert letters == []
    assert delivery.describe().startswith(f"{chain.id} (skipped: {aggregator.id}: ")
