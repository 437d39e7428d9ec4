"""One plan task's lifecycle, inside the `TaskGraph` workflow: from the moment its dependencies
have all succeeded to its end in the record.

v1 is a plain agent run: `ready`, wait for a worker slot, `running` (the `run_agent` activity
with the task's retry policy and timeout, id `{task}/run/{round}`), then `succeeded`, or
`failed -> error` once Temporal's retries are spent. A cancel (of the plan, or by `fail_fast`)
while it waits or runs ends it `cancelled`.

Extension points (for the gates):
- `before_run()`: runs before the task asks for its first slot (approval waits here); return
  False after recording why the task ended (`PlanGraph.task_error`).
- `after_run(result, round)`: runs after a successful run of round `round`, before the task is
  recorded `succeeded` (reviews and verification go here); return False after recording why it
  ended. A fix round calls `run_agent(round + 1, extra_inputs)` again.
- `slotted(key, start)`: every other agent activity (a review, a verifier) runs through it, so
  it takes one of the plan's worker slots like a run does.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from coord.models.mesh.agents import AgentRequest, AgentResult
    from coord.models.mesh.assignment import Assignment
    from coord.models.mesh.attempts import attempt_times
    from coord.models.mesh.lifecycle import RunFailure
    from coord.models.mesh.runs import RunDetour
    from coord.models.mesh.usage import TokenMeter
    from coord.models.plan.model import PlanModel
    from coord.models.plan.spec import Dispatch, PlanTask, TaskError, run_activity_id
    from coord.models.plan.votes import task_vote, vote_ended
    from coord.models.vote.spec import VoteState
    from coord.models.wire.contract import FailureType
    from coord.models.wire.durations import format_duration
    from coord.models.wire.sizes import json_size
    from coord.models.wire.specs import SpecError
    from coord.models.wire.versions import (
        SCOPED_VOTE_ID_PATCH,
        UNSENT_RUN_PATCH,
    )
    from coord.workflows._runtime.agent_runs import (
        AgentPicker,
        Placements,
        declared_settings,
        start_agent_run,
    )
    from coord.workflows._runtime.child_votes import VOTE_FAILED, hold_vote, vote_failure
    from coord.workflows._runtime.common import attempts, reported, task_error
    from coord.workflows._runtime.fan_out import FanOut
    from coord.workflows._runtime.patches import patched
    from coord.workflows.plan.team import TeamRoom

AgentActivity = asyncio.Task[AgentResult]
T = TypeVar("T")


class WorkerSlots:
    """The plan's worker slots as its agent activities wait for them (`SlotQueue` decides who
    gets one). A condition per waiting request is re-checked at every workflow step, which
    cost a 200-task plan thousands of checks; so the plan's own loop grants the slots (one
    condition, `grantable`) and resolves each granted request's future, in rank order.
    `by_the_plan` is False for runs recorded before (the un-patched way)."""

    def __init__(self, model: PlanModel, *, by_the_plan: bool) -> None:
        self.model = model
        self.by_the_plan = by_the_plan
        self._waiting: dict[str, asyncio.Future[None]] = {}

    async def acquire(self, key: str, task_id: str) -> None:
        """Asks for a slot for the activity `key` and waits until it is granted."""
        self.model.request_slot(key, task_id)
        if not self.by_the_plan:
            await workflow.wait_condition(lambda: self.model.holds_slot(key))
            return
        granted = asyncio.get_running_loop().create_future()
        self._waiting[key] = granted
        try:
            await granted
        finally:
            del self._waiting[key]

    def grantable(self) -> bool:
        return self.by_the_plan and self.model.grantable()

    def grant(self) -> None:
        """Free slots to the requests ranked first; each one's activity starts next."""
        if not self.by_the_plan:
            return
        for key in self.model.slots.grant():
            granted = self._waiting[key]
            if not granted.done():
                granted.set_result(None)


class TaskRun:
    """One task's run through the states; the workflow starts one per task and awaits it."""

    def __init__(
        self,
        slots: WorkerSlots,
        task: PlanTask,
        workflow_id: str,
        changed: Callable[[], None],
        fan_out: FanOut,
        picker: AgentPicker | None = None,
        team: TeamRoom | None = None,
        placements: Placements | None = None,
    ) -> None:
        self.slots = slots
        self.picker = picker or AgentPicker()
        """Shared by the plan's tasks, so the picks of one wave are made together."""
        self.model = slots.model
        self.graph = slots.model.graph
        self.runs = slots.model.runs
        self.task = task
        self.workflow_id = workflow_id
        self.changed = changed
        """Called after each change of the record: the workflow republishes its details."""
        self.fan_out = fan_out
        """The plan's budget per workflow task, which every agent run and vote it starts
        waits for."""
        self.team = team
        """Where the messages its runs send go (none: they are ignored)."""
        self.placements = placements
        """Where its agents run (local activities for the short in-process agents); none:
        each on its own queue, as runs recorded before PLAN_LOCAL_RUNS_PATCH."""

    async def run(self) -> None:
        """The task to its end; never raises (a cancel is recorded, not propagated)."""
        try:
            if not await self.before_run() or not await self.message_came():
                return
            self.graph.task_ready(self.task.id, workflow.now())
            self.changed()
            if await self.do_work():
                self.graph.task_succeeded(self.task.id, workflow.now())
        except asyncio.CancelledError:
            reason = self.model.stopping or "cancelled"
            self.graph.task_cancelled(self.task.id, workflow.now(), reason)
        self.changed()

    async def do_work(self) -> bool:
        """The task's work, True when it succeeded: its vote, or its agent's run and gates."""
        if self.task.vote is not None:
            return await self.run_vote()
        result = await self.run_agent(1)
        return result is not None and await self.after_run(result, 1)

    async def before_run(self) -> bool:
        """v1: nothing to wait for."""
        return True

    async def message_came(self) -> bool:
        """A member's task that waits for a message (`wait_for_message`) waits for one to its
        member, before it takes a slot; none in time ends it `no_message`."""
        wait, member = self.task.wait_for_message, self.task.member
        if wait is None or member is None:
            return True
        post = self.model.state.messages
        post.waiting[self.task.id] = member
        self.changed()
        try:
            await workflow.wait_condition(lambda: post.has_mail(member), timeout=wait)
        except TimeoutError:
            message = f"no message came to {member} within {format_duration(wait)}"
            error = TaskError(type=FailureType.NO_MESSAGE, message=message)
            self.graph.task_error(self.task.id, workflow.now(), error)
            return False
        finally:
            del post.waiting[self.task.id]
        return True

    async def after_run(self, result: AgentResult, round: int) -> bool:
        """v1: a successful run is the task's success."""
        return True

    async def run_agent(
        self, round: int, extra_inputs: dict[str, Any] | None = None
    ) -> AgentResult | None:
        """One round of the task's agent run under a slot; None when it failed for good (then
        recorded `failed -> error`, its dependents skipped)."""
        task = self.task
        retry_policy = task.retry.to_retry_policy()

        async def start() -> AgentResult:
            await self.assign()
            request = self.model.requests.agent_request(task, round, self.workflow_id, extra_inputs)
            await self.fan_out.room(json_size(request))
            self.runs.run_started(task.id, workflow.now(), round)
            self.changed()
            summary = f"{task.id}: {task.summary or request.agent}"
            activity_id = run_activity_id(task.id, round)
            return await self.start_agent(request, activity_id, summary, own=True)

        try:
            result = await self.slotted(run_activity_id(task.id, round), start)
        except asyncio.CancelledError as cancelled:
            if never_scheduled(cancelled) and patched(UNSENT_RUN_PATCH):
                self.runs.run_unsent(task.id, round)
            raise
        except ActivityError as error:
            self.runs.run_failed(task.id, workflow.now(), run_failure(error, retry_policy))
            return None
        self.runs.run_succeeded(task.id, workflow.now(), result)
        if self.team is not None:
            self.team.ran(task, result)
        return result

    async def run_vote(self) -> bool:
        """The task's vote: a child `Vote` workflow under one worker slot, cancelled with the
        plan (and with a plan that is closed without it). Decided is success, its record the
        task's result; rejected, no quorum, or a vote that failed or was cancelled on its own
        (`coord vote cancel`) is the task's error, its dependents skipped."""
        try:
            vote = task_vote(self.model, self.task, scoped=patched(SCOPED_VOTE_ID_PATCH))
        except SpecError as error:
            invalid = TaskError(type=FailureType.INVALID_PAYLOAD, message=str(error))
            self.graph.task_error(self.task.id, workflow.now(), invalid)
            return False

        async def start() -> VoteState:
            await self.fan_out.room(json_size(vote))
            self.runs.run_started(self.task.id, workflow.now())
            self.changed()
            opened_by = {"causation_id": self.model.latest_event(self.task.id)}
            return await hold_vote(vote.model_copy(update=opened_by), self.task.id)

        try:
            outcome = await self.slotted(vote.workflow_id, start)
        except VOTE_FAILED as error:
            if is_cancelled_exception(error) and self.model.stopping is not None:
                raise asyncio.CancelledError from error
            kind, message = vote_failure(error)
            failed = RunFailure(type=kind, message=message)
            self.runs.run_failed(self.task.id, workflow.now(), failed)
            return False
        return vote_ended(self.model, self.task.id, workflow.now(), outcome)

    async def assign(self) -> None:
        """A task naming capabilities gets its agent picked once, when its first run has a
        slot (so the load read is current), together with the other tasks of its wave (so they
        spread); its fix rounds go back to the same agent."""
        if self.model.record(self.task.id).assignment is not None:
            return
        assignment = await self.picker.pick(self.task.route, self.task.id)
        if assignment is not None:
            self.runs.task_assigned(self.task.id, assignment)
            self.changed()

    def start_agent(
        self, request: AgentRequest, activity_id: str, summary: str, *, own: bool = False
    ) -> AgentActivity:
        """A `run_agent` activity of this task (its run, `own`, or a review, a verifier) with
        the task's timeouts and retry policy; the task's own run may go to the next capable
        agent or its fallback when its agent cannot serve it."""
        task = self.task
        settings = declared_settings(
            task,
            summary,
            cancellation=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            activity_id=activity_id,
            agent_queue=self.model.spec.dispatch == Dispatch.AGENT_QUEUES,
            route=task.route if own else None,
            fallback=task.fallback if own else None,
            inline_agents=self.model.spec.agents,
            room=self.fan_out.room,
            tokens=TokenMeter(self.model.state.tokens, self.model.spec.budget),
            placements=self.placements,
        )
        return start_agent_run(request, settings, self.detoured)

    def detoured(self, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run of this task that waited for its agent or went elsewhere: in its record."""
        self.runs.task_detoured(self.task.id, detour, assignment)
        self.changed()

    async def slotted(self, key: str, start: Callable[[], Awaitable[T]]) -> T:
        """Waits for a worker slot, starts the activity or child (`start`, once the slot is
        granted), and gives the slot back when it closes, however it closes. A cancelled
        activity raises CancelledError."""
        if self.model.stopping is not None:
            raise asyncio.CancelledError
        try:
            await self.slots.acquire(key, self.task.id)
            return await start()
        except ActivityError as error:
            if is_cancelled_exception(error):
                raise asyncio.CancelledError from error
            raise
        finally:
            self.model.slots.release(key)


def never_scheduled(cancelled: asyncio.CancelledError) -> bool:
    """Whether the cancel came from an activity cancelled before the server scheduled it."""
    cause = cancelled.__cause__
    return isinstance(cause, ActivityError) and cause.scheduled_event_id == 0


def run_failure(error: ActivityError, retry_policy: RetryPolicy) -> RunFailure:
    """How a task's run failed for good (the failure type, the agent's own words), the
    attempt it failed at, and its attempts' times as its worker reported them."""
    failed = task_error(error)
    return RunFailure(
        type=failed.type,
        message=failed.message,
        attempts=attempts(error, retry_policy),
        times=attempt_times(reported(error)),
    )
