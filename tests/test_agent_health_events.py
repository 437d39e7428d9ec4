"""AgentHealth events on the real dev server: the deployment's `AgentMonitor` reads its
agents' health every few seconds and publishes each transition (a worker gone or back, the
circuit breaker moving) into the running chains whose subscriptions use the agent, where a
subscription reacts to it like to any event."""

import time
import uuid
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from coord.infra.ledgers import LedgerClient
from coord.models.chain.spec import ChainSpec, Subscription
from coord.models.events.envelope import EventEnvelope
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.breaker import SUCCEEDED
from coord.models.mesh.config import AgentDeclarationBase
from coord.models.mesh.ledger import BreakerConfig, RunStats
from coord.models.mesh.monitor import READ_INTERVAL, AgentMonitorState
from coord.models.wire.contract import (
    AGENT_HEALTH_EVENT,
    AGENT_MONITOR_WORKFLOW,
    STATE_QUERY,
    agent_monitor_workflow_id,
    agent_task_queue,
)
from coord.models.wire.specs import read_document
from coord.starter import api
from coord.worker import build_worker, start_agent_monitor
from coord.workflows.mesh import monitor as monitor_workflow
from coord.workflows.mesh.monitor import HISTORY_BUDGET
from tests.conftest import ROOT
from tests.helpers import event, eventually
from tests.workers import WorkerProcess

AGENT = "python-pro"
SERVED_HERE = "backend-architect"
WATCH = ChainSpec.model_validate(read_document(ROOT / "examples" / "agent-health-chain.yaml"))
"""Names the agent, and pages on-call when it turns unreachable."""
ROUTED_WATCH = WATCH.model_copy(
    update={
        "name": "routed-health-watch",
        "subscriptions": [
            Subscription.model_validate({"capability": "python", "events": "UserStoryApproved"}),
            WATCH.subscription("page-on-call"),
        ],
    }
)
"""The agent is picked at run time, by capability: the chain learns its health once it picked it."""
BYSTANDER = ChainSpec.model_validate(
    {
        "name": "bystander",
        "triggers": ["Kickoff"],
        "alerts": None,
        "subscriptions": [{"agent": SERVED_HERE, "events": "Kickoff"}],
    }
)
WORKER_ARGS = ("--only", AGENT, "--no-workflows")


async def health_events(client: Client, correlation_id: str) -> list[dict[str, Any]]:
    """The payloads of the AgentHealth events the correlation's chain has recorded, in order."""
    timeline = await api.chain_timeline(client, correlation_id)
    return [entry.payload for entry in timeline if entry.event == AGENT_HEALTH_EVENT]


async def recorded(client: Client, correlation_id: str, event_type: str) -> list[TimelineEntry]:
    timeline = await api.chain_timeline(client, correlation_id)
    return [entry for entry in timeline if entry.event == event_type]


async def monitor_knows(handle: WorkflowHandle[Any, Any], agent: str, status: str) -> bool:
    state = await handle.query(STATE_QUERY, result_type=AgentMonitorState)
    known = state.agents.get(agent)
    return known is not None and known.status == status


async def agent_health_worker(client: Client, task_queue: str, log: Path) -> WorkerProcess:
    """A `coord worker` process serving only the agent (it heartbeats, as deployed)."""
    queue = agent_task_queue(AGENT, task_queue)
    return await WorkerProcess.start(client, task_queue, log, *WORKER_ARGS, polls=queue)


async def started_watch(
    client: Client, task_queue: str, spec: ChainSpec = WATCH
) -> tuple[str, str]:
    """A chain using the agent and one that does not; their correlation ids."""
    watch, bystander = f"watch-{uuid.uuid4().hex[:8]}", f"bystander-{uuid.uuid4().hex[:8]}"
    await api.start_chain(client, spec, watch, queue=task_queue)
    await api.start_chain(client, BYSTANDER, bystander, queue=task_queue)
    return watch, bystander


async def answering(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return {"handled": event.event.type}


def coordinator_registry() -> AgentRegistry:
    """What the in-process coordinator worker knows: the agent offering `python` (served by
    the worker process), and the agent it serves itself."""
    registry = AgentRegistry()
    python = AgentDeclarationBase(capabilities=["python"])
    registry.register(AGENT, declaration=python)(answering)
    registry.register(SERVED_HERE)(answering)
    return registry


async def picked(client: Client, correlation_id: str, agent: str) -> bool:
    """Whether the chain picked `agent` for a run, and that run has ended."""
    state = await api.chain_state(client, correlation_id)
    chosen = [each.assignment.agent for each in state.assignments]
    return chosen == [agent] and not state.running and not state.queued


@pytest.fixture
def quick_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The monitor (run by the test's in-process worker) reads every second, not every
    READ_INTERVAL (3 s): the tests wait for what its readings show, not for their pace."""
    monkeypatch.setattr(monitor_workflow, "READ_INTERVAL", timedelta(seconds=1))


@pytest.mark.usefixtures("quick_readings")
async def test_a_killed_worker_is_an_unreachable_event_in_the_chains_using_it_and_healthy_again(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The chain picked the agent by capability (a run routed to it): it is told all the same."""
    log = tmp_path / "workers.log"
    first = await agent_health_worker(client, task_queue, log)
    second: WorkerProcess | None = None
    monitor = client.get_workflow_handle(agent_monitor_workflow_id(task_queue))
    try:
        async with build_worker(client, task_queue, coordinator_registry(), only=[SERVED_HERE]):
            watch, bystander = await started_watch(client, task_queue, ROUTED_WATCH)
            await api.publish(client, event(watch, "UserStoryApproved"))
            await eventually(lambda: picked(client, watch, AGENT), 30, 0.25)
            await start_agent_monitor(client, task_queue)
            await start_agent_monitor(client, task_queue)  # a second worker finds it running
            await eventually(lambda: monitor_knows(monitor, AGENT, "healthy"), 30, 0.25)

            await first.kill()
            killed = time.monotonic()
            await eventually(lambda: has_event(client, watch, "unreachable"), 30, 0.25)
            took = time.monotonic() - killed
            assert took <= 15, f"the unreachable event came {took:.1f}s after the kill"
            [paged] = await wait_recorded(client, watch, "OnCallPaged")
            [down] = await health_events(client, watch)
            assert (down["agent"], down["aspect"], down["previous"]) == (AGENT, "worker", "healthy")
            assert "no worker seen" in down["reason"]

            second = await agent_health_worker(client, task_queue, log)
            await eventually(lambda: has_event(client, watch, "healthy"), 30, 0.25)
            up = (await health_events(client, watch))[-1]
            assert (up["previous"], up["status"]) == ("unreachable", "healthy")
            assert second.identity in up["reason"]
            assert await health_events(client, bystander) == [], "it does not use the agent"
            assert len(await recorded(client, watch, "OnCallPaged")) == 1, "only on unreachable"
            assert paged.causation_id is not None
            assert (await monitor.describe()).workflow_type == AGENT_MONITOR_WORKFLOW
            await close_chains(client, watch, bystander)
    finally:
        await monitor.terminate()
        first.stop()
        if second is not None:
            second.stop()


@pytest.mark.usefixtures("quick_readings")
async def test_breaker_transitions_are_events_in_order_in_the_chains_using_the_agent(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    worker = await agent_health_worker(client, task_queue, tmp_path / "workers.log")
    monitor = client.get_workflow_handle(agent_monitor_workflow_id(task_queue))
    config = BreakerConfig(min_calls=2, recovery=timedelta(seconds=1), probes=1)
    ledger = LedgerClient(client, agent_task_queue(AGENT, task_queue), task_queue, config, "t")
    try:
        async with build_worker(client, task_queue, only=[SERVED_HERE]):
            watch, bystander = await started_watch(client, task_queue)
            await start_agent_monitor(client, task_queue)
            await eventually(lambda: monitor_knows(monitor, AGENT, "healthy"), 30, 0.25)

            down = RunStats(failed=2, counted=2, reasons={"connection": 2})
            assert (await ledger.stats(down)).breaker == "open"
            # past the recovery timeout the breaker is half-open, before any run claims the
            # probe (the ledger logs that move only then): published once all the same
            await eventually(lambda: breaker_events(client, watch, 2), 30, 0.25)
            assert (await ledger.claim_probe("probe")).granted
            assert (await ledger.probe_ended("probe", SUCCEEDED)).breaker == "closed"
            await eventually(lambda: breaker_events(client, watch, 3), 30, 0.25)
            await readings_later(monitor, 2)  # and nothing more comes
            events = await health_events(client, watch)
            assert [(e["aspect"], e["previous"], e["status"]) for e in events] == [
                ("breaker", "closed", "open"),
                ("breaker", "open", "half_open"),
                ("breaker", "half_open", "closed"),
            ]
            await close_chains(client, watch, bystander)
    finally:
        await monitor.terminate()
        worker.stop()


async def close_chains(client: Client, *correlation_ids: str) -> None:
    for correlation_id in correlation_ids:
        await api.close_chain(client, correlation_id)
        await api.chain_handle(client, correlation_id).result()


async def readings_later(handle: WorkflowHandle[Any, Any], count: int) -> None:
    """Until the monitor has read `count` more times (and published what those showed)."""

    async def readings() -> int:
        state: AgentMonitorState = await handle.query(STATE_QUERY, result_type=AgentMonitorState)
        return state.readings

    before = await readings()

    async def read() -> bool:
        return await readings() >= before + count

    await eventually(read, 30, 0.25)


async def breaker_events(client: Client, correlation_id: str, count: int) -> bool:
    events = await health_events(client, correlation_id)
    return len([event for event in events if event["aspect"] == "breaker"]) >= count


async def has_event(client: Client, correlation_id: str, status: str) -> bool:
    return any(event["status"] == status for event in await health_events(client, correlation_id))


async def wait_recorded(
    client: Client, correlation_id: str, event_type: str
) -> list[TimelineEntry]:
    async def seen() -> bool:
        return bool(await recorded(client, correlation_id, event_type))

    await eventually(seen, 30, 0.25)
    return await recorded(client, correlation_id, event_type)


async def test_the_monitor_continues_as_new_with_its_state(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    """Its history stays bounded: after HISTORY_BUDGET events it continues as new, and the next
    run goes on from the state the last one had (here, its count of readings)."""
    client = time_env.client
    handle = client.get_workflow_handle(agent_monitor_workflow_id(task_queue))
    async with build_worker(client, task_queue, only=[]):
        await start_agent_monitor(client, task_queue)
        first = (await handle.describe()).run_id

        async def continued() -> bool:
            await time_env.sleep(READ_INTERVAL * 10)
            return (await handle.describe()).run_id != first

        await eventually(continued, 60, 0)
        ended = client.get_workflow_handle(handle.id, run_id=first)
        before = await ended.query(STATE_QUERY, result_type=AgentMonitorState)
        history = await ended.fetch_history()
        assert len(history.events) <= HISTORY_BUDGET + 20
        assert before.readings > 10
        now = await handle.query(STATE_QUERY, result_type=AgentMonitorState)
        assert now.readings >= before.readings
        await handle.terminate()


SPACED, SLASHED = "code reviewer", "team/reviewer"
"""Agent names their queues cannot spell: `agent_task_queue` writes them with a digest."""


async def test_health_events_name_agents_whose_names_hold_a_space_or_a_slash(
    client: Client, task_queue: str
) -> None:
    """The monitor finds their queues served and names them as declared (not as their queues
    spell them), so their breaker events reach the chain subscribed to them, naming them."""
    registry = AgentRegistry()
    for name in (SPACED, SLASHED):
        registry.register(name)(answering)
    reviews = ChainSpec.model_validate(
        {
            "name": "reviews",
            "triggers": ["Review", AGENT_HEALTH_EVENT],
            "alerts": None,
            "subscriptions": [
                {"agent": SPACED, "events": "Review"},
                {"agent": SLASHED, "events": "Review"},
            ],
        }
    )
    monitor = client.get_workflow_handle(agent_monitor_workflow_id(task_queue))
    opening = BreakerConfig(min_calls=1, recovery=timedelta(minutes=10))
    down = RunStats(failed=1, counted=1, reasons={"connection": 1})
    correlation_id = f"reviews-{uuid.uuid4().hex[:8]}"
    try:
        async with build_worker(client, task_queue, registry):
            await api.start_chain(client, reviews, correlation_id, queue=task_queue)
            await start_agent_monitor(client, task_queue)
            await eventually(lambda: monitor_knows_all(monitor, [SPACED, SLASHED]), 30, 0.25)
            for name in (SPACED, SLASHED):
                queue = agent_task_queue(name, task_queue)
                ledger = LedgerClient(client, queue, task_queue, opening, "t")
                assert (await ledger.stats(down)).breaker == "open"
            await eventually(lambda: breaker_events(client, correlation_id, 2), 30, 0.25)
            events = await health_events(client, correlation_id)
            await close_chains(client, correlation_id)
    finally:
        await monitor.terminate()
    assert sorted((e["agent"], e["aspect"], e["status"]) for e in events) == [
        (SPACED, "breaker", "open"),
        (SLASHED, "breaker", "open"),
    ]


async def monitor_knows_all(handle: WorkflowHandle[Any, Any], agents: list[str]) -> bool:
    return all([await monitor_knows(handle, agent, "healthy") for agent in agents])
