"""The ReactiveChain workflow on the real dev server: the user-story chain and its rules.
On the project's pytest plugin (coord/testing.py): its `coord` helpers and workers."""

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from coord.activities.mesh.run_agent import AgentActivities
from coord.models.chain.intake import TIMELINE_WINDOW
from coord.models.chain.spec import ChainSpec, ChainStatus
from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentContext, AgentRegistry, AgentRequest
from coord.starter import api
from coord.testing import Coordination, assert_caused, assert_timeline, causation_path
from tests.agents import GatedAgents
from tests.conftest import CONTINUE_AS_NEW_AFTER
from tests.helpers import (
    USER_STORY,
    alerting_spec,
    approved,
    event,
    eventually,
    routing_spec,
    run_chain,
    user_story,
)


def order(timeline: list[TimelineEntry]) -> list[str]:
    return [entry.event for entry in timeline]


@pytest.mark.usefixtures("coord_worker")
async def test_seed_user_story_chain_runs_to_testing_completed(coord: Coordination) -> None:
    correlation_id = await coord.start_chain(USER_STORY)
    await coord.publish(
        correlation_id, "UserStoryApproved", source="/product-strategist", topic="project.tasks"
    )
    state = await coord.chain_outcome(correlation_id)
    timeline = await coord.timeline(correlation_id)
    assert state.status == ChainStatus.COMPLETED
    events = order(timeline)
    assert events[0] == "UserStoryApproved" and events[-1] == "TestingCompleted"
    for joined in ("BackendImplementationCompleted", "WireframeCompleted"):
        assert_timeline(timeline, joined, "FrontendImplementationStarted")
        assert_caused(timeline, "FrontendImplementationStarted", by=joined)
    for done in ("FrontendImplementationCompleted", "SchemaDesignCompleted", "TestPlanCompleted"):
        assert_timeline(timeline, done, "TestingStarted")
    assert causation_path(timeline, "BackendImplementationStarted") == [
        "UserStoryApproved",
        "APIDesignCompleted",
        "BackendImplementationStarted",
    ]
    python_pro = next(e for e in timeline if e.event == "BackendImplementationStarted")
    assert python_pro.agent == "/python-pro"
    assert {e.correlation_id for e in timeline} == {correlation_id}


async def test_filters_and_joins(coord: Coordination) -> None:
    events = [
        event("", "Alert", "project.alerts", severity="high"),
        event("", "Alert", "project.reviews", severity="low"),
        event("", "Alert", "project.tasks", severity="low"),
        event("", "B"),
        event("", "A"),
        event("", "A"),
    ]
    async with coord.worker():
        state, timeline = await run_chain(coord.client, coord.task_queue, routing_spec(), events)
    published = order(timeline)
    assert published.count("HighHandled") == 1
    assert published.count("LowReviewHandled") == 1
    assert published.count("AnyFired") == 3
    assert published.count("AllFired") == 1, "B then A, out of order, completes the join once"
    assert state.status == ChainStatus.CLOSED
    assert state.waiting == ["frontend-specialist waits for B"]


async def test_duplicate_ids_are_ignored_and_invalid_envelopes_recorded(
    coord: Coordination,
) -> None:
    once = event("", "A")
    raw_invalid = {"event": {"type": "", "source": "/cli"}, "routing": {"priority": "urgent"}}
    async with coord.worker():
        state, timeline = await run_chain(
            coord.client,
            coord.task_queue,
            routing_spec(),
            [once, raw_invalid, once, event("", "B")],
        )
    assert state.duplicates == 1
    assert order(timeline).count("A") == 1
    assert order(timeline).count("AllFired") == 1, "the chain kept working after the bad event"
    [rejected] = state.rejected
    assert "event.type: String should have at least 1 character" in rejected.reason
    assert "routing.priority: Input should be" in rejected.reason
    assert rejected.raw["routing"] == {"priority": "urgent"}


async def test_runaway_reaction_is_rejected_with_its_causation_path(coord: Coordination) -> None:
    spec = ChainSpec.model_validate(
        {
            "name": "echo",
            "triggers": ["Ping"],
            "max_causation_depth": 3,
            "alerts": None,
            "subscriptions": [
                {
                    "agent": "python-pro",
                    "events": "Ping",
                    "filter": "type=Ping",
                    "publishes": {"on_success": "Ping"},
                }
            ],
        }
    )
    async with coord.worker():
        state, timeline = await run_chain(coord.client, coord.task_queue, spec, [event("", "Ping")])
    assert order(timeline) == ["Ping"] * 4
    rejected, *notices = state.rejected
    assert "causation depth 4 exceeds 3, a probable loop" in rejected.reason
    assert rejected.reason.endswith("path: Ping ← Ping ← Ping ← Ping ← Ping")
    assert len(notices) == state.rejected_count - 1 <= 1, "the notice of its parking, if in time"
    assert state.dead_lettered == 1, "the loop is parked; a notice about it is never parked"


async def test_a_filtered_cycle_that_fans_out_stops_at_its_run_budget(
    coord: Coordination,
) -> None:
    """Two subscriptions on X publishing Y and two on Y publishing X: each hop doubles the runs,
    far below the depth limit. The seed's events queue `max_runs_per_event` runs; the events
    past it are rejected and parked, and the chain settles."""
    hops = [
        {
            "name": f"{source}{n}",
            "agent": "python-pro",
            "events": source,
            "filter": f"type={source}",
            "publishes": {"on_success": target},
        }
        for source, target in (("X", "Y"), ("Y", "X"))
        for n in (1, 2)
    ]
    spec = ChainSpec.model_validate(
        {
            "name": "fans",
            "triggers": ["X"],
            "alerts": None,
            "max_runs_per_event": 10,
            "subscriptions": hops,
        }
    )
    async with coord.worker():
        state, _ = await run_chain(coord.client, coord.task_queue, spec, [event("", "X")])
    budget = [r for r in state.rejected if "max_runs_per_event" in r.reason]
    assert state.status == ChainStatus.CLOSED and budget
    assert "caused have queued 10 runs, the chain's max_runs_per_event, a probable loop" in (
        budget[0].reason
    )
    assert state.events_seen <= 1 + 11, "the seed and one event per run queued"
    assert state.dead_lettered == len(budget) <= 11


async def test_event_of_another_correlation_is_rejected(coord: Coordination) -> None:
    stray = event("", "A")
    async with coord.worker():
        correlation_id = f"c-{uuid.uuid4().hex[:8]}"
        handle = await api.start_chain(
            coord.client, routing_spec(), correlation_id, queue=coord.task_queue
        )
        stray.event.correlation_id = "someone-else"
        await handle.signal("event", stray.model_dump(mode="json"))
        await handle.signal("close")
        state = await asyncio.wait_for(handle.result(), 30)
    assert "is not this chain's" in state.rejected[0].reason
    assert state.events_seen == 0


async def test_alert_pauses_dispatch_and_queued_runs_go_by_priority(coord: Coordination) -> None:
    spec = routing_spec(
        triggers=["Alert", "A", "B", "AlertRaised", "AlertResolved"],
        alerts={
            "topic": "project.alerts",
            "pause_when": "severity=high",
            "resume_on": ["AlertResolved"],
        },
        max_concurrency=1,
    )
    spec.subscriptions = [s for s in spec.subscriptions if s.join == "any"]
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with coord.worker():
        handle = await api.start_chain(coord.client, spec, correlation_id, queue=coord.task_queue)
        alert = event(correlation_id, "AlertRaised", "project.alerts", severity="high")
        await api.publish(coord.client, alert)
        for priority in (Priority.LOW, Priority.CRITICAL, Priority.NORMAL):
            await api.publish(coord.client, event(correlation_id, "A", priority=priority))

        async def all_queued() -> bool:
            return (await api.chain_state(coord.client, correlation_id)).queued == 3

        await eventually(all_queued)
        paused = await api.chain_state(coord.client, correlation_id)
        assert paused.status == ChainStatus.PAUSED and paused.running == []
        assert "AlertRaised" in (paused.pause_reason or "")
        await api.publish(coord.client, event(correlation_id, "AlertResolved", "project.alerts"))
        await api.close_chain(coord.client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 30)
        timeline = await api.chain_timeline(coord.client, correlation_id)
    by_id = {e.event_id: e for e in timeline}
    fired = [e for e in timeline if e.event == "AnyFired"]
    assert [by_id[e.causation_id or ""].priority for e in fired] == [
        Priority.CRITICAL,
        Priority.NORMAL,
        Priority.LOW,
    ]
    assert state.status == ChainStatus.CLOSED


async def test_continue_as_new_loses_and_duplicates_no_event(coord: Coordination) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    sent = [event(correlation_id, "Noise", n=n) for n in range(CONTINUE_AS_NEW_AFTER)]
    async with coord.worker():
        handle = await api.start_chain(
            coord.client, routing_spec(), correlation_id, queue=coord.task_queue
        )
        for envelope in sent:
            await api.publish(coord.client, envelope)
        await api.publish(coord.client, sent[0])
        await api.close_chain(coord.client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 60)
        timeline = await api.chain_timeline(coord.client, correlation_id)
    runs = [e async for e in coord.client.list_workflows(f"WorkflowId = '{handle.id}'")]
    assert len(runs) > 1, "the chain continued as new at least once"
    sent_ids = [e.event.id for e in sent]
    assert [e.event_id for e in timeline] == sent_ids[-len(timeline) :], "in order, none twice"
    assert len(timeline) >= TIMELINE_WINDOW, "the carried window and this run's rows"
    assert state.events_seen == len(sent)
    assert state.duplicates == 1


async def test_worker_stopped_mid_chain_is_finished_by_a_new_worker(coord: Coordination) -> None:
    gates = GatedAgents(names=["python-pro"])
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    first = coord.worker(gates.registry())
    runner = asyncio.create_task(first.run())
    await api.publish(
        coord.client, approved(correlation_id), spec=user_story(), queue=coord.task_queue
    )
    await gates.wait_started("python-pro")
    await first.shutdown()
    await runner
    async with coord.worker():
        state = await asyncio.wait_for(api.chain_handle(coord.client, correlation_id).result(), 60)
    assert state.status == ChainStatus.COMPLETED
    assert state.terminal_seen


async def test_publishing_to_an_ended_chain_is_refused_clearly(coord: Coordination) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with coord.worker():
        handle = await api.start_chain(
            coord.client, routing_spec(), correlation_id, queue=coord.task_queue
        )
        await api.close_chain(coord.client, correlation_id)
        await asyncio.wait_for(handle.result(), 30)
        with pytest.raises(api.Conflict, match=r"has already ended \(closed\); nothing to close"):
            await api.close_chain(coord.client, correlation_id)  # its own word, not `completed`
        late = event(correlation_id, "A")
        with pytest.raises(api.Undeliverable, match=r"has ended \(completed\)"):
            await api.publish(coord.client, late)
        with pytest.raises(api.Undeliverable, match=r"has ended \(completed\)"):
            await api.publish(coord.client, late, spec=routing_spec(), queue=coord.task_queue)
    with pytest.raises(api.NotFound, match="no chain for correlation id"):
        await api.publish(coord.client, event("nobody", "A"))


@pytest.mark.coord_time_skipping
@pytest.mark.usefixtures("coord_worker")
async def test_idle_chain_closes_after_its_idle_timeout(coord: Coordination) -> None:
    correlation_id = await coord.start_chain(routing_spec(idle_timeout="2h"))
    await coord.publish(correlation_id, "A")
    state = await coord.chain_outcome(correlation_id, timeout=30)
    assert state.status == ChainStatus.IDLE_CLOSED
    assert state.events_seen == 2


async def test_topic_wide_alert_reaches_every_running_chain(coord: Coordination) -> None:
    spec = alerting_spec()
    correlation_ids = [f"c-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    async with coord.worker():
        for correlation_id in correlation_ids:
            await api.start_chain(coord.client, spec, correlation_id, queue=coord.task_queue)

        async def both_listed() -> bool:
            query = "CoordPattern = 'chain' AND ExecutionStatus = 'Running'"
            listed = {e.id async for e in coord.client.list_workflows(query)}
            return {f"chain-{c}" for c in correlation_ids} <= listed

        await eventually(both_listed)
        alert = event("", "AlertRaised", "project.alerts", severity="high")
        reached = await api.broadcast(coord.client, alert)
        assert {f"chain-{c}" for c in correlation_ids} <= set(reached.reached)
        for correlation_id in correlation_ids:

            async def paused(c: str = correlation_id) -> bool:
                return (await api.chain_state(coord.client, c)).status == ChainStatus.PAUSED

            await eventually(paused)
        await api.broadcast(coord.client, event("", "AlertResolved", "project.alerts"))
        for correlation_id in correlation_ids:
            await api.close_chain(coord.client, correlation_id)
            state = await asyncio.wait_for(
                api.chain_handle(coord.client, correlation_id).result(), 30
            )
            assert state.status == ChainStatus.CLOSED and state.pause_reason is None


async def test_agent_results_publish_extra_events_and_report_metadata(coord: Coordination) -> None:
    async def reviewer(event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
        return {
            "verdict": "ok",
            "publish": [{"type": "ReviewRequested", "payload": {"target": "frontend"}}],
            "metadata": {"quality_score": 0.95},
        }

    registry = AgentRegistry()
    registry.register("reviewer")(reviewer)
    spec = ChainSpec.model_validate(
        {
            "name": "review",
            "triggers": ["A"],
            "alerts": None,
            "subscriptions": [
                {"agent": "reviewer", "events": "A", "publishes": {"on_success": "Reviewed"}}
            ],
        }
    )
    trigger = event("", "A")
    async with coord.worker(registry):
        _, timeline = await run_chain(coord.client, coord.task_queue, spec, [trigger])
    rows = {e.event: e for e in timeline}
    assert rows["Reviewed"].payload == {"verdict": "ok"}
    assert rows["ReviewRequested"].payload == {"target": "frontend"}
    assert rows["ReviewRequested"].agent == "/reviewer"
    assert rows["ReviewRequested"].causation_id == trigger.event.id

    result = await ActivityEnvironment().run(
        AgentActivities(registry).run_agent, AgentRequest(agent="reviewer", event=trigger)
    )
    assert result.metadata["quality_score"] == 0.95 and result.metadata["duration_ms"] >= 0
