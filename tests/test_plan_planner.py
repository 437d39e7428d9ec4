"""Plans a planner writes, and plans that grow, on the real dev server: a python planner's graph
run to completion, an `llm` planner against the local chat-completions server, a graph refused
naming its field (no task runs, no workflow task fails), tasks added to a running plan (and a
cycle refused), and `coord run GOAL --planner` as a user types it."""

import asyncio
import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from coord.activities.kinds import load_agents
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentFn, AgentRegistry
from coord.models.mesh.config import PythonAgent
from coord.models.plan.spec import (
    ApprovalRequest,
    Level,
    PlanSpec,
    PlanState,
    PlanStatus,
    TaskState,
)
from coord.models.wire.contract import FailureType, failure_message, failure_type_of
from coord.starter import api
from coord.starter.exits import ExitCode
from coord.worker import build_worker
from tests import planners
from tests.chat_server import chat_server, completion
from tests.helpers import eventually, task_failures
from tests.workers import COORD, run, server_env

KEY_ENV = "PLANNER_TEST_KEY"
FAST = {"max_retries": 0}


def goal_plan(planner: str, **fields: Any) -> PlanSpec:
    return PlanSpec.model_validate(
        {
            "plan_id": f"planned-{uuid.uuid4().hex[:8]}",
            "goal": "a guide to the plan room",
            "planner": {"agent": planner, "retry": FAST},
            **fields,
        }
    )


REMOTE = PythonAgent(kind="python", callable="tests.planners:work", execution="remote")
"""The declaration of `agents(remote=...)`: activity tasks. An agent held until the test
releases it, run locally, would hold the plan's workflow task, and each update or query would
wait until the worker hands the task back (8 s in)."""


def agents(remote: Mapping[str, AgentFn] | None = None, **more: AgentFn) -> AgentRegistry:
    """`work`, and the agents given: `remote` ones as activity tasks, the others locally."""
    registry = AgentRegistry()
    registry.register("work")(planners.work)
    for name, agent in more.items():
        registry.register(name)(agent)
    for name, agent in (remote or {}).items():
        registry.register(name, "python", REMOTE)(agent)
    return registry


async def planned_outcome(
    client: Client, task_queue: str, spec: PlanSpec, registry: AgentRegistry
) -> PlanState:
    async with build_worker(client, task_queue, registry):
        handle = await api.start_plan(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
        assert await task_failures(handle) == []
    return state


async def test_a_python_planner_writes_the_graph_that_runs_to_completion(
    client: Client, task_queue: str
) -> None:
    spec = goal_plan("planner")
    async with build_worker(client, task_queue, agents(planner=planners.graph)):
        handle = await api.start_plan(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert state.status == PlanStatus.COMPLETED, state.summary
    assert [(t.id, t.state) for t in state.tasks] == [
        ("research", TaskState.SUCCEEDED),
        ("write", TaskState.SUCCEEDED),
        ("review", TaskState.SUCCEEDED),
    ]
    planning = state.planning
    assert planning is not None and planning.level == Level.COORDINATOR
    assert planning.why == "three steps, each after the one before"
    assert planning.tasks == ["research", "write", "review"]
    research = state.tasks[0].result
    assert research is not None and research["goal"] == "a guide to the plan room"
    assert {"planner", "work"} <= set(research["agents"]), "the planner was told the agents"
    assert state.tasks[1].result is not None and state.tasks[1].result["given"] == ["research"]
    assert "**Planned:** Planner planner: coordinator (three steps" in metadata.current_details
    description = await handle.describe()
    assert await description.static_summary() == (
        f"Plan {spec.plan_id} ({spec.plan_id}): planned by planner, at most 5 at once"
    )
    assert "- planned by: planner" in (await description.static_details() or "")


async def test_a_planned_graph_waits_for_a_person_when_the_spec_asks(
    client: Client, task_queue: str
) -> None:
    spec = goal_plan("planner", approve_plan=True)
    async with build_worker(client, task_queue, agents(planner=planners.graph)):
        handle = await api.start_plan(client, spec, queue=task_queue)

        async def waiting() -> bool:
            progress = await api.plan_progress(client, spec.plan_id)
            return any(wait.startswith("approval of research") for wait in progress.waiting_for)

        await eventually(waiting)
        request = ApprovalRequest(task="research", reason="the plan reads well")
        decided = await api.approve_task(client, spec.plan_id, request)
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
    assert decided.approved
    assert state.status == PlanStatus.COMPLETED
    assert (
        state.tasks[0].approval is not None
        and state.tasks[0].approval.reason == "the plan reads well"
    )
    assert [t.approval for t in state.tasks[1:]] == [None, None], "only the first task is gated"


async def test_an_llm_planner_writes_the_graph_that_runs(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-" + uuid.uuid4().hex)
    answer = {
        "level": "single",
        "why": "one clear subtask",
        "tasks": [{"id": "draft", "agent": "work", "input": {"words": 200}}],
    }
    with chat_server(completion(json.dumps(answer))) as chat:
        declared = {
            "kind": "llm",
            "base_url": chat.url,
            "model": "test-model",
            "api_key_env": KEY_ENV,
            "prompt": "Plan the goal: $goal. Agents: $agents",
        }
        path = Path(f"/tmp/planner-{uuid.uuid4().hex[:8]}.yaml")
        path.write_text(
            yaml.safe_dump({"worker": {"secrets": [KEY_ENV]}, "agents": {"planner": declared}})
        )
        try:
            registry = load_agents(path, agents())
            state = await planned_outcome(client, task_queue, goal_plan("planner"), registry)
        finally:
            path.unlink()
    assert state.status == PlanStatus.COMPLETED, state.summary
    assert state.planning is not None and state.planning.level == Level.SINGLE
    assert [(t.id, t.state, t.agent) for t in state.tasks] == [
        ("draft", TaskState.SUCCEEDED, "work")
    ]
    assert state.tokens.total == 17, "the planner's tokens count to the plan"
    [asked] = chat.received
    prompt = asked.body["messages"][-1]["content"]
    assert prompt.startswith("Plan the goal: a guide to the plan room. Agents: ")
    assert '"work"' in prompt


async def test_a_graph_naming_an_unknown_agent_is_refused_naming_the_field(
    client: Client, task_queue: str
) -> None:
    spec = goal_plan("planner")
    async with build_worker(client, task_queue, agents(planner=planners.ghost)):
        handle = await api.start_plan(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
        failures = await task_failures(handle)
        with pytest.raises(WorkflowFailureError) as ended:
            await handle.result()
    assert failures == [], "the refusal is recorded, no workflow task failed"
    assert state.status == PlanStatus.FAILED and state.tasks == []
    assert state.planning is not None and state.planning.error is not None
    assert state.planning.error.startswith("planner answer: tasks[1].agent: ")
    assert "ghost" in state.planning.error and "\n" not in state.planning.error
    assert state.summary == f"planning failed: {state.planning.error}"
    assert failure_type_of(ended.value.cause) == FailureType.PLANNING_FAILED
    assert failure_message(ended.value) == f"planning_failed: {state.planning.error}"


class Held:
    """`hold` runs until the test releases it."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.started = asyncio.Event()

    async def hold(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        self.started.set()
        while not self.released.is_set():
            context.heartbeat()
            await asyncio.sleep(0.05)
        return {"held": True}


async def test_tasks_added_to_a_running_plan_run_and_a_cycle_is_refused(
    client: Client, task_queue: str
) -> None:
    held = Held()
    spec = PlanSpec.model_validate(
        {"plan_id": f"grow-{uuid.uuid4().hex[:8]}", "tasks": [{"id": "a", "agent": "hold"}]}
    )
    async with build_worker(client, task_queue, agents(remote={"hold": held.hold})):
        handle = await api.start_plan(client, spec, queue=task_queue)
        await asyncio.wait_for(held.started.wait(), 30)
        added = await api.add_tasks(
            client,
            spec.plan_id,
            [{"id": "b", "agent": "work", "depends_on": ["a"]}, {"id": "c", "agent": "work"}],
        )
        assert (added.added, added.total) == (["b", "c"], 3)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await api.add_tasks(
                client,
                spec.plan_id,
                [
                    {"id": "d", "agent": "work", "depends_on": ["e"]},
                    {"id": "e", "agent": "work", "depends_on": ["d"]},
                ],
            )

        async def c_done() -> bool:
            record = await api.plan_state(client, spec.plan_id)
            return record.tasks[2].state == TaskState.SUCCEEDED

        await eventually(c_done)
        held.released.set()
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
        assert await task_failures(handle) == []
    assert (
        failure_message(refused.value)
        == "invalid_tasks: add_tasks: tasks: dependency cycle d -> e -> d; a plan must be acyclic"
    )
    assert state.status == PlanStatus.COMPLETED
    assert [(t.id, t.state) for t in state.tasks] == [
        ("a", TaskState.SUCCEEDED),
        ("b", TaskState.SUCCEEDED),
        ("c", TaskState.SUCCEEDED),
    ]
    assert state.tasks[1].result is not None and state.tasks[1].result["given"] == ["a"]


async def test_tasks_sent_while_the_planner_plans_wait_for_its_graph(
    client: Client, task_queue: str
) -> None:
    thinking = Held()

    async def slow(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        await thinking.hold(event, context)
        return await planners.graph(event, context)

    spec = goal_plan("planner")
    async with build_worker(client, task_queue, agents(planner=slow)):
        handle = await api.start_plan(client, spec, queue=task_queue)
        await asyncio.wait_for(thinking.started.wait(), 30)
        more = [{"id": "publish", "agent": "work", "depends_on": ["review"]}]
        adding = asyncio.create_task(api.add_tasks(client, spec.plan_id, more))
        await eventually(lambda: _accepted(handle))
        assert not adding.done(), "the update waits for the planner's graph"
        thinking.released.set()
        added = await asyncio.wait_for(adding, 30)
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
    assert (added.added, added.total) == (["publish"], 4)
    assert [t.id for t in state.tasks] == ["research", "write", "review", "publish"]
    assert state.status == PlanStatus.COMPLETED
    assert state.tasks[3].result is not None and state.tasks[3].result["given"] == ["review"]


async def test_a_plan_cancelled_while_its_planner_plans_ends_cancelled(
    client: Client, task_queue: str
) -> None:
    thinking = Held()
    spec = goal_plan("planner")
    async with build_worker(client, task_queue, agents(planner=thinking.hold)):
        handle = await api.start_plan(client, spec, queue=task_queue)
        await asyncio.wait_for(thinking.started.wait(), 30)
        await api.cancel_plan(client, spec.plan_id)
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
        assert await task_failures(handle) == []
    assert state.status == PlanStatus.CANCELLED and state.tasks == []
    assert state.planning is None


async def test_tasks_waiting_for_the_planner_are_refused_when_the_plan_is_cancelled(
    client: Client, task_queue: str
) -> None:
    """Tasks sent while the planner plans wait for its graph; the plan is cancelled meanwhile:
    the update is answered (refused: the plan takes no new tasks), never left running while the
    plan closes under it (the server would abort it, telling its caller nothing)."""
    thinking = Held()
    spec = goal_plan("planner")
    async with build_worker(client, task_queue, agents(planner=thinking.hold)):
        handle = await api.start_plan(client, spec, queue=task_queue)
        await asyncio.wait_for(thinking.started.wait(), 30)
        more = [{"id": "publish", "agent": "work"}]
        adding = asyncio.create_task(api.add_tasks(client, spec.plan_id, more))
        await eventually(lambda: _accepted(handle))
        await api.cancel_plan(client, spec.plan_id)
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
        refused = await asyncio.wait_for(asyncio.gather(adding, return_exceptions=True), 30)
        assert await task_failures(handle) == []
        events = [event.event_type async for event in handle.fetch_history_events()]
    last_task = len(events) - 1 - events[::-1].index(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    assert {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    } <= set(events[last_task:]), "the answer and the cancel in one workflow task"
    (error,) = refused
    assert isinstance(error, WorkflowUpdateFailedError), repr(error)
    cause = error.cause
    assert isinstance(cause, ApplicationError) and cause.type == FailureType.INVALID_TASKS
    assert "takes no new tasks" in cause.message
    assert state.status == PlanStatus.CANCELLED and state.tasks == []


async def _accepted(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the plan has accepted an update (its history says so)."""
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    return accepted in [event.event_type async for event in handle.fetch_history_events()]


async def test_tasks_are_refused_once_the_plan_has_ended(client: Client, task_queue: str) -> None:
    spec = PlanSpec.model_validate(
        {"plan_id": f"ended-{uuid.uuid4().hex[:8]}", "tasks": [{"id": "a", "agent": "work"}]}
    )
    async with build_worker(client, task_queue, agents()):
        handle = await api.start_plan(client, spec, queue=task_queue)
        await asyncio.wait_for(api.plan_outcome(handle), 60)
        with pytest.raises(api.Conflict) as refused:
            await api.add_tasks(client, spec.plan_id, [{"id": "b", "agent": "work"}])
    assert "no task was added" in str(refused.value)


def agents_file(folder: Path) -> Path:
    path = folder / "agents.yaml"
    declared = {
        "planner": {"kind": "python", "callable": "tests.planners:choose"},
        "work": {"kind": "python", "callable": "tests.planners:work"},
    }
    path.write_text(yaml.safe_dump({"agents": declared}))
    return path


async def test_coord_run_asks_the_planner_for_the_level_and_runs_it(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = agents_file(tmp_path)
    env = {**server_env(dev_env, task_queue), "COORD_AGENTS": str(path), "COORD_DEMO_AGENTS": ""}
    async with build_worker(client, task_queue, load_agents(path, AgentRegistry())):
        code, out, err = await run(
            COORD,
            "run",
            "docs and tests and a release note",
            "--planner",
            "planner",
            "--json",
            env=env,
        )
        assert code == 0, err
        graph = PlanState.model_validate_json(out.splitlines()[-1])
        code, out, err = await run(
            COORD,
            "run",
            "what is a plan",
            "--planner",
            "planner",
            "--id",
            f"d-{uuid.uuid4().hex[:6]}",
            env=env,
        )
        assert code == 0, err
        code, _, unknown = await run(COORD, "run", "x", "--planner", "nobody", env=env)
    assert graph.planning is not None and graph.planning.level == Level.COORDINATOR
    assert graph.planning.why == "3 independent parts"
    assert [t.state for t in graph.tasks] == [TaskState.SUCCEEDED] * 3
    assert "Planner planner: direct (one simple question), 0 task(s)" in out
    assert '"text": "WHAT IS A PLAN"' in out
    assert code == ExitCode.REFUSED
    assert "run: planner.agent: " in unknown and "nobody" in unknown
