"""Helpers the test modules share: specs, events, waits and checks used by more than one."""

import asyncio
import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHandle

from coord.activities.kinds import demo
from coord.activities.kinds.demo import register_demo_agents
from coord.activities.mesh import routing
from coord.models.aggregator.spec import AggregatorSpec, AggregatorState
from coord.models.chain.spec import ChainSpec, ChainState
from coord.models.dlq.letter import DeadLetter, DlqSelection, EntrySummary
from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.config import PythonAgent
from coord.models.saga.spec import SagaSpec
from coord.models.wire.specs import read_document
from coord.starter import api
from coord.starter.api import common, sagas
from coord.worker import build_worker
from coord.workflows import dlq
from tests.conftest import ROOT, feature_deployment

USER_STORY = ROOT / "examples" / "user-story-chain.yaml"


def user_story(**overrides: Any) -> ChainSpec:
    return ChainSpec.model_validate({**read_document(USER_STORY), **overrides})


def approved(correlation_id: str, **payload: Any) -> EventEnvelope:
    return EventEnvelope.new(
        "UserStoryApproved",
        "/product-strategist",
        payload=payload,
        correlation_id=correlation_id,
        topic="project.tasks",
    )


def quick_demo_plan_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo plan's workers (on the test's in-process worker) take 0.05 s a step of their
    progress, not PLAN_STEP_SECONDS' second, which is there for a person watching `coord demo`:
    for a test of what the plan does, not of how its progress looks while it runs."""
    monkeypatch.setattr(demo, "PLAN_STEP_SECONDS", 0.05)


def unserved_agents_found_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of an agent no worker serves, once its time on the agent's queue is up, looks for a
    worker once (on the test's in-process worker), not for SERVED_PATIENCE's 5 s of workers
    starting up again after a server restart: for a test of how such a run ends, not of how
    long it waits."""
    monkeypatch.setattr(routing, "SERVED_PATIENCE", timedelta(seconds=1))


def queries_refused_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query no worker answers (`answered`) is refused after 1 s and a 1 s re-ask, not
    QUERY_PATIENCE's 5 s and REASK_PATIENCE's 20 s, which leave a busy worker time to answer:
    for a test of how such a read ends, not of how long it waits."""
    monkeypatch.setattr(common, "QUERY_PATIENCE", timedelta(seconds=1))
    monkeypatch.setattr(common, "REASK_PATIENCE", timedelta(seconds=1))


def unserved_replays_end_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay's run of an agent no worker serves ends `agent_unavailable` after 2 s on the
    agent's queue, not REPLAY_SCHEDULE_TO_START's 10, and one look for a worker
    (`unserved_agents_found_at_once`): for a test of what such a replay runs and reports."""
    monkeypatch.setattr(dlq, "REPLAY_SCHEDULE_TO_START", timedelta(seconds=2))
    unserved_agents_found_at_once(monkeypatch)


def started_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """`start_saga` starts a saga as from a process hosting no worker of its queue (`coord saga
    start`, a script): its start says nothing of where the agents run (`placed_here`), and the
    run asks its worker, although the test's worker runs in the test's own process."""

    async def nothing(*_: object) -> None:
        return None

    monkeypatch.setattr(sagas, "placed_here", nothing)


async def orphaned(
    client: Client,
    task_queue: str,
    *starts: Awaitable[WorkflowHandle[Any, Any]],
    registry: AgentRegistry | None = None,
) -> list[WorkflowHandle[Any, Any]]:
    """Runs started on `task_queue` and taken up by a worker (each has completed a workflow
    task) serving `registry`'s agents (default: the demo agents), which then stops: the server
    lists its pollers for minutes more and answers a query of theirs with a timeout, or at once
    with FAILED_PRECONDITION ("no poller seen for task queue recently")."""
    async with build_worker(client, task_queue, registry):
        handles = [await start for start in starts]
        for handle in handles:
            await eventually(functools.partial(taken_up, handle))
    return handles


async def taken_up(handle: WorkflowHandle[Any, Any]) -> bool:
    return EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED in await history_events(handle)


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 30, interval: float = 0.05
) -> None:
    async def poll() -> None:
        while not await check():
            await asyncio.sleep(interval)

    await asyncio.wait_for(poll(), timeout)


def routing_spec(**overrides: Any) -> ChainSpec:
    """Filters (short form and CEL) and both kinds of join, on the demo agents."""
    return ChainSpec.model_validate(
        {
            "name": "routing",
            "triggers": ["Alert", "A", "B"],
            "alerts": None,
            "subscriptions": [
                {
                    "agent": "ux-designer",
                    "events": "Alert",
                    "filter": "severity=high",
                    "publishes": {"on_success": "HighHandled"},
                },
                {
                    "agent": "python-pro",
                    "events": "Alert",
                    "filter": 'payload.severity == "low" && routing.topic == "project.reviews"',
                    "publishes": {"on_success": "LowReviewHandled"},
                },
                {
                    "agent": "database-specialist",
                    "events": ["A", "B"],
                    "join": "any",
                    "publishes": {"on_success": "AnyFired"},
                },
                {
                    "agent": "frontend-specialist",
                    "events": ["A", "B"],
                    "join": "all",
                    "publishes": {"on_success": "AllFired"},
                },
            ],
            **overrides,
        }
    )


def event(
    correlation_id: str,
    type: str,
    topic: str | None = None,
    priority: Priority = Priority.NORMAL,
    **payload: Any,
) -> EventEnvelope:
    return EventEnvelope.new(
        type,
        "/test",
        payload=payload,
        correlation_id=correlation_id,
        topic=topic,
        priority=priority,
    )


async def run_chain(
    client: Client,
    task_queue: str,
    spec: ChainSpec,
    events: Sequence[EventEnvelope | dict[str, Any]],
) -> tuple[ChainState, list[TimelineEntry]]:
    """Publish the events, close the chain (it finishes the work they caused) and return its
    record and log."""
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    handle = await api.start_chain(client, spec, correlation_id, queue=task_queue)
    for item in events:
        raw = item.model_dump(mode="json") if isinstance(item, EventEnvelope) else item
        raw["event"]["correlation_id"] = correlation_id
        await handle.signal("event", raw)
    await api.close_chain(client, correlation_id)
    state = await asyncio.wait_for(handle.result(), 30)
    return state, await api.chain_timeline(client, correlation_id)


def alerting_spec(**overrides: Any) -> ChainSpec:
    spec = routing_spec(
        triggers=["Alert", "A", "B", "AlertRaised", "AlertResolved"],
        alerts={
            "topic": "project.alerts",
            "pause_when": "severity=high",
            "resume_on": ["AlertResolved"],
        },
        **overrides,
    )
    spec.subscriptions = [s for s in spec.subscriptions if s.join == "any"]
    return spec


PHASE1 = ROOT / "examples" / "phase1-aggregator.yaml"


API = ("APIDesignCompleted", "/backend-architect")


WIREFRAME = ("WireframeCompleted", "/ux-designer")


TEST_PLAN = ("TestPlanCompleted", "/test-engineer")


def phase1(**overrides: Any) -> AggregatorSpec:
    data = {**read_document(PHASE1), "lookback": False}
    data["aggregator_id"] = f"phase1-{uuid.uuid4().hex[:8]}"
    return AggregatorSpec.model_validate({**data, **overrides})


def completed(kind: tuple[str, str], correlation_id: str | None = None) -> EventEnvelope:
    return EventEnvelope.new(
        kind[0], kind[1], payload={"by": kind[1]}, correlation_id=correlation_id
    )


async def signal(handle: WorkflowHandle[Any, Any], *events: EventEnvelope) -> None:
    for envelope in events:
        await handle.signal("event", envelope.model_dump(mode="json"))


async def state_shows(
    client: Client, handle: WorkflowHandle[Any, Any], check: Any
) -> AggregatorState:
    """Wait until the aggregator's record satisfies `check`, and return it."""
    seen: list[AggregatorState] = []

    async def shown() -> bool:
        seen.append(await api.aggregator_state(client, handle.id))
        return bool(check(seen[-1]))

    await eventually(shown)
    return seen[-1]


async def parked(
    client: Client, task_queue: str, count: int, selection: DlqSelection | None = None
) -> list[EntrySummary]:
    """The entries once visibility counts `count` of them (it is eventually consistent)."""
    query = api.dlq_query(selection, queue=task_queue)

    async def enough() -> bool:
        return (await client.count_workflows(query)).count >= count

    await eventually(enough, timeout=60)
    return await api.dlq_entries(client, selection, queue=task_queue)


def letter(target: str, *, event_type: str = "DeployCommand", **fields: Any) -> DeadLetter:
    """A dead letter of an event to `target`; `fields` override the letter's."""
    now = datetime.now(UTC)
    correlation_id, topic = fields.pop("correlation_id", None), fields.pop("topic", None)
    event = EventEnvelope.new(
        event_type, "/ops", payload={"v": 1}, correlation_id=correlation_id, topic=topic
    )
    return DeadLetter.model_validate(
        {
            "event": event,
            "target_workflow": target,
            "failure_type": "invalid_payload",
            "message": "Invalid payload",
            "first_failed_at": now,
            "last_failed_at": now,
            **fields,
        }
    )


async def history_events(handle: WorkflowHandle[Any, Any]) -> list[EventType.ValueType]:
    return [event.event_type async for event in handle.fetch_history_events()]


UNHANDLED_COMMAND = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND


async def task_failures(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """Failed workflow tasks, but for the server refusing a completion because a signal arrived
    meanwhile (UnhandledCommand: the SDK runs the task again with the signal, by design)."""
    history = await handle.fetch_history()
    return [
        event.workflow_task_failed_event_attributes.failure.message
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        and event.workflow_task_failed_event_attributes.cause != UNHANDLED_COMMAND
    ]


STEPS = ["BuildArtifact", "RunTests", "DeployToStaging", "RunE2ETests", "DeployToProduction"]


FAST_RETRY = {"max_retries": 1, "initial_delay": "100ms", "max_delay": "100ms"}


def failing_at(step: str, **extra: Any) -> SagaSpec:
    spec = feature_deployment(input={"inject": {"fail": [step], **extra}})
    for s in spec.steps:
        s.retry = s.retry.model_validate(FAST_RETRY)
        s.compensation_retry = s.compensation_retry.model_validate(FAST_RETRY)
    return spec


async def connected_as(client: Client, identity: str) -> Client:
    """A client of `client`'s server whose identity (what the server records as the caller of
    what it sends: the author of a plan approval) is `identity`."""
    config = client.service_client.config
    return await Client.connect(
        config.target_host,
        namespace=client.namespace,
        identity=identity,
        data_converter=client.data_converter,
    )


async def wait_until(predicate: Callable[[], Any], timeout: float = 20) -> None:
    async def poll() -> None:
        while not await predicate():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


async def chain_run_handles(
    client: Client, chain: WorkflowHandle[Any, Any]
) -> list[WorkflowHandle[Any, Any]]:
    """The `ChainRun`s a chain started (each agent run and vote of it), in every run of the
    chain, from the chain's histories."""
    started = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    ids: list[str] = []
    async for execution in client.list_workflows(f"WorkflowId = '{chain.id}'"):
        history = client.get_workflow_handle(chain.id, run_id=execution.run_id)
        async for history_event in history.fetch_history_events():
            if history_event.event_type == started:
                attributes = history_event.start_child_workflow_execution_initiated_event_attributes
                ids.append(attributes.workflow_id)
    return [client.get_workflow_handle(workflow_id) for workflow_id in ids]


def demo_agents_remote() -> AgentRegistry:
    """The demo agents, each declared `execution: remote`: served by the workflow's worker, every
    run an activity task on the workflow's queue, for tests that read activity tasks."""
    demo = register_demo_agents(AgentRegistry())
    remote = AgentRegistry(demo.settings)
    for name in demo:
        declared = PythonAgent(kind="python", callable="tests.demo:agent", execution="remote")
        remote.register(name, "python", declared)(demo.get(name))
    return remote
