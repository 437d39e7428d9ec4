"""A planner's answer read as a written spec is, and a running plan's growth: the pure rules,
without a server."""

from datetime import UTC, datetime
from typing import Any

import pytest

from coord.models.plan.model import PlanModel
from coord.models.plan.planner import (
    MAX_ANSWER,
    AddTasks,
    extended_tasks,
    planned_spec,
    planner_request,
    planning_line,
)
from coord.models.plan.spec import Level, PlanSpec, PlanStatus, TaskError, TaskState
from coord.models.wire.specs import MAX_ITEMS, SpecError

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def goal_spec(**fields: Any) -> PlanSpec:
    return PlanSpec.model_validate(
        {"plan_id": "p", "goal": "ship the feature", "planner": "planner", **fields}
    )


def graph(*tasks: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"level": "coordinator", "why": "three parts", "tasks": list(tasks), **fields}


def refusal(spec: PlanSpec, answer: object) -> str:
    with pytest.raises(SpecError) as raised:
        planned_spec(spec, answer, NOW)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_a_plan_needs_tasks_or_a_planner_with_a_goal() -> None:
    with pytest.raises(ValueError, match="tasks: a plan needs at least one task, or a `planner`"):
        PlanSpec.model_validate({"plan_id": "p"})
    with pytest.raises(ValueError, match="goal: a plan with a `planner` needs the goal"):
        PlanSpec.model_validate({"plan_id": "p", "planner": {"agent": "planner"}})
    with pytest.raises(ValueError, match="approve_plan: only a planned graph is approved"):
        PlanSpec.model_validate(
            {"plan_id": "p", "tasks": [{"id": "a", "agent": "w"}], "approve_plan": True}
        )
    spec = goal_spec()
    assert spec.planner is not None and spec.planner.agent == "planner"
    assert ("planner.agent", "planner") in spec.agents_named()


def test_the_planner_is_sent_the_goal_the_agents_and_the_levels_when_asked() -> None:
    spec = goal_spec(
        agents={"inline": {"kind": "shell", "argv": ["true"], "capabilities": ["sh"]}},
        team={"ann": {"role": "writer", "agent": "work"}},
    )
    payload, inputs = planner_request(spec, {"work": ["python"]})
    assert payload == {"goal": "ship the feature"}
    assert inputs["agents"] == {"work": ["python"], "inline": ["sh"]}
    assert inputs["team"] == {"ann": {"role": "writer", "agent": "work"}}
    assert "levels" not in inputs
    asked = goal_spec(planner={"agent": "planner", "choose_level": True})
    assert set(planner_request(asked, {})[1]["levels"]) == {level.value for level in Level}


def test_a_planned_graph_becomes_the_spec_and_its_record() -> None:
    answer = graph(
        {"id": "a", "agent": "work"},
        {"id": "b", "agent": "work", "depends_on": ["a"], "input": {"n": 1}},
    )
    planned, planning = planned_spec(goal_spec(max_workers=2), answer, NOW)
    assert [task.id for task in planned.tasks] == ["a", "b"]
    assert planned.max_workers == 2 and planned.goal == "ship the feature"
    assert planning.level == Level.COORDINATOR and planning.why == "three parts"
    assert planning.tasks == ["a", "b"] and planning.error is None
    assert planning_line(planning) == "Planner planner: coordinator (three parts), 2 task(s)"


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (
            graph(
                {"id": "a", "agent": "work", "depends_on": ["b"]},
                {"id": "b", "depends_on": ["a"], "agent": "work"},
            ),
            "planner answer: tasks: dependency cycle",
        ),
        (
            graph({"id": "a", "agent": "work", "depends_on": ["nope"]}),
            "planner answer: tasks[0].depends_on: 'nope' is not a task of this plan",
        ),
        (
            graph({"id": "a", "agent": "work"}, {"id": "a", "agent": "work"}),
            "planner answer: tasks[1].id: 'a' is repeated",
        ),
        (graph({"id": "a", "agent": "work", "colour": 1}), "planner answer: tasks[0].colour"),
        (graph({"id": "a", "member": "bob"}), "planner answer: tasks[0].member: 'bob'"),
        ({"level": "galaxy"}, "planner answer: level:"),
        ({"tasks": "all of them"}, "planner answer: tasks:"),
        ({"level": "single", "tasks": []}, "planner answer: tasks: the single level needs"),
        (
            {"level": "single", "tasks": [{"id": "a", "agent": "w"}, {"id": "b", "agent": "w"}]},
            "planner answer: tasks: a single delegation is one task, not 2",
        ),
        ({"level": "team", "tasks": [{"id": "a", "agent": "w"}]}, "planner answer: team:"),
        ({"level": "direct"}, "planner answer: answer: the direct level answers the goal"),
    ],
)
def test_an_invalid_answer_is_refused_naming_the_field(answer: object, problem: str) -> None:
    assert refusal(goal_spec(), answer).startswith(problem)


def test_an_answer_past_the_caps_is_refused() -> None:
    many = [{"id": f"t{i}", "agent": "work"} for i in range(MAX_ITEMS + 1)]
    assert refusal(goal_spec(), graph(*many)).startswith("planner answer: tasks:")
    huge = graph({"id": "a", "agent": "work", "input": {"text": "x" * MAX_ANSWER}})
    assert refusal(goal_spec(), huge).startswith("planner answer: ")
    assert "more than the" in refusal(goal_spec(), huge)


def test_the_direct_level_answers_without_tasks() -> None:
    answer = {"level": "direct", "why": "simple", "answer": {"text": "42"}}
    planned, planning = planned_spec(goal_spec(), answer, NOW)
    assert planned.tasks == [] and planning.answer == {"text": "42"}
    model = PlanModel.begin(planned, NOW)
    assert model.finished()
    assert model.finish(NOW).status == PlanStatus.COMPLETED


def test_a_team_answer_may_bring_its_members() -> None:
    answer = {
        "level": "team",
        "team": {"ann": {"role": "writer", "agent": "work"}},
        "tasks": [{"id": "draft", "member": "ann"}],
    }
    planned, _ = planned_spec(goal_spec(), answer, NOW)
    assert planned.agent_of(planned.tasks[0]) == "work"


def test_approve_plan_gates_the_first_tasks_unless_the_planner_gated_them() -> None:
    answer = graph(
        {"id": "a", "agent": "work"},
        {"id": "b", "agent": "work", "approval": {"timeout": "5m"}},
        {"id": "c", "agent": "work", "depends_on": ["a"]},
    )
    planned, _ = planned_spec(goal_spec(approve_plan={"timeout": "1h"}), answer, NOW)
    gates = {task.id: task.approval for task in planned.tasks}
    assert gates["a"] is not None and gates["a"].timeout.total_seconds() == 3600
    assert gates["b"] is not None and gates["b"].timeout.total_seconds() == 300
    assert gates["c"] is None
    unasked, _ = planned_spec(goal_spec(), answer, NOW)
    assert unasked.task("a").approval is None


# --- Growing a running plan ----------------------------------------------------------------


def running(*tasks: dict[str, Any]) -> PlanModel:
    spec = PlanSpec.model_validate({"plan_id": "p", "tasks": list(tasks)})
    return PlanModel.begin(spec, NOW)


def grow(model: PlanModel, *tasks: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as raised:
        extended_tasks(model.spec, model.state, AddTasks(tasks=list(tasks)))
    return str(raised.value)


def test_added_tasks_join_the_graph_and_start_when_their_dependencies_have_succeeded() -> None:
    model = running({"id": "a", "agent": "work"}, {"id": "b", "agent": "work", "depends_on": ["a"]})
    assert [task.id for task in model.graph.take_startable()] == ["a"]
    added = extended_tasks(
        model.spec,
        model.state,
        AddTasks(
            tasks=[{"id": "c", "agent": "work", "depends_on": ["a"]}, {"id": "d", "agent": "w"}]
        ),
    )
    model.add_tasks(added, NOW)
    assert [task.id for task in model.graph.take_startable()] == ["d"]
    assert model.record("c").state == TaskState.PENDING and not model.finished()
    model.graph.task_succeeded("a", NOW)
    assert [task.id for task in model.graph.take_startable()] == ["b", "c"]


def test_added_tasks_are_refused_naming_the_field() -> None:
    model = running({"id": "a", "agent": "work"}, {"id": "b", "agent": "work"})
    cycle = grow(
        model,
        {"id": "c", "agent": "w", "depends_on": ["d"]},
        {"id": "d", "agent": "w", "depends_on": ["c"]},
    )
    assert cycle.startswith("add_tasks: tasks: dependency cycle")
    assert grow(model, {"id": "a", "agent": "w"}) == (
        "add_tasks: tasks[0].id: 'a' is repeated; task ids must be unique"
    )
    unknown = grow(model, {"id": "c", "agent": "w"}, {"id": "d", "agent": "w", "depends_on": ["x"]})
    assert unknown == "add_tasks: tasks[1].depends_on: 'x' is not a task of this plan"
    assert grow(model, {"id": "c"}).startswith("add_tasks: tasks[0]")
    many = [{"id": f"t{i}", "agent": "w"} for i in range(MAX_ITEMS - 1)]
    assert grow(model, *many).startswith("add_tasks: tasks:")


def test_a_task_may_not_wait_for_one_that_failed_nor_join_an_ended_plan() -> None:
    model = running({"id": "a", "agent": "work"}, {"id": "b", "agent": "work", "depends_on": ["a"]})
    model.graph.take_startable()
    model.graph.task_error("a", NOW, TaskError(type="temporary_failure", message="broken"))
    failed = grow(model, {"id": "c", "agent": "w", "depends_on": ["a"]})
    assert (
        failed
        == "add_tasks: tasks[0].depends_on: 'a' already ended error; a new task cannot wait for it"
    )
    skipped = grow(model, {"id": "c", "agent": "w", "depends_on": ["b"]})
    assert "'b' already ended skipped" in skipped
    model.finish(NOW)
    assert grow(model, {"id": "c", "agent": "w"}) == "add_tasks: plan p has ended failed"
