"""Which tasks a rewound copy of a plan takes from its original, and which it runs again.

A copy rewound to a task runs that task again and everything that depends on it, directly or
not; every other task that succeeded in the original is reused as it stood (its result handed
to its dependents as before), never run again. Without a task, every task that did not succeed
(failed, skipped, cancelled, or never reached) runs again."""

from coord.models.plan.spec import PlanSpec, PlanState, ReusedTask, TaskState


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
