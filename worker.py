"""The worker: runs the coordination workflows and the agent activity on one task queue."""

import asyncio
import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from coord.activities.agent_kinds import load_agents
from coord.activities.agents import AgentActivities
from coord.activities.chains import ChainLookback
from coord.activities.delivery import Delivery
from coord.activities.demo import register_demo_agents
from coord.activities.plan_progress import PlanProgressReader
from coord.activities.scratchpad import ScratchpadWriter
from coord.infra.logs import configure_logging, get_logger
from coord.infra.temporal import ConnectionSettings, task_queue
from coord.models.agents import AgentRegistry
from coord.workflows.aggregator import Aggregator
from coord.workflows.arguments import SurplusArguments
from coord.workflows.chain import ReactiveChain
from coord.workflows.dlq import DeadLetterEntry
from coord.workflows.plan import TaskGraph
from coord.workflows.saga import Saga
from coord.workflows.vote import Vote

WORKFLOWS: Sequence[type] = (Saga, ReactiveChain, Aggregator, DeadLetterEntry, TaskGraph, Vote)


def demo_agents_enabled() -> bool:
    """$COORD_DEMO_AGENTS=1 (or true/yes) serves the demo agents, like `--demo-agents`."""
    return os.environ.get("COORD_DEMO_AGENTS", "").lower() in {"1", "true", "yes"}


def default_registry(
    agents_file: Path | None = None, *, demo_agents: bool = False
) -> AgentRegistry:
    """The agents declared in `agents_file` (or $COORD_AGENTS) with its `worker:` settings, and
    the demo agents only when asked for (`demo_agents`, or $COORD_DEMO_AGENTS)."""
    registry = AgentRegistry()
    if demo_agents or demo_agents_enabled():
        register_demo_agents(registry)
    declared = agents_file or (
        Path(os.environ["COORD_AGENTS"]) if "COORD_AGENTS" in os.environ else None
    )
    return load_agents(declared, registry) if declared else registry


def build_worker(
    client: Client, queue: str | None = None, registry: AgentRegistry | None = None
) -> Worker:
    registry = registry or default_registry()
    activities = AgentActivities(registry)
    delivery = Delivery(client)
    return Worker(
        client,
        task_queue=queue or task_queue(),
        workflows=list(WORKFLOWS),
        activities=[
            activities.run_agent,
            ChainLookback(client).chain_events,
            delivery.park,
            delivery.redeliver,
            delivery.declared_agent,
            ScratchpadWriter(registry.settings).write_scratchpad,
            PlanProgressReader(client).plan_progress,
        ],
        # Cancellation reaches an agent on its next heartbeat; the SDK's 30s default throttle
        # would hold compensation back that long when a step sets no heartbeat timeout.
        default_heartbeat_throttle_interval=timedelta(seconds=1),
        interceptors=[SurplusArguments()],
    )


async def run_worker(agents_file: Path | None = None, *, demo_agents: bool = False) -> None:
    registry = default_registry(agents_file, demo_agents=demo_agents)
    settings = ConnectionSettings.load()
    client = await settings.connect()
    worker = build_worker(client, registry=registry)
    get_logger("worker").info(
        "worker started",
        address=settings.address,
        task_queue=worker.task_queue,
        agents=sorted(registry),
        inline_agents=registry.settings.inline_agents,
    )
    await worker.run()


def main() -> None:
    configure_logging()
    asyncio.run(run_worker())


if __name__ == "__main__":
    main()
