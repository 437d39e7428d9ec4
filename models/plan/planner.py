"""Plans an agent writes, and plans that grow: the pure rules.

A planner is an agent asked, when its plan starts, to decompose the plan's goal (the
coordinator mode: split into subtasks, mark their dependencies, match an agent or a capability
to each). It is sent the goal, the agents the worker knows with their capabilities, and the
plan's team; its answer names the level of coordination it chose, why, and the task graph in
the shape a written spec has. The answer is agent output, so it is data: it is read here into a
`PlanSpec` by the spec's own validation (repeated ids, unknown dependencies or members, cycles,
caps), so a planned graph is held to exactly the rules a written one is.

A running plan takes more tasks by update (`extended_tasks`): the new tasks are validated with
the running graph as one spec, and may not wait for a task that already ended without
succeeding, nor join a plan that has ended or is stopping."""

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from coord.models.plan.spec import (
    ENDED_TASK_STATES,
    MAX_NOTES,
    ApprovalGate,
    Level,
    Planning,
    PlanSpec,
    PlanState,
    PlanStatus,
    PlanTask,
    TaskState,
)
from coord.models.wire.sizes import json_size
from coord.models.wire.specs import MAX_ITEMS, JsonObject, SpecError, parse_model

MAX_ANSWER = 256 * 1024
"""JSON bytes a planner's answer (or one request to add tasks) may take: a thousand tasks of a
few lines each. A larger answer is refused before it is read."""
ANSWER = "planner answer"
"""How a planner's answer is named in its problems (`planner answer: tasks[1].agent: ...`)."""
ADDED = "add_tasks"
"""How a request for more tasks is named in its problems."""
LEVELS_ASKED = {
    Level.DIRECT: "simple: answer the goal yourself in `answer`, no task",
    Level.SINGLE: "one clear subtask: one task for one agent",
    Level.TEAM: "agents that must talk to each other: tasks done by `team` members",
    Level.COORDINATOR: "three or more independent subtasks: a task graph (`depends_on`)",
}
"""What a planner asked to choose a level is told of each (the mode switch)."""


class PlannerAnswer(BaseModel):
    """What a planner answers: `{"level": ..., "why": ..., "tasks": [...], "team": {...}}`.
    The tasks and the team are read as a written spec's (`PlanSpec.tasks`, `PlanSpec.team`)."""

    model_config = ConfigDict(extra="forbid")

    level: Level = Level.COORDINATOR
    why: str = Field(default="", max_length=MAX_NOTES)
    tasks: list[JsonObject] = Field(default_factory=list, max_length=MAX_ITEMS)
    team: dict[str, JsonObject] = Field(default_factory=dict, max_length=MAX_ITEMS)
    answer: JsonObject | None = None
    """The direct level's answer to the goal (the plan's result; no task runs)."""


class AddTasks(BaseModel):
    """The `add_tasks` update: tasks in the shape of a spec's, added to the running graph."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[JsonObject] = Field(min_length=1, max_length=MAX_ITEMS)


class AddedTasks(BaseModel):
    """What the `add_tasks` update answers: the tasks added, and how many the plan has now."""

    added: list[str]
    total: int


def planner_request(
    spec: PlanSpec, catalogue: dict[str, list[str]]
) -> tuple[JsonObject, JsonObject]:
    """What the planner is sent: the goal (its event's payload, which an `llm` agent's prompt
    reads as `$goal`), and, as its inputs, the agents it may give tasks to with their
    capabilities (the worker's `catalogue` and the spec's inline agents), the team, and the
    levels to choose from when asked."""
    agents = {name: list(capabilities) for name, capabilities in catalogue.items()}
    for name, declaration in spec.agents.items():
        agents.setdefault(name, list(declaration.capabilities))
    payload: JsonObject = {"goal": spec.goal}
    inputs: JsonObject = {
        "agents": agents,
        "team": {
            name: member.model_dump(mode="json", exclude_defaults=True)
            for name, member in spec.team.items()
        },
    }
    if spec.planner is not None and spec.planner.choose_level:
        inputs["levels"] = {level.value: told for level, told in LEVELS_ASKED.items()}
    return payload, inputs


def planned_spec(spec: PlanSpec, data: object, now: datetime) -> tuple[PlanSpec, Planning]:
    """The spec the plan runs from its planner's answer (`data`), and the record of it. A
    SpecError says, on one line naming the field, why the answer is refused."""
    size = json_size(data)
    if size > MAX_ANSWER:
        raise SpecError(f"{ANSWER}: {size} bytes, more than the {MAX_ANSWER} a plan may take")
    answer = parse_model(PlannerAnswer, data, ANSWER)
    _check_level(spec, answer)
    tasks = [_gated(task, spec.approve_plan) for task in answer.tasks]
    document = spec.model_dump(mode="json", exclude={"tasks", "team"})
    team = {**spec.model_dump(mode="json")["team"], **answer.team}
    planned = parse_model(PlanSpec, {**document, "tasks": tasks, "team": team}, ANSWER)
    assert spec.planner is not None
    planning = Planning(
        planner=spec.planner.agent,
        goal=spec.goal,
        level=answer.level,
        why=answer.why,
        tasks=[task.id for task in planned.tasks],
        answer=answer.answer,
        at=now,
    )
    return planned, planning


def _check_level(spec: PlanSpec, answer: PlannerAnswer) -> None:
    """Each level's shape: the direct level answers without tasks, a single delegation is one
    task, a team's tasks are its members', a coordinator's is a graph of at least one task."""
    level, count = answer.level, len(answer.tasks)
    if level == Level.DIRECT:
        if count or answer.answer is None:
            raise SpecError(
                f"{ANSWER}: answer: the direct level answers the goal itself, in `answer`, "
                "with no `tasks`"
            )
        return
    if not count:
        raise SpecError(f"{ANSWER}: tasks: the {level.value} level needs at least one task")
    if level == Level.SINGLE and count != 1:
        raise SpecError(f"{ANSWER}: tasks: a single delegation is one task, not {count}")
    if level == Level.TEAM and not (spec.team or answer.team):
        raise SpecError(f"{ANSWER}: team: the team level needs a team whose members do the tasks")


def _gated(task: JsonObject, gate: bool | ApprovalGate) -> JsonObject:
    """A first task (one that waits for none) waits for a person's approval when the spec asks
    for the planned graph to be approved, with the spec's gate unless the planner gave one."""
    if gate is False or task.get("depends_on") or "approval" in task:
        return task
    approval = ApprovalGate() if gate is True else gate
    return {**task, "approval": approval.model_dump(mode="json", exclude_none=True)}


def planning_failed(spec: PlanSpec, problem: str, now: datetime) -> Planning:
    """The record of a planner whose answer was refused (or that gave none)."""
    agent = spec.planner.agent if spec.planner is not None else ""
    return Planning(planner=agent, goal=spec.goal, error=problem[:MAX_NOTES], at=now)


# --- Growing a running plan -------------------------------------------------------------------


def extended_tasks(spec: PlanSpec, state: PlanState, request: AddTasks) -> list[PlanTask]:
    """The tasks `request` adds to the running plan, validated with its graph as one spec (the
    spec's rules: ids unique across old and new, dependencies known, no cycle, caps). A
    SpecError names the field (`add_tasks: tasks[0].depends_on: ...`, counting the request's
    tasks) when the plan has ended or is stopping, when a task waits for one that already
    ended without succeeding, or when the spec's rules refuse the graph."""
    if state.status != PlanStatus.RUNNING:
        raise SpecError(f"{ADDED}: plan {spec.plan_id} has ended {state.status.value}")
    size = json_size(request.tasks)
    if size > MAX_ANSWER:
        raise SpecError(f"{ADDED}: tasks: {size} bytes, more than the {MAX_ANSWER} allowed")
    offset = len(spec.tasks)
    document = spec.model_dump(mode="json", exclude={"tasks"})
    written = [task.model_dump(mode="json", exclude_unset=True) for task in spec.tasks]
    try:
        grown = parse_model(PlanSpec, {**document, "tasks": written + request.tasks}, ADDED)
    except SpecError as error:
        raise SpecError(_renumbered(str(error), offset)) from None
    added = grown.tasks[offset:]
    _check_dependencies(state, added)
    return added


def _renumbered(message: str, offset: int) -> str:
    """A problem of the grown spec, its task indexes counted in the request (`tasks[i]` of
    the request is `tasks[offset + i]` of the grown spec)."""

    def renumber(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return f"tasks[{index - offset}]" if index >= offset else f"running task {index}"

    return re.sub(r"tasks\[(\d+)\]", renumber, message)


def _check_dependencies(state: PlanState, added: list[PlanTask]) -> None:
    """A new task may wait for a running or succeeded task, never for one that ended
    otherwise (it would be skipped at once)."""
    ended = {
        record.id: record.state
        for record in state.tasks
        if record.state in ENDED_TASK_STATES and record.state != TaskState.SUCCEEDED
    }
    for i, task in enumerate(added):
        for dependency in task.depends_on:
            if dependency in ended:
                raise SpecError(
                    f"{ADDED}: tasks[{i}].depends_on: {dependency!r} already ended "
                    f"{ended[dependency].value}; a new task cannot wait for it"
                )


def planning_line(planning: Planning) -> str:
    """One line for the UI and the terminal: who planned, at which level, and why."""
    if planning.error is not None:
        return f"Planner {planning.planner}: refused: {planning.error}"
    level = planning.level.value if planning.level is not None else "?"
    why = f" ({planning.why})" if planning.why else ""
    return f"Planner {planning.planner}: {level}{why}, {len(planning.tasks)} task(s)"
