"""A chain never drops work nor stops dispatching: queued runs are parked when it ends, a slow agent
holds neither the queue nor continue-as-new, and lifecycle notices cannot loop."""

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.models.chain.spec import ChainSpec, ChainStatus, run_idempotency_key
from coord.models.dlq.letter import DlqSelection
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import PythonAgent
from coord.models.wire.contract import RUN_AGENTS_ACTIVITY
from coord.starter import api
from coord.worker import build_worker
from tests.agents import GatedAgents
from tests.helpers import (
    alerting_spec,
    chain_run_handles,
    event,
    eventually,
    routing_spec,
    run_chain,
)
from tests.test_agent_placement import local_activity_types
from tests.test_mesh_queues import runs_by_agent


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


class SlowAndFast:
    """`slow` runs until the test releases it; `fast` answers at once. Each records the
    idempotency key of every call, so a run that ran twice shows."""

    def __init__(self) -> None:
        self.slow_started = asyncio.Event()
        self.slow_released = asyncio.Event()
        self.calls: list[str] = []

    def registry(self) -> AgentRegistry:
        """Both declared `execution: remote`: an agent that runs long must be (a local run
        holds its chain's workflow task until it ends), and the fast runs' activity tasks are
        what fills the chain's history past its budget while the slow one runs."""
        registry = AgentRegistry()
        remote = PythonAgent(kind="python", callable=f"{__name__}:SlowAndFast", execution="remote")
        registry.register("slow", "python", remote)(self._slow)
        registry.register("fast", "python", remote)(self._fast)
        return registry

    async def _slow(self, envelope: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        self.calls.append(context.idempotency_key)
        self.slow_started.set()
        await self.slow_released.wait()
        return {"slow": True}

    async def _fast(self, envelope: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        self.calls.append(context.idempotency_key)
        return {}


SLOW_SUBSCRIPTION: dict[str, Any] = {
    "agent": "slow",
    "events": "Slow",
    "timeout": "5m",
    "publishes": {"on_success": "SlowDone"},
}
FAST_SUBSCRIPTION: dict[str, Any] = {"agent": "fast", "events": "Fast"}
SLOW_AND_FAST: dict[str, Any] = {
    "name": "slow-and-fast",
    "triggers": ["Slow", "Fast"],
    "alerts": None,
    "max_concurrency": 4,
    "subscriptions": [SLOW_SUBSCRIPTION, FAST_SUBSCRIPTION],
}
FAST_RUNS = 150
"""Enough runs that the chain's history passes twice its budget (1,000 events) while the slow
agent runs: runs recorded before then held their queue until the slow agent was done."""


PROGRESS_TIMEOUT = 300.0
"""The bound of a wait on the chain getting through its runs: seconds here, minutes at most on a
loaded machine (every run a task of the chain and, once continue-as-new is due, a `ChainRun`
of its own); what counts is that they all run."""


@pytest.mark.parametrize("hand_over", [None, True])
async def test_a_slow_agent_holds_no_queued_run_and_its_outcome_crosses_continue_as_new(
    client: Client, task_queue: str, hand_over: bool | None
) -> None:
    """One agent is slow while 150 runs queue behind `max_concurrency`: every fast run runs
    (once) while the slow agent is still running, and nothing runs twice or is parked. Held by
    the chain (the default), the slow run keeps it from continuing as new, but the runs it
    starts meanwhile go to `ChainRun`s of their own; handed over (`hand_over: true`), the chain
    continues as new whenever its budget says, and the slow run's outcome then reaches its
    current run."""
    agents = SlowAndFast()
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    fast = [event(correlation_id, "Fast", n=n) for n in range(FAST_RUNS)]
    slow_subscription = {**SLOW_SUBSCRIPTION, "hand_over": hand_over}
    document = {**SLOW_AND_FAST, "subscriptions": [slow_subscription, FAST_SUBSCRIPTION]}
    async with build_worker(client, task_queue, agents.registry()):
        handle = await api.start_chain(
            client, ChainSpec.model_validate(document), correlation_id, queue=task_queue
        )
        slow = event(correlation_id, "Slow")
        await api.publish(client, slow)
        await asyncio.wait_for(agents.slow_started.wait(), PROGRESS_TIMEOUT)
        for envelope in fast:
            await api.publish(client, envelope)

        async def all_fast_ran() -> bool:
            state = await api.chain_state(client, correlation_id)
            ran = {key for key in agents.calls if "/fast/" in key}
            return state.queued == 0 and len(ran) == FAST_RUNS

        await eventually(all_fast_ran, timeout=PROGRESS_TIMEOUT)
        assert not agents.slow_released.is_set()
        runs_during = await chain_runs(client, handle.id)
        agents.slow_released.set()

        async def slow_landed() -> bool:
            timeline = await api.chain_timeline(client, correlation_id)
            return "SlowDone" in {row.event for row in timeline}

        await eventually(slow_landed, timeout=PROGRESS_TIMEOUT)
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), PROGRESS_TIMEOUT)
        parked = await api.dlq_entries(client, queue=task_queue)
    if hand_over:
        assert runs_during > 1, "the chain continued as new while the slow agent ran"
    expected = {run_idempotency_key(handle.id, "fast", e.event.id) for e in fast}
    expected.add(run_idempotency_key(handle.id, "slow", slow.event.id))
    assert sorted(agents.calls) == sorted(expected), "every run ran, none twice"
    assert state.events_seen == FAST_RUNS + 2 and state.queued == 0 and state.running == []
    assert parked == [] and state.dead_lettered == 0


async def chain_runs(client: Client, workflow_id: str) -> int:
    return len([e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")])


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


async def test_runs_stay_in_the_chain_unless_their_subscription_hands_them_over(
    client: Client, task_queue: str
) -> None:
    """A run stays in the chain (the fast path) unless its subscription says `hand_over: true`:
    then it goes to a `ChainRun` of its own."""
    spec = ChainSpec.model_validate(
        {
            "name": "short-and-long",
            "triggers": ["A"],
            "alerts": None,
            "subscriptions": [
                {"agent": "ux-designer", "events": "A"},
                {"agent": "python-pro", "events": "A", "hand_over": True},
            ],
        }
    )
    async with build_worker(client, task_queue):
        state, _ = await run_chain(client, task_queue, spec, [event("", "A")])
        handle = api.chain_handle(client, state.correlation_id)
        handed = await chain_run_handles(client, handle)
        here = await runs_by_agent(handle)
        events = [e async for e in handle.fetch_history_events()]
    assert state.events_seen == 1 and state.dead_lettered == 0
    assert [run.id for run in handed] == [f"{handle.id}/run-3"], "python-pro's: its own workflow"
    assert list(here) == [], "no activity task in the chain"
    assert local_activity_types(events) == [RUN_AGENTS_ACTIVITY], "ux-designer's: in the chain"
