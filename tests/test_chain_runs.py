"""What a chain's agent run receives: a join's events with their payloads, and an idempotency key
that is unique to the run and stable across its retries and replays."""

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client

from coord.activities.kinds.demo import register_demo_agents
from coord.models.chain.spec import ChainSpec, run_idempotency_key
from coord.models.dlq.letter import DlqEntry, DlqSelection
from coord.models.events.envelope import EventEnvelope
from coord.models.events.joins import JoinState, Slot
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import PythonAgent
from coord.starter import api, render
from coord.worker import build_worker
from tests.conftest import CONTINUE_AS_NEW_AFTER
from tests.helpers import approved, event, eventually, user_story


def recording(
    registry: AgentRegistry, name: str, seen: list[AgentContext], *, remote: bool = False
) -> None:
    """`name` records the context of each attempt, then answers like any agent. `remote`: it
    is declared `execution: remote`, its runs activity tasks (a chain runs it locally else)."""

    async def agent(envelope: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        seen.append(context)
        return {"agent": name, "on": envelope.event.type}

    declared = PythonAgent(kind="python", callable=f"{__name__}:recording", execution="remote")
    registry.register(name, "python", declared if remote else None)(agent)


async def test_a_joined_agent_receives_every_joined_event_with_its_payload(
    client: Client, task_queue: str
) -> None:
    seen: list[AgentContext] = []
    registry = AgentRegistry()
    recording(registry, "frontend-specialist", seen)
    demo = register_demo_agents(AgentRegistry())
    for name in demo:
        if name not in registry:
            registry.register(name)(demo.get(name))
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue, registry):
        await api.publish(client, approved(correlation_id), spec=user_story(), queue=task_queue)
        await asyncio.wait_for(api.chain_handle(client, correlation_id).result(), 60)
        timeline = await api.chain_timeline(client, correlation_id)
    [context] = seen
    rows = {e.event: e for e in timeline}
    backend, wireframe = rows["BackendImplementationCompleted"], rows["WireframeCompleted"]
    assert set(context.inputs) == {"BackendImplementationCompleted", "WireframeCompleted"}
    for row in (backend, wireframe):
        joined = context.inputs[row.event]
        assert (joined["type"], joined["event_id"]) == (row.event, row.event_id)
        assert joined["payload"] == row.payload and row.payload
        assert joined["source"] == row.agent
    started = rows["FrontendImplementationStarted"]
    assert sorted(started.causes) == sorted([backend.event_id, wireframe.event_id])
    assert started.causation_id in started.causes
    tree_line = next(
        line
        for line in render.plain(render.causation_tree(timeline)).splitlines()
        if "FrontendImplementationStarted" in line
    )
    assert tree_line.endswith("← BackendImplementationCompleted + WireframeCompleted")
    table_row = next(
        line
        for line in render.plain(render.timeline_table(timeline)).splitlines()
        if started.event_id in line
    )
    assert backend.event_id in table_row and wireframe.event_id in table_row


def test_join_inputs_are_keyed_by_slot_even_when_types_repeat() -> None:
    join = JoinState.of(
        [
            Slot(type="Review", source="/a"),
            Slot(type="Review", source="/b"),
            Slot(type="Vote"),
            Slot(type="Vote"),
        ]
    )
    assert join.slot_keys() == ["Review from /a", "Review from /b", "Vote #1", "Vote #2"]
    vote = EventEnvelope.new("Vote", "/c", payload={"yes": True})
    join.offer(vote, vote.event.timestamp)
    [(key, joined)] = join.inputs().items()
    assert key == "Vote #1"
    assert joined["type"] == "Vote" and joined["event_id"] == vote.event.id
    assert joined["source"] == "/c" and joined["payload"] == {"yes": True}


def counting_spec() -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "counting",
            "triggers": ["N"],
            "alerts": None,
            "subscriptions": [{"agent": "recorder", "events": "N"}],
        }
    )


async def test_idempotency_keys_are_unique_per_run_across_continue_as_new(
    client: Client, task_queue: str
) -> None:
    seen: list[AgentContext] = []
    registry = AgentRegistry()
    recording(registry, "recorder", seen, remote=True)  # its activity tasks fill the history
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    sent = [event(correlation_id, "N", n=n) for n in range(150)]
    async with build_worker(client, task_queue, registry):
        handle = await api.start_chain(client, counting_spec(), correlation_id, queue=task_queue)
        for envelope in sent:
            await api.publish(client, envelope)
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(handle.result(), 90)
    runs = [e async for e in client.list_workflows(f"WorkflowId = '{handle.id}'")]
    assert len(runs) > 1, f"the chain continued as new (after {CONTINUE_AS_NEW_AFTER} events)"
    keys = [context.idempotency_key for context in seen]
    assert len(keys) == len(set(keys)) == 150
    assert set(keys) == {run_idempotency_key(handle.id, "recorder", e.event.id) for e in sent}


async def test_a_runs_key_and_inputs_are_the_same_in_its_retries_and_dead_letter_replays(
    client: Client, task_queue: str
) -> None:
    """Replayed unchanged, the run fails and is parked again; replayed with a fix, it succeeds:
    every attempt of every replay is the same run, with the same key."""
    seen: list[tuple[AgentContext, EventEnvelope]] = []
    registry = AgentRegistry()

    async def flaky(envelope: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        seen.append((context, envelope))
        if envelope.payload.get("broken"):
            raise RuntimeError("cannot handle a broken event")
        return {}

    registry.register("recorder")(flaky)
    spec = counting_spec()
    spec.subscriptions[0].retry.max_retries = 1
    spec.subscriptions[0].retry.initial_delay = spec.subscriptions[0].retry.max_delay = (
        spec.subscriptions[0].retry.initial_delay / 10
    )
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    trigger = event(correlation_id, "N", broken=True)
    selection = DlqSelection(correlation_id=correlation_id, status="parked")

    async def parked_entry() -> DlqEntry:
        async def listed() -> bool:
            return len(await api.dlq_entries(client, selection, queue=task_queue)) == 1

        await eventually(listed)
        [row] = await api.dlq_entries(client, selection, queue=task_queue)
        return await api.dlq_entry(client, row.entry_id)

    async with build_worker(client, task_queue, registry):
        handle = await api.start_chain(client, spec, correlation_id, queue=task_queue)
        await api.publish(client, trigger)
        first = await parked_entry()
        await api.dlq_replay(client, first.entry_id)
        second = await parked_entry()
        await api.dlq_replay(client, second.entry_id, {"fixed": True})

        async def replayed() -> bool:
            return len(seen) == 5

        await eventually(replayed)
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(handle.result(), 30)
    key = run_idempotency_key(handle.id, "recorder", trigger.event.id)
    assert first.idempotency_key == second.idempotency_key == key
    assert [context.idempotency_key for context, _ in seen] == [key] * 5
    assert [context.attempt for context, _ in seen] == [1, 2, 1, 2, 1]
    last_context, last_event = seen[-1]
    assert last_context.inputs["N"]["payload"] == last_event.payload == {"fixed": True}
    assert last_context.inputs["N"]["event_id"] == last_event.event.id
