"""Routing by capability on the real dev server: runs that name capabilities instead of an agent
go to the agent the coordinator picks (`choose_agent`), which is recorded with the bids."""

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from coord.activities.agents import AgentActivities
from coord.infra.agent_health import candidates_health
from coord.models.agents import AgentContext, AgentRegistry
from coord.models.chain import ChainSpec
from coord.models.contract import FailureType, agent_task_queue
from coord.models.dlq import DlqSelection
from coord.models.envelope import EventEnvelope
from coord.models.plan import PlanSpec, TaskState
from coord.models.saga import SagaSpec, SagaStatus
from coord.starter import api
from coord.worker import build_worker, worker_runtime
from tests.helpers import event, eventually, parked
from tests.test_mesh_queues import runs_by_agent


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
        registry.register(name, capabilities=offered)(answering(name))
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
    registry = registry_of(
        {"pg": ["sql", "postgres"], "mysql": ["sql", "mysql"], "web": ["http"]}
    )
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
        runs = await runs_by_agent(handle)
    [picked] = state.assignments
    assert (picked.subscription, picked.assignment.agent) == ("sql+postgres", "pg")
    assert [bid.agent for bid in picked.assignment.bids] == ["pg"], "mysql offers half: no"
    assert picked.assignment.bids[0].capability_match == 1.0
    [(queue, _)] = runs.values()
    assert queue == agent_task_queue("pg", task_queue)
    assert entry.failure_type == FailureType.NO_CAPABLE_AGENT
    assert entry.target_agent == "gpu"
    assert "no declared agent offers more than 70% of gpu" in entry.message
