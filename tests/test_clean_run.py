"""The README's own run (`make demo`): the user-story chain with the phase1 aggregator listening
ends with nothing dead-lettered and no lifecycle notice in its timeline."""

import asyncio
import uuid

from temporalio.client import Client

from coord.models.aggregator.spec import AggregatorSpec, AggregatorStatus
from coord.models.chain.spec import ChainSpec, ChainStatus
from coord.models.dlq.letter import DlqSelection
from coord.models.events.envelope import LIFECYCLE_NOTICES
from coord.models.wire.specs import load_spec
from coord.starter import api
from coord.starter.examples import EXAMPLES
from coord.worker import build_worker
from tests.helpers import approved


async def test_a_clean_run_of_the_chain_and_its_aggregator_dead_letters_nothing(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    spec = load_spec(ChainSpec, EXAMPLES / "user-story-chain.yaml")
    phase1 = load_spec(
        AggregatorSpec, EXAMPLES / "phase1-aggregator.yaml", {"correlation_id": correlation_id}
    )
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, spec, correlation_id, queue=task_queue)
        aggregator = await api.start_aggregator(client, phase1, queue=task_queue)
        await api.publish(client, approved(correlation_id))
        state = await asyncio.wait_for(chain.result(), 60)
        phase1_state = await asyncio.wait_for(aggregator.result(), 30)
        timeline = await api.chain_timeline(client, correlation_id)
        letters = await api.dlq_entries(
            client, DlqSelection(correlation_id=correlation_id), queue=task_queue
        )
    events = [entry.event for entry in timeline]
    assert state.status == ChainStatus.COMPLETED
    assert phase1_state.status == AggregatorStatus.COMPLETED
    assert {"Phase1CompletedEvent", "TestingCompleted"} <= set(events)
    assert not LIFECYCLE_NOTICES & set(events)
    assert state.dead_lettered == 0 and state.rejected_count == 0
    assert phase1_state.rejected_count == 0 and phase1_state.rejected == []
    assert state.listeners == [], "the finished aggregator detached"
    assert letters == []
