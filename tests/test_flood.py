"""A flood into one chain, faster than its worker takes it, on a server whose limit of signals per
run is low: the chain continues-as-new in time, publishers that meet the limit wait and retry
against the new run, every event is accounted for and every query answered (issue 10, item 2)."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.models.agents import AgentContext, AgentRegistry
from coord.models.chain import ChainSpec, ChainState
from coord.models.envelope import EventEnvelope
from coord.starter import api
from coord.starter.api.chains import SIGNALS_PER_RUN_ENV
from coord.worker import build_worker
from tests.conftest import start_dev_server

SIGNALS_PER_RUN = 400
EVENTS = 2_000
PUBLISHERS = 10
QUERY_TIMEOUT = 60.0
"""Generous: the suite runs on a shared machine; what counts is that every query is answered."""


@pytest.fixture(scope="module")
async def flood_env() -> AsyncIterator[WorkflowEnvironment]:
    """A server of its own, refusing a run's signals past `SIGNALS_PER_RUN`."""
    env = await start_dev_server(f"history.maximumSignalsPerExecution={SIGNALS_PER_RUN}")
    yield env
    await env.shutdown()


def flood_spec() -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "flood",
            "triggers": ["Ping"],
            "subscriptions": [
                {"agent": "flood_probe", "events": ["Ping"], "filter": "payload.n % 500 == 0"}
            ],
            "max_concurrency": 8,
            "alerts": None,
        }
    )


def flood_registry() -> AgentRegistry:
    registry = AgentRegistry()

    @registry.register("flood_probe")
    async def flood_probe(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {}

    return registry


async def runs(client: Client, workflow_id: str) -> int:
    return len([e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")])


async def test_a_flood_faster_than_the_worker_loses_nothing_and_queries_stay_answered(
    flood_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SIGNALS_PER_RUN_ENV, str(SIGNALS_PER_RUN))
    client = flood_env.client
    queue, correlation_id = f"tq-{uuid.uuid4()}", f"flood-{uuid.uuid4().hex[:8]}"
    spec = flood_spec()
    numbers = iter(range(EVENTS))
    published: list[int] = []

    async def publisher() -> None:
        for n in numbers:
            ping = EventEnvelope.new(
                "Ping", "/flood", payload={"n": n}, correlation_id=correlation_id
            )
            await api.publish(client, ping, spec=spec, queue=queue)
            published.append(n)

    # No worker takes the first run's signals: the flood meets the server's limit at once.
    flood = asyncio.gather(*(publisher() for _ in range(PUBLISHERS)))
    while len(published) < SIGNALS_PER_RUN:
        await asyncio.sleep(0.05)
    answered: list[float] = []
    async with build_worker(client, queue, flood_registry()):

        async def query_meanwhile() -> None:
            while not flood.done():
                begin = time.monotonic()
                await asyncio.wait_for(api.chain_state(client, correlation_id), QUERY_TIMEOUT)
                answered.append(time.monotonic() - begin)
                await asyncio.sleep(0.2)

        await asyncio.gather(flood, query_meanwhile())
        await api.close_chain(client, correlation_id)
        state: ChainState = await asyncio.wait_for(
            api.chain_handle(client, correlation_id).result(), 60
        )
        parked = await api.dlq_entries(client, queue=queue)
    assert sorted(published) == list(range(EVENTS))
    assert state.received == state.events_seen + state.duplicates + state.rejected_count
    assert state.events_seen == EVENTS
    assert state.rejected_count == 0 and parked == []
    assert len(answered) > 5
    assert await runs(client, f"chain-{correlation_id}") >= EVENTS // SIGNALS_PER_RUN
