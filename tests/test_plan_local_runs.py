"""A plan runs the short in-process agents its worker serves as local activities, as sagas and
chains do: a task's run, its reviews and its verifiers leave a marker in the plan's history and
no activity task; an agent declared `execution: remote` still runs as an activity task on its
own queue (the plan's `dispatch` decides); a failing local agent is retried with its failure
type kept; the plan asks its patches once (`plan-patches-at-once`), and many plans of parallel
local tasks on one worker replay, each from every workflow task."""

import asyncio
import random
from collections.abc import Mapping
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from coord.infra.payload_store import data_converter
from coord.models.calls import RUN_AGENT
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import PythonAgent
from coord.models.plan.spec import PlanStatus, TaskState
from coord.models.wire.contract import agent_task_queue
from coord.starter import api
from coord.worker import WORKFLOWS, build_worker
from tests.test_agent_placement import (
    _agent_tasks,
    _replays_from_every_task,
    local_activity_types,
)
from tests.test_plan import PlanAgents
from tests.test_plan_gates import GateAgents, outcome, plan, start, task_of

PATCH = "core_patch"
FAST_RETRY = {"max_retries": 2, "initial_delay": "50ms", "max_delay": "50ms"}


def _patch_markers(events: list[HistoryEvent]) -> int:
    return sum(1 for e in events if e.marker_recorded_event_attributes.marker_name == PATCH)


def _local_agent_runs(events: list[HistoryEvent]) -> int:
    return sum(1 for kind in local_activity_types(events) if kind == RUN_AGENT.name)


async def test_a_plan_runs_its_python_agents_and_their_reviews_locally(
    client: Client, task_queue: str
) -> None:
    """Two tasks in parallel, one reviewed in two stages and verified by two agents, and a
    task after both: eight agent runs, each a local activity; an agent declared remote runs as
    an activity task on the plan's queue. One patch marker; the plan replays from every task."""
    agents = GateAgents(local=True)
    registry = agents.registry()
    remote = PythonAgent(kind="python", callable="tests:remote", execution="remote")
    registry.register("remote", "python", remote)(_done)
    spec = plan(
        "plan-local-runs",
        {
            "id": "build",
            "agent": "coder",
            "review": {"reviewer": "reviewer"},
            "verify": {"verifiers": ["verifier-b", "verifier-c"]},
        },
        {"id": "docs", "agent": "worker"},
        {"id": "ship", "agent": "worker", "depends_on": ["build", "docs"]},
        {"id": "tell", "agent": "remote", "depends_on": ["ship"]},
    )
    async with build_worker(client, task_queue, registry):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
        history = await handle.fetch_history()
    assert state.status == PlanStatus.COMPLETED, state.summary
    assert [v.reviewer for r in task_of(state, "build").reviews for v in r.verdicts] == [
        "reviewer",
        "reviewer",
        "verifier-b",
        "verifier-c",
    ]
    events = list(history.events)
    assert _local_agent_runs(events) == 7, "build, two stages, two verifiers, docs, ship"
    remote_queue = agent_task_queue("remote", task_queue)
    assert list(_agent_tasks(events).values()) == [remote_queue], "the remote agent's run alone"
    assert _patch_markers(events) == 1, "the bundle's"
    await _replays_from_every_task(history)


async def _done(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return {"done": context.agent}


async def test_a_failing_local_agent_is_retried_and_keeps_its_failure_type(
    client: Client, task_queue: str
) -> None:
    spec = plan("plan-local-failure", {"id": "a", "agent": "fail", "retry": FAST_RETRY})
    async with build_worker(client, task_queue, PlanAgents(local=True).registry()):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
        history = await handle.fetch_history()
    (task,) = state.tasks
    assert task.state == TaskState.ERROR and state.status == PlanStatus.FAILED
    assert task.attempts == 3
    assert task.error is not None and task.error.type == "temporary_failure"
    assert task.error.message == "broken on attempt 3"
    events = list(history.events)
    assert _agent_tasks(events) == {} and _local_agent_runs(events) >= 1
    await _replays_from_every_task(history)


PLANS = 20
"""Plans a worker runs at once: their local runs then often outlive their workflow task, and
several end in one."""
FAN = 4


def _jittery_registry() -> AgentRegistry:
    """`step` answers after a few milliseconds, so parallel runs end close together; `remote`
    at once, as an activity task."""
    registry = AgentRegistry()
    remote = PythonAgent(kind="python", callable="tests:remote", execution="remote")
    registry.register("remote", "python", remote)(_done)

    @registry.register("step")
    async def step(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        await asyncio.sleep(random.uniform(0, 0.02))
        return {"step": event.event.type}

    return registry


async def test_plans_of_parallel_local_runs_replay_each_from_every_task(
    client: Client, task_queue: str
) -> None:
    """Many plans, each of four parallel local tasks, a remote task after each of them (the
    commands issued on each local result), a local task after the four and a remote one last,
    on one worker: each records one patch marker (a patch first asked by a remote run, after a
    local run whose marker landed in a later workflow task than the run began, would not
    replay) and replays; the first three from every task."""
    tasks = [{"id": f"t{n}", "agent": "step"} for n in range(FAN)]
    join = {"id": "join", "agent": "step", "depends_on": [each["id"] for each in tasks]}
    tell = {"id": "tell", "agent": "remote", "depends_on": ["join"]}
    each_told = [{"id": f"u{n}", "agent": "remote", "depends_on": [f"t{n}"]} for n in range(FAN)]
    specs = [
        plan(f"plan-parallel-local-{n}", *tasks, *each_told, join, tell, max_workers=FAN)
        for n in range(PLANS)
    ]
    async with build_worker(client, task_queue, _jittery_registry()):
        handles = [await start(client, task_queue, spec) for spec in specs]
        states = await asyncio.gather(*(outcome(handle) for handle in handles))
        histories: list[WorkflowHistory] = [await h.fetch_history() for h in handles]
    assert all(state.status == PlanStatus.COMPLETED for state in states)
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=data_converter())
    for history in histories:
        events = list(history.events)
        assert len(_agent_tasks(events)) == FAN + 1 and _local_agent_runs(events) == FAN + 1
        assert _patch_markers(events) == 1
        await replayer.replay_workflow(history)
    for history in histories[:3]:
        await _replays_from_every_task(history)


SLOW_S = 9.0
"""Longer than 80% of the plan's 10 s workflow task timeout: the worker then completes the
task the local run began in (a heartbeat), and the run's marker lands in a later one."""


async def test_a_local_run_outliving_its_workflow_task_then_a_remote_run_replays(
    client: Client, task_queue: str
) -> None:
    """A local run that outlives its workflow task, then a remote run on its outcome: the run's
    marker is recorded after the commands the plan issued on that outcome. The remote run's
    patches are in force since the plan began (`plan-patches-at-once`), so no patch marker is
    recorded there, and the plan replays from every task."""
    registry = _jittery_registry()

    @registry.register("slow")
    async def slow(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        await asyncio.sleep(SLOW_S)
        return {"slow": True}

    spec = plan(
        "plan-local-run-outlives-its-task",
        {"id": "slow", "agent": "slow"},
        {"id": "tell", "agent": "remote", "depends_on": ["slow"]},
    )
    async with build_worker(client, task_queue, registry):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
        history = await handle.fetch_history()
    assert state.status == PlanStatus.COMPLETED, state.summary
    events = list(history.events)
    assert _local_agent_runs(events) == 1 and len(_agent_tasks(events)) == 1
    assert _patch_markers(events) == 1
    await _replays_from_every_task(history)


async def test_a_task_added_while_the_plan_runs_runs_its_agent_locally(
    client: Client, task_queue: str
) -> None:
    """The plan asks where an added task's agent runs before the task joins it: a python agent
    no task named before runs locally, as the first tasks' do. (`hold`, declared remote, keeps
    the plan running without holding its workflow task.)"""
    registry = _jittery_registry()
    holding, release = asyncio.Event(), asyncio.Event()
    hold = PythonAgent(kind="python", callable="tests:hold", execution="remote")

    @registry.register("hold", "python", hold)
    async def hold_on(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        holding.set()
        await release.wait()
        return {}

    spec = plan("plan-added-task-runs-locally", {"id": "a", "agent": "hold"})
    async with build_worker(client, task_queue, registry):
        handle = await start(client, task_queue, spec)
        await asyncio.wait_for(holding.wait(), 30)
        await api.add_tasks(client, handle.id, [{"id": "b", "agent": "step"}])
        release.set()
        state = await outcome(handle)
        history = await handle.fetch_history()
    assert state.status == PlanStatus.COMPLETED, state.summary
    events = list(history.events)
    assert _local_agent_runs(events) == 1, "the added task's run"
    assert list(_agent_tasks(events).values()) == [agent_task_queue("hold", task_queue)]
    await _replays_from_every_task(history)
