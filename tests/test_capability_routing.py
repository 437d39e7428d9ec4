"""Routing by capability on the real dev server: runs that name capabilities instead of an agent
go to the agent the coordinator picks (`choose_agent`), which is recorded with the bids."""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from coord.activities.agents import AgentActivities
from coord.infra.agent_health import candidates_health
from coord.infra.ledgers import LedgerClient
from coord.models.agent_config import AgentDeclarationBase
from coord.models.agent_ledger import BreakerConfig, RunStats
from coord.models.agents import AgentContext, AgentRegistry
from coord.models.chain import ChainSpec
from coord.models.contract import FailureType, agent_task_queue
from coord.models.dlq import DlqSelection
from coord.models.envelope import EventEnvelope
from coord.models.plan import PlanSpec, TaskState
from coord.models.saga import SagaSpec, SagaStatus
from coord.starter import api
from coord.worker import build_worker, worker_runtime
from tests.helpers import chain_run_handles, event, eventually, parked
from tests.test_mesh_queues import runs_by_agent
from tests.workers import COORD, run, server_env


@pytest.fixture
async def mesh_client(dev_env: WorkflowEnvironment) -> AsyncIterator[Client]:
    """A client whose workers report themselves (worker heartbeats every 3 s, as `coord worker`
    does), so an idle or busy agent stays healthy whatever its polls."""
    plain = dev_env.client
    yield await Client.connect(
        plain.service_client.config.target_host,
        namespace=plain.namespace,
        data_converter=plain.data_converter,
        runtime=worker_runtime(),
    )


def answering(name: str) -> Any:
    async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {"answered_by": name}

    return agent


def registry_of(capabilities: Mapping[str, list[str]]) -> AgentRegistry:
    registry = AgentRegistry()
    for name, offered in capabilities.items():
        registry.register(name, declaration=AgentDeclarationBase(capabilities=offered))(
            answering(name)
        )
    return registry


def routed_chain() -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "routed",
            "triggers": ["Query", "Render"],
            "alerts": None,
            "subscriptions": [
                {"capabilities": ["sql", "postgres"], "events": "Query"},
                {"capability": "gpu", "events": "Render"},
            ],
        }
    )


async def test_a_chain_subscription_naming_capabilities_runs_on_the_agent_offering_them(
    mesh_client: Client, task_queue: str
) -> None:
    client = mesh_client
    registry = registry_of({"pg": ["sql", "postgres"], "mysql": ["sql", "mysql"], "web": ["http"]})
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    selection = DlqSelection(correlation_id=correlation_id, status="parked")
    async with build_worker(client, task_queue, registry):
        handle = await api.start_chain(client, routed_chain(), correlation_id, queue=task_queue)
        await api.publish(client, event(correlation_id, "Query"))
        await api.publish(client, event(correlation_id, "Render"))
        [entry] = await parked(client, task_queue, 1, selection)

        async def ran() -> bool:
            state = await api.chain_state(client, correlation_id)
            return state.events_seen >= 2 and not state.running and not state.queued

        await eventually(ran)
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 30)
        runs = {
            summary: ran
            for chain_run in await chain_run_handles(client, handle)
            for summary, ran in (await runs_by_agent(chain_run)).items()
        }
    [picked] = state.assignments
    assert (picked.subscription, picked.assignment.agent) == ("sql+postgres", "pg")
    assert [bid.agent for bid in picked.assignment.bids] == ["pg"], "mysql offers half: no"
    assert picked.assignment.bids[0].capability_match == 1.0
    [(queue, _)] = runs.values()
    assert queue == agent_task_queue("pg", task_queue)
    assert entry.failure_type == FailureType.NO_CAPABLE_AGENT
    assert entry.target_agent == "gpu"
    assert "no declared agent offers more than 70% of gpu" in entry.message


def holding_saga(index: int) -> SagaSpec:
    """A saga whose one step runs db-1, which holds every run until released."""
    return SagaSpec.model_validate(
        {
            "saga_id": f"hold-{index}-{uuid.uuid4().hex[:8]}",
            "steps": [{"name": "hold", "agent": "db-1", "schedule_to_start_timeout": "5m"}],
        }
    )


def loaded_worker(client: Client, task_queue: str, registry: AgentRegistry) -> Worker:
    """db-1's one worker, one run at a time: the runs after the first wait in its queue."""
    return Worker(
        client,
        task_queue=agent_task_queue("db-1", task_queue),
        activities=[AgentActivities(registry.only(["db-1"])).run_agent],
        max_concurrent_activities=1,
    )


async def test_the_auction_and_least_loaded_pick_from_controlled_load_and_history(
    mesh_client: Client, task_queue: str
) -> None:
    """db-1 has a backlog (one worker, busy, four runs waiting), db-2 a poor record (1 of 4
    runs succeeded, as its ledger says), db-3 neither: the auction picks db-3 (db-1 would win
    the tie by name on bids alone, db-2 too without its record); least_loaded, which weighs
    backlog only, picks db-2 (before db-3 by name)."""
    client = mesh_client
    released = asyncio.Event()

    async def holding(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        await released.wait()
        return {}

    registry = registry_of({"db-2": ["sql"], "db-3": ["sql"]})
    registry.register("db-1", declaration=AgentDeclarationBase(capabilities=["sql"]))(holding)

    async def db_1_backlog() -> bool:
        rows = await candidates_health(client, ["db-1", "db-2", "db-3"], home=task_queue)
        return rows[0].backlog >= 3 and all(row.status == "healthy" for row in rows)

    auction = SagaSpec.model_validate(
        {
            "saga_id": f"auction-{uuid.uuid4().hex[:8]}",
            "steps": [{"name": "query", "capability": "sql", "assignment": "auction"}],
        }
    )
    least_loaded = PlanSpec.model_validate(
        {"plan_id": f"ll-{uuid.uuid4().hex[:8]}", "tasks": [{"id": "report", "capability": "sql"}]}
    )
    async with build_worker(client, task_queue, registry, only=["db-2", "db-3"]):
        for agent, stats in (
            ("db-2", RunStats(succeeded=1, failed=3)),
            ("db-3", RunStats(succeeded=4)),
        ):
            ledger = LedgerClient(
                client, agent_task_queue(agent, task_queue), task_queue, BreakerConfig(), "test"
            )
            await ledger.stats(stats)
        async with loaded_worker(client, task_queue, registry):
            holds = [
                await api.start_saga(client, holding_saga(i), queue=task_queue) for i in range(5)
            ]
            await eventually(db_1_backlog, timeout=60)
            saga = await api.start_saga(client, auction, queue=task_queue)
            sold = await asyncio.wait_for(api.saga_outcome(saga), 60)
            plan = await api.start_plan(client, least_loaded, queue=task_queue)
            planned = await asyncio.wait_for(api.plan_outcome(plan), 60)
            released.set()
            await asyncio.wait_for(asyncio.gather(*(h.result() for h in holds)), 60)
        runs = await runs_by_agent(saga)
    assert sold.status == SagaStatus.COMPLETED
    picked = sold.assignments["query"]
    bids = {bid.agent: bid for bid in picked.bids}
    assert picked.agent == "db-3"
    assert [bid.agent for bid in picked.bids] == ["db-3", "db-2", "db-1"]
    assert (bids["db-3"].bid, bids["db-2"].bid) == (1.0, 0.85)
    assert bids["db-2"].past_performance == 0.25
    assert bids["db-1"].backlog >= 3 and bids["db-1"].load >= 0.75
    assert bids["db-1"].bid <= 0.775
    assert runs["query"][0] == agent_task_queue("db-3", task_queue)
    [task] = planned.tasks
    assert (task.state, task.agent) == (TaskState.SUCCEEDED, "db-2")
    assert task.assignment is not None and task.assignment.strategy == "least_loaded"
    assert [bid.agent for bid in task.assignment.bids][:2] == ["db-2", "db-3"]


AGENTS_FILE = """\
agents:
  pg:
    kind: shell
    argv: [cat]
    capabilities: [sql, postgres]
  web:
    kind: shell
    argv: [cat]
"""


async def test_coord_agents_shows_what_each_agent_offers(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    agents_file = tmp_path / "agents.yaml"
    agents_file.write_text(AGENTS_FILE)
    env = server_env(dev_env, task_queue)
    code, out, err = await run(COORD, "agents", "--agents", str(agents_file), "--json", env=env)
    assert (code, err) == (0, "")
    offered = {row["agent"]: row["capabilities"] for row in json.loads(out)}
    assert (offered["pg"], offered["web"]) == (["sql", "postgres"], [])
    code, out, _ = await run(COORD, "agents", "--agents", str(agents_file), env=env)
    [pg_line] = [line for line in out.splitlines() if line.startswith("pg ")]
    assert code == 0 and "sql, postgres" in pg_line
