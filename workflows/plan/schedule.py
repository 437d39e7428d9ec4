"""The loop that starts a plan's tasks (`TaskSchedule`): each task as soon as its dependencies
have succeeded, the worker slots granted once the tasks started have asked for theirs, until
every task has ended or the plan stops; and the stop, which cancels the tasks still running.
What may start and who gets a slot are the model's (`PlanModel.graph`, `WorkerSlots`); one
task's lifecycle is `GatedTaskRun` (coord.workflows.plan.gates)."""

import asyncio
from collections.abc import Callable
from functools import partial

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.plan.spec import PlanTask
    from coord.workflows._runtime.agent_runs import AgentPicker, Placements, outcomes_landed
    from coord.workflows._runtime.fan_out import FanOut
    from coord.workflows.plan.gates import GatedTaskRun
    from coord.workflows.plan.scratchpad import Scratchpad
    from coord.workflows.plan.task import WorkerSlots
    from coord.workflows.plan.team import TeamRoom


class TaskSchedule:
    """A plan's running tasks, started and stopped; made once the plan's graph is known."""

    def __init__(
        self,
        slots: WorkerSlots,
        scratchpad: Scratchpad,
        *,
        changed: Callable[[], None],
        fan_out: FanOut,
        team: TeamRoom,
        placements: Placements | None = None,
    ) -> None:
        self._model, self._slots, self._scratchpad = slots.model, slots, scratchpad
        self._gated = partial(
            GatedTaskRun,
            changed=changed,
            fan_out=fan_out,
            picker=AgentPicker(),
            team=team,
            placements=placements,
        )
        """A task's run: its changes republished, within the plan's budget per workflow task,
        its agents picked together with the rest of its wave, its messages to the team, its
        runs placed where the plan's worker said (`Placements`)."""
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._bug: Exception | None = None

    async def run(self) -> None:
        """Starts each task once its dependencies have succeeded, and grants the worker slots
        once the tasks it started have asked for theirs, until every task has ended or the
        plan stops (`fail_fast`)."""
        model, graph = self._model, self._model.graph

        def moved() -> bool:
            stopped = graph.stopping is not None or self._bug is not None
            startable = graph.has_startable() or model.finished() or stopped
            return startable or self._slots.grantable()

        while True:
            launched = graph.take_startable()
            for task in launched:
                self._runs[task.id] = asyncio.create_task(self._run_task(task))
            if not launched:
                self._slots.grant()
            if self._bug is not None:
                raise self._bug
            if model.finished() or graph.stopping is not None:
                return
            await workflow.wait_condition(moved)

    async def _run_task(self, task: PlanTask) -> None:
        """One task's lifecycle. It records every outcome itself; an exception out of it is a
        bug, raised by the run so the workflow task fails (visible, retried once a fixed
        worker runs it) instead of the plan waiting forever for a task that cannot end."""
        try:
            await self._gated(self._slots, task, workflow.info().workflow_id).run()
        except Exception as error:
            self._bug = error
            return
        self._scratchpad.task_ended(self._model.record(task.id))

    async def stop(self, reason: str) -> None:
        """Cancels the running tasks (their activities end `cancelled`, or with the outcome
        they reached first) and every task still waiting. An outcome that arrived in the same
        workflow task as the cancel is recorded first, never replaced by `cancelled`."""
        await outcomes_landed()
        self._model.stop(reason)
        running = [run for run in self._runs.values() if not run.done()]
        for run in running:
            run.cancel()
        await asyncio.gather(*running)
        self._model.cancel_waiting(workflow.now())
