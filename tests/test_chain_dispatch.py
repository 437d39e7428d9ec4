"""A chain never drops work nor stops dispatching: queued runs are parked when it ends, a slow agent
does not hold the queue at continue-as-new, and lifecycle notices cannot loop."""

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from coord.models.agents import AgentContext
from coord.models.chain import ChainSpec, ChainStatus, run_idempotency_key
from coord.models.dlq import DlqSelection
from coord.models.envelope import EventEnvelope
from coord.starter import api
from coord.worker import build_worker
from coord.workflows.chain import RUN_HISTORY_BUDGET
from tests.agents import GatedAgents
from tests.helpers import alerting_spec, event, eventually, routing_spec


async def pause_with_queued_runs(client: Client, correlation_id: str, runs: int) -> list[str]:
    """Raise a high alert, then publish `runs` events the paused chain can only queue."""
    await api.publish(
        client, event(correlation_id, "AlertRaised", "project.alerts", severity="high")
    )
    queued = [event(correlation_id, "A") for _ in range(runs)]
    for envelope in queued:
        await api.publish(client, envelope)

    async def all_queued() -> bool:
        return (await api.chain_state(client, correlation_id)).queued == runs

    await eventually(all_queued)
    return [e.event.id for e in queued]


async def assert_parked_as_never_run(
    client: Client, task_queue: str, chain_id: str, trigger_ids: list[str]
) -> None:
    selection = DlqSelection(failure_type="chain_ended")

    async def all_listed() -> bool:
        listed = await api.dlq_entries(client, selection, queue=task_queue)
        return len(listed) == len(trigger_ids)

    await eventually(all_listed)
    rows = await api.dlq_entries(client, selection, queue=task_queue)
    entries = [await api.dlq_entry(client, row.entry_id) for row in rows]
    assert sorted(e.event.event.id for e in entries if e.event) == sorted(trigger_ids)
    assert {e.idempotency_key for e in entries} == {
        run_idempotency_key(chain_id, "database-specialist", i) for i in trigger_ids
    }
    assert {(e.target_agent, e.replay) for e in entries} == {("database-specialist", "run_agent")}


async def test_a_paused_chain_that_is_closed_parks_its_queued_runs(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, alerting_spec(), correlation_id, queue=task_queue)
        triggers = await pause_with_queued_runs(client, correlation_id, 3)
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 30)
        await assert_parked_as_never_run(client, task_queue, handle.id, triggers)
    assert state.status == ChainStatus.CLOSED
    assert state.dead_lettered == 3 and state.queued == 0


async def test_a_paused_chain_that_idles_out_parks_its_queued_runs(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = time_env.client
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        handle = await api.start_chain(
            client, alerting_spec(idle_timeout="2h"), correlation_id, queue=task_queue
        )
        await pause_with_queued_runs(client, correlation_id, 2)
        state = await asyncio.wait_for(handle.result(), 30)
    assert state.status == ChainStatus.IDLE_CLOSED
    assert state.dead_lettered == 2 and state.queued == 0, "parked (the test server lists none)"


async def test_a_resolving_event_that_looks_like_an_alert_does_not_pause(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, alerting_spec(), correlation_id, queue=task_queue)
        resolved = event(correlation_id, "AlertResolved", "project.alerts", severity="high")
        await api.publish(client, resolved)

        async def handled() -> bool:
            return (await api.chain_state(client, correlation_id)).events_seen == 1

        await eventually(handled)
        assert (await api.chain_state(client, correlation_id)).status == ChainStatus.RUNNING
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(handle.result(), 30)


async def test_one_slow_agent_does_not_hold_dispatch_while_continue_as_new_waits(
    client: Client, task_queue: str
) -> None:
    """Continue-as-new is due at RUN_HISTORY_BUDGET events and waits for the slow agent;
    fast runs go on meanwhile. (From twice the budget on the run holds new events back for the
    next one, by design: the test stays below it by running one fast event at a time, about
    ten history events each; 120 at once crossed it or not depending on how the worker
    batched them.)"""
    gates = GatedAgents(names=["slow"])
    registry = gates.registry()
    done: list[str] = []

    async def fast(envelope: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        done.append(envelope.event.id)
        return {}

    registry.register("fast")(fast)
    spec = ChainSpec.model_validate(
        {
            "name": "slow-and-fast",
            "triggers": ["Slow", "Fast"],
            "alerts": None,
            "max_concurrency": 4,
            "subscriptions": [
                {"agent": "slow", "events": "Slow", "timeout": "2m"},
                {"agent": "fast", "events": "Fast"},
            ],
        }
    )
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue, registry):
        handle = await api.start_chain(client, spec, correlation_id, queue=task_queue)
        await api.publish(client, event(correlation_id, "Slow"))
        await gates.wait_started("slow")

        async def run_fast(n: int) -> None:
            await api.publish(client, event(correlation_id, "Fast", n=n))

            async def ran() -> bool:
                return len(done) == n + 1

            await eventually(ran)

        while (await handle.describe()).history_length < RUN_HISTORY_BUDGET:
            await run_fast(len(done))
        for _ in range(10):  # continue-as-new is due, and waits for the slow agent
            await run_fast(len(done))
        current = await handle.describe()  # the first run
        assert current.status == WorkflowExecutionStatus.RUNNING, "continued as new too early"
        assert current.history_length < 2 * RUN_HISTORY_BUDGET, "the test meant to stay below"
        assert not gates.released["slow"].is_set(), "ran while the slow agent was still running"
        gates.released["slow"].set()
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 60)
    runs = [e async for e in client.list_workflows(f"WorkflowId = '{handle.id}'")]
    assert len(runs) > 1, "the chain continued as new once the slow agent was done"
    assert state.events_seen == len(done) + 1 and state.queued == 0


def notice(correlation_id: str, caused_by: str) -> EventEnvelope:
    return EventEnvelope.new(
        "EventDeadLettered",
        "/dead-letter-queue",
        payload={"entry_id": "dlq-test"},
        correlation_id=correlation_id,
        causation_id=caused_by,
    )


async def test_a_rejected_event_keeps_its_depth_so_notices_cannot_loop(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    spec = routing_spec(max_causation_depth=3)
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, spec, correlation_id, queue=task_queue)
        cause = event(correlation_id, "Unwatched")
        await api.publish(client, cause)
        chain = [cause]
        for _ in range(5):
            chain.append(notice(correlation_id, chain[-1].event.id))
            await api.publish(client, chain[-1])
        forgotten = notice(correlation_id, "evt-the-chain-no-longer-remembers")
        forgotten.payload["causation_depth"] = 3
        chain.append(forgotten)
        await api.publish(client, forgotten)

        async def all_handled() -> bool:
            state = await api.chain_state(client, correlation_id)
            return state.events_seen + state.rejected_count == 7

        await eventually(all_handled)
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 30)
        timeline = await api.chain_timeline(client, correlation_id)
        letters = await api.dlq_entries(
            client, DlqSelection(correlation_id=correlation_id), queue=task_queue
        )
    assert [e.event_id for e in timeline] == [e.event.id for e in chain[:4]]
    assert [r.event_id for r in state.rejected] == [e.event.id for e in chain[4:]]
    assert "causation depth 5 exceeds 3" in state.rejected[1].reason
    assert "causation depth 4 exceeds 3" in state.rejected[2].reason, "the depth the notice carries"
    assert letters == [] and state.dead_lettered == 0, "lifecycle notices are never parked"


async def test_a_closing_chain_and_the_dead_letter_queue_do_not_ping_pong(
    client: Client, task_queue: str
) -> None:
    gates = GatedAgents(names=["python-pro"])
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue, gates.registry()):
        handle = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        await api.publish(client, event(correlation_id, "Alert", "project.reviews", severity="low"))
        await gates.wait_started("python-pro")
        await api.close_chain(client, correlation_id)
        await handle.signal("event", event(correlation_id, "A").model_dump(mode="json"))

        async def notice_came_back() -> bool:
            return (await api.chain_state(client, correlation_id)).rejected_count >= 2

        await eventually(notice_came_back)
        gates.released["python-pro"].set()
        state = await asyncio.wait_for(handle.result(), 30)
    assert [r.reason.split(": ", 1)[1] for r in state.rejected] == ["the chain is closing"] * 2
    assert state.dead_lettered == 1, "the late event is parked; the notice of it is not"


async def test_a_chain_ending_in_the_task_that_rejects_an_event_still_parks_it(
    client: Client, task_queue: str
) -> None:
    """The rejection and the close reach the chain together (sent before any worker runs), so
    the run ends in the very workflow task that rejects the event: the parking is awaited."""
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    handle = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
    stray = event("someone-else", "A")
    await handle.signal("event", stray.model_dump(mode="json"))
    await api.close_chain(client, correlation_id)
    async with build_worker(client, task_queue):
        state = await asyncio.wait_for(handle.result(), 30)
        selection = DlqSelection(failure_type="foreign_correlation")

        async def parked() -> bool:
            return len(await api.dlq_entries(client, selection, queue=task_queue)) == 1

        await eventually(parked, timeout=15)
    assert state.dead_lettered == 1 and state.status == ChainStatus.CLOSED
