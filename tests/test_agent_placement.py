"""Where agent runs go: a short in-process agent the workflow's worker serves runs as a local
activity (a marker in the history, no activity task), another agent it serves without a pool or
rate limit on the workflow's own task queue (handed over eagerly), and any other on its own
agent queue. Retries, the failure taxonomy and the dead-letter queue are the same everywhere."""

import asyncio
import json
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from coord.activities.kinds.demo import register_demo_agents
from coord.activities.mesh.routing import AgentRouter
from coord.infra.payload_store import data_converter
from coord.models.calls import PLACE_AGENTS
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.batches import LocalBatchOutcomes
from coord.models.mesh.config import PythonAgent, ShellAgent
from coord.models.mesh.placement import (
    Placement,
    PlacementAnswer,
    PlacementAsk,
    claim_holds,
    claimable,
    placement,
)
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.contract import (
    RUN_AGENT_ACTIVITY,
    RUN_AGENTS_ACTIVITY,
    SAGA_PLACEMENTS_MEMO,
    SAGA_VERSION_MEMO,
    SAGA_WORKFLOW,
    agent_task_queue,
)
from coord.models.wire.specs import SpecError, parse_model
from coord.models.wire.versions import SAGA_VERSION
from coord.starter import api
from coord.worker import WORKFLOWS, build_worker
from coord.workflows._runtime import agent_runs
from tests.conftest import feature_deployment
from tests.helpers import STEPS, approved, failing_at, parked, user_story

SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
MARKER = EventType.EVENT_TYPE_MARKER_RECORDED
SIGNALED = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
TASK_STARTED = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
FAILED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
LOCAL = "core_local_activity"


def test_a_run_goes_where_its_agent_needs() -> None:
    python = PythonAgent(kind="python", callable="m:f")
    assert placement("python", None) == Placement.LOCAL
    assert placement("python", python) == Placement.LOCAL
    assert placement("python", python.model_copy(update={"execution": "remote"})) == Placement.HOME
    assert placement("python", python.model_copy(update={"max_concurrent": 2})) == (
        Placement.AGENT_QUEUE
    )
    assert placement("python", python.model_copy(update={"rate_limit": 5.0})) == (
        Placement.AGENT_QUEUE
    )
    assert placement("python", python.model_copy(update={"capabilities": ["sql"]})) == (
        Placement.AGENT_QUEUE
    ), "a routing candidate's load is read from its queue"
    shell = ShellAgent(kind="shell", argv=["true"], timeout=timedelta(seconds=5))
    assert placement("shell", shell) == Placement.HOME
    assert placement("shell", shell.model_copy(update={"execution": "local"})) == Placement.LOCAL


def test_a_local_agent_must_be_short() -> None:
    declared = {"kind": "shell", "argv": ["true"], "execution": "local", "timeout": "30s"}
    with pytest.raises(SpecError, match="execution: local needs a timeout of at most 10s"):
        parse_model(ShellAgent, declared, "agents.slow")


async def _history(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [event async for event in handle.fetch_history_events()]


def _agent_tasks(events: list[HistoryEvent]) -> dict[str, str]:
    """Each `run_agent` activity task scheduled: its activity id -> its task queue."""
    return {
        e.activity_task_scheduled_event_attributes.activity_id: (
            e.activity_task_scheduled_event_attributes.task_queue.name
        )
        for e in events
        if e.event_type == SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == RUN_AGENT_ACTIVITY
    }


def local_activity_types(events: list[HistoryEvent]) -> list[str]:
    """The activity type of each local activity recorded, in order."""
    return [
        json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)[
            "activity_type"
        ]
        for e in events
        if e.marker_recorded_event_attributes.marker_name == LOCAL
    ]


def local_agent_runs(events: list[HistoryEvent]) -> int:
    """The agent runs local activities recorded: one a `run_agent` marker, and each of a
    batch's (`run_agents`) that came back with an outcome."""
    runs = 0
    for event in events:
        marker = event.marker_recorded_event_attributes
        if marker.marker_name != LOCAL:
            continue
        kind = json.loads(marker.details["data"].payloads[0].data)["activity_type"]
        if kind == RUN_AGENTS_ACTIVITY:
            answer = LocalBatchOutcomes.model_validate_json(
                marker.details["result"].payloads[0].data
            )
            runs += sum(1 for outcome in answer.outcomes if not outcome.again)
        else:
            runs += 1
    return runs


def _markers(events: list[HistoryEvent]) -> int:
    return sum(1 for e in events if e.event_type == MARKER)


async def test_a_saga_of_python_agents_runs_them_as_local_activities(
    client: Client, task_queue: str
) -> None:
    spec = feature_deployment()
    async with build_worker(client, task_queue):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    assert [step.name for step in state.completed_steps] == STEPS
    events = await _history(handle)
    assert _agent_tasks(events) == {}, "no activity task for a local agent"
    assert local_agent_runs(events) == len(STEPS) + 1, "each run's outcome, and the placement's"
    assert _markers(events) == 2, "the placement's marker, and one for the steps run ahead"
    sent = [e for e in events if e.event_type == SIGNALED]
    assert sent == [], "no chain runs: the saga asked before its first send, and sent none"
    assert len(events) <= 35, "no longer than the hand-written five-step saga's history"


async def test_a_failing_local_agent_is_retried_and_fails_with_its_type(
    client: Client, task_queue: str
) -> None:
    spec = failing_at("RunE2ETests", error_type="service_unavailable")
    async with build_worker(client, task_queue):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPENSATED
    [failed] = [entry for entry in state.events if entry.event == "E2EFailed"]
    error = failed.payload["error"]
    assert error["type"] == "service_unavailable"
    assert "attempt 2" in error["message"], "one retry (FAST_RETRY), as an activity would"
    assert _agent_tasks(await _history(handle)) == {}


async def test_a_chain_runs_its_python_agents_locally_and_parks_a_failing_one(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    poisoned = {"inject": {"fail": ["python-pro"], "error_type": "invalid_payload"}}
    async with build_worker(client, task_queue):
        await api.publish(
            client, approved(correlation_id, **poisoned), spec=user_story(), queue=task_queue
        )
        [row] = await parked(client, task_queue, 1)
        entry = await api.dlq_entry(client, row.entry_id)
        chain = api.chain_handle(client, correlation_id)
        events = await _history(chain)
    assert entry.failure_type == "invalid_payload" and entry.attempts == 1
    assert entry.target_agent == "python-pro" and entry.replay == "rerun"
    assert _agent_tasks(events) == {}, "the chain's agents ran as local activities"
    assert _markers(events) >= 3


async def test_a_chain_asks_where_its_agents_run_in_an_activity_and_replays_at_every_task(
    client: Client, task_queue: str
) -> None:
    """Three runs of one event wait for one answer, an activity's: replayed from any workflow
    task on, the chain starts its runs in the task it started them in (a local activity's
    answer could land in another, with the runs' patch checks)."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        await api.publish(client, approved(correlation_id), spec=user_story(), queue=task_queue)
        chain = api.chain_handle(client, correlation_id)
        await asyncio.wait_for(chain.result(), 60)
        history = await chain.fetch_history()
    events = list(history.events)
    asked = [
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in events
        if e.event_type == SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == PLACE_AGENTS.name
    ]
    assert asked == [task_queue], "one question, on the chain's own queue"
    assert PLACE_AGENTS.name not in local_activity_types(events), "not in a local activity"
    await _replays_from_every_task(history)


_place_agents = AgentRouter.place_agents


class _FirstAnswerLate(AgentRouter):
    """A method of a router's, so that the SDK reads its argument's type (a function outside a
    class would be given its `self` as an argument, and the ask as a dict)."""

    @activity.defn(name=PLACE_AGENTS.name)
    async def place_agents(self, ask: PlacementAsk) -> dict[str, Placement]:
        """The worker's look-up, its first attempt starved past its timeout (PLACE_TIMEOUT)."""
        if activity.info().attempt == 1:
            await asyncio.sleep(agent_runs.PLACE_TIMEOUT.total_seconds() + 1)
        return await _place_agents(self, ask)


@pytest.mark.slow
async def test_a_chain_whose_placement_attempt_timed_out_replays_from_every_task(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look-up whose first attempt times out, answered by the next: in a local activity its
    answer reached the runs' patch checks in another place on replay than at first. The
    look-up's timeout is 3 s here, not 10: a local activity's timeout is not in the history."""
    monkeypatch.setattr(agent_runs, "PLACE_TIMEOUT", timedelta(seconds=3))
    monkeypatch.setattr(AgentRouter, "place_agents", _FirstAnswerLate.place_agents)
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        await api.publish(client, approved(correlation_id), spec=user_story(), queue=task_queue)
        chain = api.chain_handle(client, correlation_id)
        await asyncio.wait_for(chain.result(), 90)
        history = await chain.fetch_history()
    events = list(history.events)
    asked = {
        e.event_id
        for e in events
        if e.event_type == SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == PLACE_AGENTS.name
    }
    answered = [
        e.activity_task_started_event_attributes.attempt
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in asked
    ]
    completed = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.scheduled_event_id in asked
    ]
    assert (answered, len(completed)) == ([2], 1), "answered by its second attempt"
    await _replays_from_every_task(history)


async def _replays_from_every_task(history: WorkflowHistory) -> None:
    """As a worker taking the workflow over at any of its workflow tasks would replay it."""
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=data_converter())
    events = list(history.events)
    for end, event in enumerate(events, start=1):
        if event.event_type == TASK_STARTED:
            await replayer.replay_workflow(WorkflowHistory(history.workflow_id, events[:end]))


def _registry(declarations: Mapping[str, PythonAgent]) -> AgentRegistry:
    """The demo agents, and agents of the given declarations that answer at once."""
    registry = AgentRegistry()
    register_demo_agents(registry)
    for name, declaration in declarations.items():
        registry.register(name, "python", declaration)(_instant)
    return registry


async def _instant(event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
    return {"summary": f"{context.agent} done"}


def _demo_agents_but(**replaced: Any) -> AgentRegistry:
    """The demo agents, those named in `replaced` by the code given."""
    registry = register_demo_agents(AgentRegistry())
    agents = AgentRegistry(registry.settings)
    for name in registry:
        agents.register(name)(replaced.get(name) or registry.get(name))
    return agents


def _saga_of(agent: str) -> SagaSpec:
    spec = feature_deployment()
    spec.steps = [spec.steps[0].model_copy(update={"name": "Only", "agent": agent})]
    return spec


@pytest.mark.parametrize(
    ("declaration", "queue_of"),
    [
        (
            PythonAgent(kind="python", callable="m:f", execution="remote"),
            lambda agent, home: home,
        ),
        (
            PythonAgent(kind="python", callable="m:f", max_concurrent=2),
            agent_task_queue,
        ),
    ],
    ids=["served-here-on-the-workflow-queue", "with-a-pool-on-its-agent-queue"],
)
async def test_a_remote_agent_served_here_stays_on_the_workflow_queue_unless_paced(
    client: Client, task_queue: str, declaration: PythonAgent, queue_of: Any
) -> None:
    agent = f"agent-{uuid.uuid4().hex[:6]}"
    async with build_worker(client, task_queue, _registry({agent: declaration})):
        handle = await api.start_saga(client, _saga_of(agent), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    assert list(_agent_tasks(await _history(handle)).values()) == [queue_of(agent, task_queue)]


def test_a_start_may_place_runs_on_the_workflow_queue_or_their_agents_never_locally() -> None:
    """What a saga's start says about its runs (`SAGA_PLACEMENTS_MEMO`) is taken only with the
    chain's answer and without a local run, and a worker runs a run its start placed on the
    workflow's queue only for an agent it serves there."""
    home = PlacementAnswer(
        agents={"a": Placement.HOME, "b": Placement.AGENT_QUEUE}, chain_runs=False
    )
    assert claimable(home)
    assert not claimable(home.model_copy(update={"chain_runs": None}))
    assert not claimable(PlacementAnswer(agents={"a": Placement.LOCAL}, chain_runs=False))
    assert claim_holds(Placement.HOME, Placement.HOME)
    assert claim_holds(Placement.HOME, Placement.LOCAL), "served here: any queue of its will do"
    assert not claim_holds(Placement.HOME, Placement.AGENT_QUEUE), "paced, or not served here"
    assert claim_holds(Placement.AGENT_QUEUE, Placement.HOME)
    assert not claim_holds(Placement.LOCAL, Placement.LOCAL), "a start never places a local run"


async def _started_placed(
    client: Client, task_queue: str, declaration: PythonAgent, where: Placement
) -> tuple[SagaState, list[HistoryEvent], str]:
    """A one-step saga of an agent of `declaration`, started as the Temporal CLI could start
    it, its start saying the agent runs `where` (and no chain runs); its record, its history
    and its agent."""
    agent = f"agent-{uuid.uuid4().hex[:6]}"
    spec = _saga_of(agent)
    forged = PlacementAnswer(agents=dict.fromkeys(spec.agents_run(), where), chain_runs=False)
    memo = {SAGA_VERSION_MEMO: SAGA_VERSION, SAGA_PLACEMENTS_MEMO: forged.model_dump(mode="json")}
    async with build_worker(client, task_queue, _registry({agent: declaration})):
        await client.start_workflow(
            SAGA_WORKFLOW,
            spec.model_dump(mode="json", exclude_unset=True),
            id=spec.workflow_id,
            task_queue=task_queue,
            memo=memo,
        )
        handle = api.saga_handle(client, spec.saga_id)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    return state, await _history(handle), agent


async def test_a_start_placing_a_pooled_agent_on_the_workflow_queue_is_refused_there(
    client: Client, task_queue: str
) -> None:
    """A start is not trusted: one saying a pooled agent runs on the workflow's queue (where
    its pool would not hold) gets its run refused there, the agent not called (`misplaced`),
    and the run goes on to the agent's own queue, spending none of its attempts."""
    pooled = PythonAgent(kind="python", callable="m:f", max_concurrent=2)
    state, events, agent = await _started_placed(client, task_queue, pooled, Placement.HOME)
    assert state.status == SagaStatus.COMPLETED
    assert local_activity_types(events) == [], "its start's placements taken: nothing asked"
    assert list(_agent_tasks(events).values()) == [task_queue, agent_task_queue(agent, task_queue)]
    [detour] = state.detours
    assert (detour.reason, detour.action) == ("misplaced", "queued")
    assert state.completed_steps[0].name == "Only"


async def test_a_start_placing_a_run_locally_is_not_taken(client: Client, task_queue: str) -> None:
    """A local run is the worker's to place: a start saying so is ignored, and the saga asks
    its worker, which places the served agent on the workflow's queue."""
    remote = PythonAgent(kind="python", callable="m:f", execution="remote")
    state, events, _ = await _started_placed(client, task_queue, remote, Placement.LOCAL)
    assert state.status == SagaStatus.COMPLETED
    assert local_activity_types(events) == ["place_agents_with_chain"], "its worker asked"
    assert list(_agent_tasks(events).values()) == [task_queue]
    assert state.detours == []


async def test_a_local_compensation_that_fails_for_good_is_parked(
    client: Client, task_queue: str
) -> None:
    spec = failing_at("DeployToProduction")
    spec.input["inject"]["fail"].append("RollbackProduction")
    async with build_worker(client, task_queue):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
        [row] = await parked(client, task_queue, 1)
        entry = await api.dlq_entry(client, row.entry_id)
    assert state.status == SagaStatus.COMPENSATION_FAILED
    assert entry.failure_type == "compensation_failed" and entry.replay == "run_agent"
    assert entry.target_agent == "RollbackProduction" and entry.attempts == 2
    [ended] = [e for e in await _history(handle) if e.event_type == FAILED]
    failure = ended.workflow_execution_failed_event_attributes.failure
    assert not failure.HasField("cause"), "the saga's failure alone, no workflow stack under it"
    assert _agent_tasks(await _history(handle)) == {}, "the compensation ran locally"


async def test_a_worker_shut_down_with_a_local_run_in_flight_lets_it_finish(
    client: Client, task_queue: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The SDK neither cancels nor hands over a local activity when its worker shuts down: the
    shutdown waits for the run, whose result is recorded once; the next worker finishes the
    saga from there, and the SDK's core logs no panic about the run's timers."""
    deploying, release = asyncio.Event(), asyncio.Event()
    runs: list[str] = []

    async def deploy(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        runs.append(context.idempotency_key)
        deploying.set()
        await release.wait()
        return {"version": "v42"}

    agents = _demo_agents_but(DeployToProduction=deploy)
    spec = feature_deployment()
    async with build_worker(client, task_queue, agents) as first:
        handle = await api.start_saga(client, spec, queue=task_queue)
        await asyncio.wait_for(deploying.wait(), 30)
        stopping = asyncio.create_task(first.shutdown())
        await asyncio.sleep(0)
        release.set()
        await asyncio.wait_for(stopping, 30)
    async with build_worker(client, task_queue, agents):
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    assert len(runs) == 1, "the run in flight finished on the worker shutting down"
    assert _agent_tasks(await _history(handle)) == {}
    assert "panicked" not in capfd.readouterr().err


async def test_a_retried_local_agent_runs_each_attempt_under_its_own_timeout(
    client: Client, task_queue: str
) -> None:
    """Attempts 1 (in the saga's batch) and 2 fail at once; attempt 3, a second after 2, runs
    1.5 s of its 2 s timeout. Retried inside its worker, attempt 2's timeout went on running and
    timed attempt 3 out half a second early; each retry now waits on a workflow timer and runs
    as a local activity of its own, with its own timeout."""
    attempts: list[int] = []

    async def slow_third(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        attempts.append(context.attempt)
        if context.attempt < 3:
            raise ApplicationError("not yet", type="temporary_failure")
        await asyncio.sleep(1.5)
        return {"summary": "passed"}

    agents = _demo_agents_but(RunE2ETests=slow_third)
    spec = feature_deployment()
    for step in spec.steps:
        step.timeout = timedelta(seconds=2)
        step.retry = step.retry.model_validate(
            {"max_retries": 3, "initial_delay": "1s", "max_delay": "1s", "jitter": "none"}
        )
    async with build_worker(client, task_queue, agents):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    assert attempts == [1, 2, 3], "the third attempt ran to its end"
    assert _agent_tasks(await _history(handle)) == {}, "every attempt ran locally"
