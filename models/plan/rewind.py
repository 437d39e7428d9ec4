"""Which tasks a rewound copy of a plan takes from its original, and which it runs again.

A copy rewound to a task runs that task again and everything that depends on it, directly or
not; every other task that succeeded in the original is reused as it stood (its result handed
to its dependents as before), never run again. Without a task, every task that did not succeed
(failed, skipped, cancelled, or never reached) runs again. A plan copied with its whole
correlation (`coord rewind C`) is rewound to the point instead: the tasks that had succeeded
before it are reused (`plan_past`)."""

from collections.abc import Sequence

from coord.models.events.rewind import RewindOrigin
from coord.models.events.timeline import TimelineEntry
from coord.models.plan.spec import PlanRewind, PlanSpec, PlanState, ReusedTask, TaskState


def run_again(spec: PlanSpec, task_id: str) -> set[str]:
    """`task_id` and every task that depends on it, directly or through others."""
    dependents: dict[str, list[str]] = {task.id: [] for task in spec.tasks}
    for task in spec.tasks:
        for dependency in task.depends_on:
            dependents[dependency].append(task.id)
    found, waiting = {task_id}, [task_id]
    while waiting:
        for dependent in dependents[waiting.pop()]:
            if dependent not in found:
                found.add(dependent)
                waiting.append(dependent)
    return found


def reused_tasks(spec: PlanSpec, record: PlanState, to_task: str | None) -> list[ReusedTask]:
    """The original's succeeded tasks the copy takes as they stood, in the record's order.
    ValueError naming `--to-task` when it is no task of the plan."""
    if to_task is not None and to_task not in {task.id for task in spec.tasks}:
        raise ValueError(f"--to-task: {to_task!r} is no task of plan {spec.plan_id!r}")
    again = run_again(spec, to_task) if to_task is not None else set()
    return [
        ReusedTask(id=task.id, result=task.result, result_ref=task.result_ref)
        for task in record.tasks
        if task.state == TaskState.SUCCEEDED and task.id not in again
    ]


def plan_past(
    spec: PlanSpec, record: PlanState, before: Sequence[TimelineEntry], *, origin: RewindOrigin
) -> PlanRewind | None:
    """The plan's tasks that had succeeded before the point (their `TaskCompleted` among the
    rows before it: the log holds them all, the plan's record only its newest events), as the
    copy reuses them. None when every task had."""
    source = f"/plan/{spec.plan_id}"
    done = {
        str(row.payload.get("task"))
        for row in before
        if row.agent == source and row.event == "TaskCompleted"
    }
    reused = [
        ReusedTask(id=task.id, result=task.result, result_ref=task.result_ref)
        for task in record.tasks
        if task.state == TaskState.SUCCEEDED and task.id in done
    ]
    return None if len(reused) >= len(spec.tasks) else PlanRewind(of=origin, tasks=reused)
