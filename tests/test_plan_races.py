"""The plan's races: a cancel, an update or a timer landing in the same workflow task as a task's
outcome, and two outcomes in one task. Each is made deterministic as in test_saga_cancel: the
workflow worker is stopped, once the run is idle (`started_until`), while the events are written
to the history (the agents' workers run on), then a new, uncached one sees them all in one
workflow task; every test checks from the history that it did, that no workflow task failed,
and that none was left to time out by a worker that had stopped."""

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeAlias

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    EventType,
    TimeoutType,
    UpdateWorkflowExecutionLifecycleStage,
)
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from coord.activities.plan.update_callers import UpdateCallers
from coord.models.plan.spec import ApprovalDecision, PlanSpec, PlanState, PlanStatus, TaskState
from coord.models.wire.contract import APPROVE_UPDATE, FailureType
from coord.starter.api.plans import plan_outcome
from coord.worker import WorkerSet, build_worker
from coord.workflows.plan.graph import TaskGraph
from tests.agents import GatedAgents
from tests.helpers import connected_as, task_failures, wait_until
from tests.test_plan import run_agent_spans, start
from tests.test_plan_gates import plan, task_of
from tests.test_saga_cancel import history_has, workflow_worker

Order = Literal["cancel first", "completion first"]
Event: TypeAlias = EventType.ValueType
Handle: TypeAlias = WorkflowHandle[Any, PlanState]
COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
FAILED = EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
CANCEL_REQUESTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
TIMER_FIRED = EventType.EVENT_TYPE_TIMER_FIRED
UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
TASK_STARTED = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
TASK_SCHEDULED = EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
TASK_TIMED_OUT = EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
START_TO_CLOSE = TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE
TASK_EVENTS = {
    TASK_SCHEDULED,
    TASK_STARTED,
    TASK_COMPLETED,
    TASK_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
}
SIGNAL_SENT = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
SIGNAL_ENDED = {
    EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED,
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED,
}
ADMITTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
NO_RETRY = {"max_retries": 0}
APPROVAL_TIMEOUT = "10s"
"""The approval's timer in the timeout race: it must fire only once the first workflow worker
has stopped (`started_until` fails saying so otherwise). The stop comes a fraction of a second
after the timer starts on a quiet machine, 0.6 s at a load of 9; 4 s left little margin at a
load of 13 and more."""


def agent_workers(client: Client, task_queue: str, gates: GatedAgents) -> WorkerSet:
    """The gated agents' workers only: the workflow worker comes and goes in each test."""
    return build_worker(
        client, task_queue, gates.registry().only(list(gates.names)), workflows=False
    )


async def started_until(
    client: Client, task_queue: str, spec: PlanSpec, ready: Callable[[Handle], Awaitable[Any]]
) -> Handle:
    """A workflow worker starts the plan and runs it until `ready(handle)` returns and the run
    is idle, then stops: what the history gets from then on waits for the next workflow
    worker."""
    async with workflow_worker(client, task_queue, FIRST_WORKER):
        handle = await start(client, task_queue, spec)
        await ready(handle)
        await wait_until(lambda: idle(handle))
    assert await idle(handle), "a workflow task came while the first workflow worker stopped"
    STOPPED_AT[handle.id] = (await handle.fetch_history()).events[-1].event_id
    return handle


FIRST_WORKER = "first-workflow-worker"
"""The identity of `started_until`'s workflow worker, which the history records with each
workflow task it starts."""
STOPPED_AT: dict[str, int] = {}
"""By workflow id, the last event of the history when `started_until`'s workflow worker
stopped."""


async def abandoned(handle: WorkflowHandle[Any, Any]) -> list[int]:
    """The workflow tasks (their started events) that the first workflow worker took after it
    stopped, and so never completed: each timed out START_TO_CLOSE. Not the other timeouts,
    which a loaded machine brings and the server recovers from, each task scheduled again: a
    live worker's task that took it past the 10 s task timeout (seen at a load of 15), and the
    speculative task of an update admitted while no worker polls, which the server times out
    SCHEDULE_TO_START after 5 s, keeping the update (the race tests wait that long for their
    timer or their new worker)."""
    events = {event.event_id: event for event in (await handle.fetch_history()).events}
    timeouts = [
        event.workflow_task_timed_out_event_attributes
        for event in events.values()
        if event.event_type == TASK_TIMED_OUT
    ]
    return [
        timeout.started_event_id
        for timeout in timeouts
        if timeout.timeout_type == START_TO_CLOSE
        and timeout.started_event_id > STOPPED_AT[handle.id]
        and events[timeout.started_event_id].workflow_task_started_event_attributes.identity
        == FIRST_WORKER
    ]


async def idle(handle: Handle) -> bool:
    """No workflow task is scheduled or running, and none is on its way (a signal the run sent
    whose outcome is still to come, such as the plan's announcements, schedules one): a
    workflow worker stopped now holds no task of the run. One stopped while its poll takes a
    task leaves the task to time out (10 s later); the server then forgets the updates it had
    admitted, and their callers send them again, to a task that may already end the run (the
    update is then aborted by the run's closing, never seen by the workflow)."""
    events = [event.event_type for event in (await handle.fetch_history()).events]
    tasks = [kind for kind in events if kind in TASK_EVENTS]
    in_flight = events.count(SIGNAL_SENT) - sum(kind in SIGNAL_ENDED for kind in events)
    return tasks[-1] == TASK_COMPLETED and in_flight == 0


async def closed_activities(handle: WorkflowHandle[Any, Any], kind: Event) -> int:
    return sum(event.event_type == kind for event in (await handle.fetch_history()).events)


async def release(gates: GatedAgents, handle: WorkflowHandle[Any, Any], *agents: str) -> None:
    """Lets the agents finish and waits until their outcomes are in the history."""
    kind = FAILED if set(agents) <= set(gates.failing) else COMPLETED
    before = await closed_activities(handle, kind)
    for agent in agents:
        gates.released[agent].set()
    await wait_until(lambda: history_has(handle, kind, before + len(agents)))


async def finish(
    client: Client, task_queue: str, handle: WorkflowHandle[Any, Any]
) -> tuple[PlanState, PlanState]:
    """A new workflow worker ends the plan: its outcome (result, failure details or memo, as a
    client reads it) and its full record (the `state` query, answered from the history). It
    reads who sent a decision too, as the plan's own worker does (`update_caller`)."""
    worker = workflow_worker(client, task_queue)
    reader = Worker(client, task_queue=task_queue, activities=[UpdateCallers(client).update_caller])
    async with worker, reader:
        ended = await asyncio.wait_for(plan_outcome(handle), 60)
        full = await handle.query(TaskGraph.state)
    return ended, full


async def assert_one_task_saw(handle: WorkflowHandle[Any, Any], *kinds: Event) -> None:
    """The last events of these kinds reached the workflow in one workflow task (none started
    between them), and no workflow task failed."""
    events = [event.event_type for event in (await handle.fetch_history()).events]
    at = sorted(delivered_at(events, kind) for kind in kinds)
    between = events[at[0] : at[-1]]
    assert TASK_STARTED not in between, [EventType.Name(kind) for kind in events]
    assert await abandoned(handle) == [], "a stopped worker left a workflow task to time out"
    assert await task_failures(handle) == []


def delivered_at(events: Sequence[Event], kind: Event) -> int:
    """Where the last event of `kind` reached the workflow. An update's acceptance is written
    after the workflow task that carried it: it counts from that task's start."""
    at = len(events) - 1 - list(events)[::-1].index(kind)
    if kind == UPDATE_ACCEPTED:
        at = max(i for i in range(at) if events[i] == TASK_STARTED)
    return at


def states(state: PlanState) -> dict[str, TaskState]:
    return {task.id: task.state for task in state.tasks}


def transitions(state: PlanState, task_id: str) -> list[TaskState]:
    return [transition.state for transition in task_of(state, task_id).transitions]


async def activity_ids(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return sorted(activity_id for activity_id, _, _ in await run_agent_spans(handle))


# --- A cancel with a task's outcome -----------------------------------------------------------


async def cancel_and_release(
    handle: WorkflowHandle[Any, Any], gates: GatedAgents, agent: str, order: Order
) -> None:
    if order == "cancel first":
        await handle.cancel()
        await release(gates, handle, agent)
    else:
        await release(gates, handle, agent)
        await handle.cancel()


@pytest.mark.parametrize("order", ["cancel first", "completion first"])
async def test_a_cancel_landing_with_a_tasks_completion_keeps_its_success(
    client: Client, task_queue: str, order: Order
) -> None:
    """`done` completes in the workflow task that carries the cancel: it is recorded succeeded
    once (never replaced by cancelled, never counted twice), `running` is cancelled, and the
    dependents of both never start."""
    gates = GatedAgents(names=["finisher", "runner"])
    spec = plan(
        "race-cancel",
        {"id": "done", "agent": "finisher"},
        {"id": "running", "agent": "runner"},
        {"id": "after-done", "agent": "finisher", "depends_on": ["done"]},
        {"id": "after-running", "agent": "finisher", "depends_on": ["running"]},
    )
    async with agent_workers(client, task_queue, gates):

        async def both_running() -> None:
            await gates.wait_started("finisher")
            await gates.wait_started("runner")

        handle = await started_until(client, task_queue, spec, lambda _: both_running())
        await cancel_and_release(handle, gates, "finisher", order)
        kept, full = await finish(client, task_queue, handle)
    await assert_one_task_saw(handle, CANCEL_REQUESTED, COMPLETED)
    for record in (kept, full):
        assert record.status == PlanStatus.CANCELLED
        assert states(record) == {
            "done": TaskState.SUCCEEDED,
            "running": TaskState.CANCELLED,
            "after-done": TaskState.CANCELLED,
            "after-running": TaskState.CANCELLED,
        }
        assert record.summary == "1 of 4 succeeded, 3 cancelled (plan cancelled)"
    done = task_of(full, "done")
    assert transitions(full, "done") == [
        TaskState.PENDING,
        TaskState.READY,
        TaskState.RUNNING,
        TaskState.SUCCEEDED,
    ]
    assert done.attempts == 1 and done.result == {"agent": "finisher"}
    assert await activity_ids(handle) == ["done/run/1", "running/run/1"]


async def test_a_cancel_landing_with_a_tasks_failure_keeps_its_error(
    client: Client, task_queue: str
) -> None:
    """`broken` fails for good in the workflow task that carries the cancel: it ends error (not
    cancelled) and its dependent is skipped naming it; what waited or ran is cancelled."""
    gates = GatedAgents(names=["breaker", "runner"], failing=["breaker"])
    spec = plan(
        "race-cancel-failure",
        {"id": "broken", "agent": "breaker", "retry": NO_RETRY},
        {"id": "running", "agent": "runner"},
        {"id": "after-broken", "agent": "runner", "depends_on": ["broken"]},
        {"id": "after-running", "agent": "runner", "depends_on": ["running"]},
    )
    async with agent_workers(client, task_queue, gates):

        async def both_running() -> None:
            await gates.wait_started("breaker")
            await gates.wait_started("runner")

        handle = await started_until(client, task_queue, spec, lambda _: both_running())
        await handle.cancel()
        await release(gates, handle, "breaker")
        kept, full = await finish(client, task_queue, handle)
    await assert_one_task_saw(handle, CANCEL_REQUESTED, FAILED)
    assert states(kept) == states(full)
    assert states(full) == {
        "broken": TaskState.ERROR,
        "running": TaskState.CANCELLED,
        "after-broken": TaskState.SKIPPED,
        "after-running": TaskState.CANCELLED,
    }
    assert task_of(full, "after-broken").skipped_because == "broken"
    assert kept.status == PlanStatus.CANCELLED
    assert kept.summary == "0 of 4 succeeded, 1 error, 1 skipped, 2 cancelled (plan cancelled)"


@pytest.mark.parametrize("verdict", ["passed", "failed"])
async def test_a_cancel_landing_with_a_review_verdict(
    client: Client, task_queue: str, verdict: str
) -> None:
    """The reviewer's verdict and the cancel in one workflow task: the round is recorded; a
    passing last stage makes the task succeed, a failing one leaves it cancelled with no fix
    run started (and none counted)."""
    passed = verdict == "passed"
    gates = GatedAgents(
        names=["coder", "reviewer"],
        answers={"reviewer": {"passed": passed, "notes": "fine" if passed else "add tests"}},
    )
    gates.released["coder"].set()
    spec = plan(
        "race-review",
        {
            "id": "build",
            "agent": "coder",
            "review": {"reviewer": "reviewer", "stages": ["spec_compliance"]},
        },
        {"id": "after", "agent": "coder", "depends_on": ["build"]},
    )
    async with agent_workers(client, task_queue, gates):
        handle = await started_until(
            client, task_queue, spec, lambda _: gates.wait_started("reviewer")
        )
        await cancel_and_release(handle, gates, "reviewer", "cancel first")
        kept, full = await finish(client, task_queue, handle)
    await assert_one_task_saw(handle, CANCEL_REQUESTED, COMPLETED)
    build = task_of(full, "build")
    assert [(r.stage, r.passed) for r in build.reviews] == [("spec_compliance", passed)]
    assert build.result == {"agent": "coder"} and build.attempts == 1
    assert states(kept) == states(full)
    assert states(full) == {
        "build": TaskState.SUCCEEDED if passed else TaskState.CANCELLED,
        "after": TaskState.CANCELLED,
    }
    assert transitions(full, "build")[-2:] == [
        TaskState.REVIEWING,
        TaskState.SUCCEEDED if passed else TaskState.CANCELLED,
    ]
    assert build.fixes == 0
    assert await activity_ids(handle) == ["build/review/spec_compliance/1", "build/run/1"]


# --- Two failures with fail_fast --------------------------------------------------------------


async def test_two_failures_in_one_task_with_fail_fast_fail_the_plan_once(
    client: Client, task_queue: str
) -> None:
    """Both failures are recorded (neither lost to the stop the first one starts); the plan
    names the first in the history, cancels the task still running and fails once, with its
    report."""
    gates = GatedAgents(
        names=["breaker-1", "breaker-2", "runner"], failing=["breaker-1", "breaker-2"]
    )
    spec = plan(
        "race-fail-fast",
        {"id": "one", "agent": "breaker-1", "retry": NO_RETRY},
        {"id": "two", "agent": "breaker-2", "retry": NO_RETRY},
        {"id": "slow", "agent": "runner"},
        {"id": "after", "agent": "runner", "depends_on": ["one"]},
        fail_fast=True,
    )
    async with agent_workers(client, task_queue, gates):

        async def all_running() -> None:
            for agent in gates.names:
                await gates.wait_started(agent)

        handle = await started_until(client, task_queue, spec, lambda _: all_running())
        await release(gates, handle, "breaker-1")
        await release(gates, handle, "breaker-2")
        report, full = await finish(client, task_queue, handle)
    events = [event.event_type for event in (await handle.fetch_history()).events]
    first, second = [i for i, kind in enumerate(events) if kind == FAILED]
    assert TASK_STARTED not in events[first:second]
    assert await task_failures(handle) == []
    assert report.status == full.status == PlanStatus.FAILED
    assert states(report) == states(full)
    assert states(full) == {
        "one": TaskState.ERROR,
        "two": TaskState.ERROR,
        "slow": TaskState.CANCELLED,
        "after": TaskState.SKIPPED,
    }
    assert report.summary == (
        "0 of 4 succeeded, 2 error, 1 skipped, 1 cancelled (fail_fast: task one ended error)"
    )
    for task_id in ("one", "two"):
        error = task_of(full, task_id).error
        assert error is not None and error.type == "temporary_failure"


# --- An approval with its timeout -------------------------------------------------------------


async def admitted_update(
    client: Client, handle: WorkflowHandle[Any, Any], request: dict[str, Any], caller: str
) -> "asyncio.Task[Any]":
    """Sends the `approve` update as `caller` (its client identity) and returns once the server
    has admitted it (it then waits for a workflow task to carry it); the returned task ends with
    the update's outcome."""
    update_id = f"approve-{uuid.uuid4().hex[:8]}"
    as_caller = (await connected_as(client, caller)).get_workflow_handle(handle.id)
    sent = asyncio.create_task(as_caller.execute_update(APPROVE_UPDATE, request, id=update_id))
    execution = WorkflowExecution(workflow_id=handle.id)
    poll = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace,
        update_ref=UpdateRef(workflow_execution=execution, update_id=update_id),
        identity=client.identity,
        wait_policy=WaitPolicy(lifecycle_stage=ADMITTED),
    )

    async def admitted() -> bool:
        try:
            await client.workflow_service.poll_workflow_execution_update(poll)
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    await wait_until(admitted)
    return sent


async def awaiting_approval(handle: WorkflowHandle[Any, Any], task_id: str) -> None:
    async def waiting() -> bool:
        state = await handle.query(TaskGraph.state)
        return task_of(state, task_id).state == TaskState.AWAITING_APPROVAL

    await wait_until(waiting)


@pytest.mark.parametrize("order", ["timer first", "update first"])
async def test_an_approval_landing_with_its_timeout_wins_once(
    client: Client, task_queue: str, order: str
) -> None:
    """The approval's timer fires and a person's decision arrives in one workflow task: the
    decision counts (the workflow applies updates before timers, and the timer waits while the
    decision's caller is read), the record says who decided, the client gets that decision,
    and the task runs once."""
    gates = GatedAgents(names=["deployer"])
    gates.released["deployer"].set()
    spec = plan(
        "race-approval",
        {"id": "deploy", "agent": "deployer", "approval": {"timeout": APPROVAL_TIMEOUT}},
        {"id": "announce", "agent": "deployer", "depends_on": ["deploy"]},
    )
    approval = {"task": "deploy", "by": "alice", "reason": "just in time"}
    async with agent_workers(client, task_queue, gates):
        handle = await started_until(
            client, task_queue, spec, lambda handle: awaiting_approval(handle, "deploy")
        )
        fired = lambda: history_has(handle, TIMER_FIRED, 1)  # noqa: E731
        if order == "timer first":
            await wait_until(fired, timeout=60)
            sent = await admitted_update(client, handle, approval, "alice")
        else:
            sent = await admitted_update(client, handle, approval, "alice")
            await wait_until(fired, timeout=60)
        state, _ = await finish(client, task_queue, handle)
        decided = ApprovalDecision.model_validate(await sent)
    await assert_one_task_saw(handle, TIMER_FIRED, UPDATE_ACCEPTED)
    deploy = task_of(state, "deploy")
    assert deploy.approval == decided
    assert (decided.approved, decided.by, decided.reason) == (True, "alice", "just in time")
    assert state.status == PlanStatus.COMPLETED
    assert deploy.error is None and deploy.attempts == 1
    assert transitions(state, "deploy") == [
        TaskState.PENDING,
        TaskState.AWAITING_APPROVAL,
        TaskState.READY,
        TaskState.RUNNING,
        TaskState.SUCCEEDED,
    ]


async def test_two_decisions_in_one_task_the_first_counts_the_other_is_refused(
    client: Client, task_queue: str
) -> None:
    """Two decisions reach the plan in one workflow task (the server picks their order): the
    first is validated and its caller read before the other is validated, so the first counts
    and the other is refused while it is checked (a refusal leaves no event), without failing
    the workflow task. The record and the plan follow the one that counted."""
    gates = GatedAgents(names=["deployer"])
    gates.released["deployer"].set()
    spec = plan("race-two-approvals", {"id": "deploy", "agent": "deployer", "approval": {}})
    requests: list[tuple[dict[str, Any], str]] = [
        ({"task": "deploy"}, "alice"),
        ({"task": "deploy", "approve": False}, "bob"),
    ]
    async with agent_workers(client, task_queue, gates):
        handle = await started_until(
            client, task_queue, spec, lambda handle: awaiting_approval(handle, "deploy")
        )
        sent = [await admitted_update(client, handle, *request) for request in requests]
        state, _ = await finish(client, task_queue, handle)
        answers = await asyncio.gather(*sent, return_exceptions=True)
    events = [event.event_type for event in (await handle.fetch_history()).events]
    assert events.count(UPDATE_ACCEPTED) == 1
    assert await task_failures(handle) == []
    (decided,) = [ApprovalDecision.model_validate(a) for a in answers if isinstance(a, dict)]
    (refused,) = [a for a in answers if isinstance(a, WorkflowUpdateFailedError)]
    cause = refused.cause
    assert isinstance(cause, ApplicationError) and cause.type == FailureType.INVALID_APPROVAL
    assert (
        cause.message == "task: 'deploy' has a decision being checked; ask again if it is refused"
    )
    assert decided.by == ("alice" if decided.approved else "bob")
    deploy = task_of(state, "deploy")
    assert deploy.approval == decided
    expected = (TaskState.SUCCEEDED, 1) if decided.approved else (TaskState.ERROR, 0)
    assert (deploy.state, deploy.attempts) == expected


async def test_a_cancel_landing_with_a_decision_records_it_and_runs_nothing(
    client: Client, task_queue: str
) -> None:
    """The decision came first: the cancel waits while its caller is read, the decision is
    recorded and its caller gets it; the approved task then asks for its slot, and the cancel
    cancels it before any run: the task ends cancelled and no agent ran."""
    gates = GatedAgents(names=["deployer"])
    gates.released["deployer"].set()
    spec = plan("race-cancel-approval", {"id": "deploy", "agent": "deployer", "approval": {}})
    async with agent_workers(client, task_queue, gates):
        handle = await started_until(
            client, task_queue, spec, lambda handle: awaiting_approval(handle, "deploy")
        )
        sent = await admitted_update(client, handle, {"task": "deploy"}, "alice")
        await handle.cancel()
        kept, full = await finish(client, task_queue, handle)
        decided = ApprovalDecision.model_validate(await sent)
    await assert_one_task_saw(handle, CANCEL_REQUESTED, UPDATE_ACCEPTED)
    assert kept.status == PlanStatus.CANCELLED
    deploy = task_of(full, "deploy")
    assert transitions(full, "deploy")[1:] == [
        TaskState.AWAITING_APPROVAL,
        TaskState.READY,
        TaskState.CANCELLED,
    ]
    assert deploy.approval == decided and decided.by == "alice"
    assert deploy.attempts == 0
    assert await activity_ids(handle) == []


@pytest.mark.parametrize("order", ["cancel first", "completion first"])
async def test_a_cancel_landing_with_a_fail_fast_failure_ends_the_run_cancelled(
    client: Client, task_queue: str, order: Order
) -> None:
    """With fail_fast, the first failure and a cancel in one workflow task, in either order:
    the failure is recorded and stops the plan (the summary says so), the rest is cancelled,
    and the run ends cancelled (a person asked for it), not failed with plan_failed."""
    gates = GatedAgents(names=["breaker", "runner"], failing=["breaker"])
    spec = plan(
        "race-cancel-fail-fast",
        {"id": "broken", "agent": "breaker", "retry": NO_RETRY},
        {"id": "slow", "agent": "runner"},
        fail_fast=True,
    )
    async with agent_workers(client, task_queue, gates):

        async def both_running() -> None:
            await gates.wait_started("breaker")
            await gates.wait_started("runner")

        handle = await started_until(client, task_queue, spec, lambda _: both_running())
        await cancel_and_release(handle, gates, "breaker", order)
        kept, full = await finish(client, task_queue, handle)
    await assert_one_task_saw(handle, CANCEL_REQUESTED, FAILED)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert kept.status == PlanStatus.CANCELLED
    assert states(kept) == states(full)
    assert states(full) == {"broken": TaskState.ERROR, "slow": TaskState.CANCELLED}
    assert kept.summary == (
        "0 of 2 succeeded, 1 error, 1 cancelled (fail_fast: task broken ended error)"
    )
