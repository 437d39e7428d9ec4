"""Each agent's share of the worker's local activity slots: an agent whose local runs hang holds
at most half of them, its runs past that go on as activity tasks, and other agents' local runs
keep running meanwhile."""

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from coord.activities.mesh.local_shares import LocalShares
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.saga.spec import SagaSpec, SagaState
from coord.models.wire.contract import FailureType, agent_task_queue
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import eventually
from tests.test_replay import replayer

LOCAL_SLOTS = 4
HANGING = 4
"""Sagas whose one step calls the agent that hangs: as many as the worker's local slots."""
HANG_TIMEOUT = "120s"
"""Longer than the quick sagas' wait: with every slot held, they could not complete before the
hanging runs time out and give their slots back."""
QUICK_WAIT = 60.0
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED


def test_an_agent_holds_at_most_half_the_slots_and_a_batch_counts_once() -> None:
    shares = LocalShares(slots=4)
    shares.take("hang", ("run-1", "1", 1))
    shares.take("hang", ("run-2", "1", 1))
    with pytest.raises(ApplicationError) as refused:
        shares.take("hang", ("run-3", "1", 1))
    assert (refused.value.type, refused.value.non_retryable) == (FailureType.LOCAL_SHARE_FULL, True)
    shares.take("hang", ("run-1", "1", 1))  # a batch running a second run of the agent
    shares.take("quick", ("run-3", "1", 1))  # another agent: its own share
    assert (shares.held("hang"), shares.held("quick")) == (2, 1)
    shares.give_back("hang", ("run-1", "1", 1))
    shares.give_back("hang", ("run-1", "1", 1))
    shares.take("hang", ("run-3", "1", 1))
    assert shares.held("hang") == 2


def _registry(
    release: asyncio.Event, hung_locally: list[bool], quick_ran: list[str] | None = None
) -> AgentRegistry:
    registry = AgentRegistry()

    @registry.register("hang")
    async def hang(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        hung_locally.append(activity.info().is_local)
        await release.wait()
        return {}

    @registry.register("quick")
    async def quick(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        if quick_ran is not None:
            quick_ran.append(event.event.correlation_id or "")
        return {}

    return registry


def _one_step(agent: str, timeout: str) -> SagaSpec:
    return SagaSpec.model_validate(
        {
            "saga_id": f"{agent}-{uuid.uuid4().hex[:8]}",
            "steps": [{"name": "Step", "agent": agent, "timeout": timeout}],
        }
    )


async def test_an_agent_that_hangs_leaves_half_the_local_slots_to_the_others(
    client: Client, task_queue: str
) -> None:
    """Four sagas call an agent that hangs, on a worker of four local slots: two of its runs
    hold two slots, the other two are refused their local share and run as activity tasks on
    the agent's queue. Sagas of another local agent complete while it hangs (with every slot
    held, they would wait for its runs to time out); once released, every saga completes."""
    release, hung_locally = asyncio.Event(), list[bool]()
    async with build_worker(
        client, task_queue, _registry(release, hung_locally), local_slots=LOCAL_SLOTS
    ):
        hanging = [
            await api.start_saga(client, _one_step("hang", HANG_TIMEOUT), queue=task_queue)
            for _ in range(HANGING)
        ]

        async def all_hang() -> bool:
            return len(hung_locally) == HANGING

        await eventually(all_hang, 60)
        try:
            quick = [
                await api.start_saga(client, _one_step("quick", "10s"), queue=task_queue)
                for _ in range(4)
            ]
            done: list[SagaState] = await asyncio.wait_for(
                asyncio.gather(*(api.saga_outcome(handle) for handle in quick)), QUICK_WAIT
            )
        finally:
            release.set()  # a local run that never returns would hold the worker's shutdown
        assert {state.status for state in done} == {"completed"}
        assert sorted(hung_locally) == [False, False, True, True], "two held local slots"
        hung: list[SagaState] = await asyncio.wait_for(
            asyncio.gather(*(api.saga_outcome(handle) for handle in hanging)), 60
        )
    assert {state.status for state in hung} == {"completed"}
    queued = [detour for state in hung for detour in state.detours if detour.action == "queued"]
    assert [detour.reason for detour in queued] == [FailureType.LOCAL_SHARE_FULL] * 2
    queues = []
    for handle in hanging:
        history = await handle.fetch_history()
        await replayer().replay_workflow(history)
        for event in history.events:
            if event.event_type == SCHEDULED:
                queues.append(event.activity_task_scheduled_event_attributes.task_queue.name)
    agent_queue = agent_task_queue("hang", task_queue)
    assert queues == [agent_queue, agent_queue], "two went on as activity tasks, on its queue"


def _chain() -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "shares",
            "triggers": ["Ping", "Pong"],
            "subscriptions": [
                {"agent": "hang", "events": ["Ping"], "timeout": HANG_TIMEOUT},
                {"agent": "quick", "events": ["Pong"]},
            ],
            "alerts": None,
        }
    )


async def test_a_chain_whose_run_went_on_as_an_activity_task_runs_its_local_agents_meanwhile(
    client: Client, task_queue: str
) -> None:
    """Three chains each run the agent that hangs, on a worker of four local slots: two hold
    a slot each (their later local runs wait for that batch, as a chain's local runs do), the
    third's run goes on as an activity task, and that chain runs its next local run at once."""
    release, hung_locally, quick_ran = asyncio.Event(), list[bool](), list[str]()
    registry = _registry(release, hung_locally, quick_ran)
    chains = [f"shares-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    async with build_worker(client, task_queue, registry, local_slots=LOCAL_SLOTS):
        try:
            for correlation_id in chains:
                ping = EventEnvelope.new("Ping", "/t", correlation_id=correlation_id)
                await api.publish(client, ping, spec=_chain(), queue=task_queue)

            async def all_hang() -> bool:
                return len(hung_locally) == len(chains)

            await eventually(all_hang, 60)
            for correlation_id in chains:
                pong = EventEnvelope.new("Pong", "/t", correlation_id=correlation_id)
                await api.publish(client, pong, spec=_chain(), queue=task_queue)

            async def one_ran() -> bool:
                return len(quick_ran) == 1

            await eventually(one_ran, QUICK_WAIT)
        finally:
            release.set()
        assert sorted(hung_locally) == [False, True, True], "two held local slots"

        async def all_ran() -> bool:
            return len(quick_ran) == len(chains)

        await eventually(all_ran, 60)
        for correlation_id in chains:
            await api.close_chain(client, correlation_id)
