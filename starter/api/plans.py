"""Plans (coordinator mode): start, wait, read the record and the progress, approve or reject a
task waiting for a person, cancel.

The calls name the workflow, its queries and its update by their wire names (the contract), so
this side needs nothing of the workflow's code."""

from datetime import timedelta
from typing import Any, cast

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError

from coord.infra.activity_progress import pending_progress
from coord.models.checks import check_added_tasks
from coord.models.mesh.declared import KnownAgents
from coord.models.plan.planner import AddedTasks, AddTasks
from coord.models.plan.report import task_plan_markdown
from coord.models.plan.spec import (
    ApprovalDecision,
    ApprovalRequest,
    PlanProgress,
    PlanSpec,
    PlanState,
    PlanStatus,
    as_seen,
    progress_as_seen,
)
from coord.models.wire import contract
from coord.starter.api.common import (
    NotFound,
    NoWorker,
    answered,
    api_call,
    cancel_running,
    current_record,
    described,
    ended_or_missing,
    ended_record,
    named_workflow_id,
    start_run,
    started_input,
)
from coord.workflows.plan.graph import TaskGraph

ANSWER_TIME = timedelta(minutes=1)
"""How long a decision waits for a worker to take it up."""
MAX_DETAILS = 16 * 1024
"""Characters of the task plan kept as the run's static details in the UI; a longer plan is cut
at a line, saying where the whole of it is."""


def plan_summary(spec: PlanSpec) -> str:
    tasks = f"{len(spec.tasks)} task{'s' if len(spec.tasks) != 1 else ''}"
    if spec.planner is not None:
        tasks = f"planned by {spec.planner.agent}"
    return f"Plan {spec.name} ({spec.plan_id}): {tasks}, at most {spec.max_workers} at once"


def plan_details(spec: PlanSpec) -> str:
    """The task plan (markdown, which the UI renders): tasks, agents, dependencies, gates."""
    details = task_plan_markdown(spec)
    if len(details) <= MAX_DETAILS:
        return details
    cut = details[:MAX_DETAILS].rsplit("\n", 1)[0]
    return f"{cut}\n\n… cut here; `coord plan state {spec.plan_id}` lists every task\n"


@api_call
async def start_plan(
    client: Client, spec: PlanSpec, *, queue: str | None = None, eager: bool = False
) -> WorkflowHandle[Any, PlanState]:
    """Start the plan on `queue` (default: $COORD_TASK_QUEUE); `plan_outcome(handle)` waits for
    its final report. `eager`: this client's own worker takes its first task (`start_run`)."""
    first = PlanState(plan_id=spec.plan_id, correlation_id=spec.correlation_id)
    summary, details = plan_summary(spec), plan_details(spec)
    if spec.rewind is not None:
        first.rewind_of = spec.rewind.of.search_value()
        summary = f"{summary} ({spec.rewind.of.describe()})"
    return await start_run(client, TaskGraph.run, spec, first, queue, summary, details, eager=eager)


def plan_handle(client: Client, plan: str) -> WorkflowHandle[Any, PlanState]:
    """`plan` is a plan id or its workflow id (`plan-<plan_id>`); a name that starts with
    `plan-` is taken as a workflow id (`named_plan` asks which it is)."""
    return plan_run(client, contract.as_plan_workflow_id(plan))


def plan_run(client: Client, workflow_id: str) -> WorkflowHandle[Any, PlanState]:
    """The plan whose workflow id is `workflow_id`, as given (a listing's, `named_plan`'s): one
    started from the Temporal CLI may have any."""
    return client.get_workflow_handle(workflow_id, result_type=PlanState)


async def named_plan(client: Client, plan: str) -> WorkflowHandle[Any, PlanState]:
    """The plan a user names by its plan id or its workflow id (`named_workflow_id`)."""
    return plan_run(client, await named_workflow_id(client, plan, contract.PLAN_ID_PREFIX))


@api_call
async def plan_outcome(handle: WorkflowHandle[Any, PlanState]) -> PlanState:
    """Wait for the plan to end and return its final record (the final report), however
    it ended: a `fail_fast` failure carries it in its details, a cancelled run in its memo (there
    without task results)."""
    return await ended_record(handle, contract.PLAN_RECORD_MEMO, PlanState)


async def plan_record(
    handle: WorkflowHandle[Any, PlanState], client: Client | None = None
) -> PlanState:
    """The plan's record now (`current_record`)."""
    name = f"plan {contract.plan_id_of(handle.id)!r}"
    return await current_record(handle, plan_outcome, TaskGraph.state, name, client)


@api_call
async def plan_state(client: Client, plan: str) -> PlanState:
    """The record; a running plan's with what its agents say now (their progress summaries and
    attempts, read from the server's pending activities: the plan itself never polls them)."""
    handle = await named_plan(client, plan)
    state = await plan_record(handle, client)
    if state.status != PlanStatus.RUNNING:
        return state
    return as_seen(state, await pending_progress(client, handle.id))


@api_call
async def plan_progress(client: Client, plan: str) -> PlanProgress:
    """Running tasks with their agents' latest summaries (read from the server's pending
    activities as the answer is made) and elapsed time, counts by state, and what the plan
    waits for (a running plan only: the counts are the workflow's query; NoWorker when no worker
    answers it, `answered`)."""
    handle = await named_plan(client, plan)
    try:
        return await live_progress(client, handle)
    except RPCError as error:
        raise await ended_or_missing(
            handle, f"plan {plan!r}", "it reports no progress", error, plan_outcome
        ) from None


async def live_progress(client: Client, handle: WorkflowHandle[Any, Any]) -> PlanProgress:
    """The plan's `progress` query, its running tasks' summaries as their agents say them now
    (`answered`: NoWorker when no worker polls its task queue or none answers; RPCError when
    the plan cannot answer otherwise)."""
    progress: PlanProgress = await answered(client, handle, TaskGraph.progress)
    return progress_as_seen(progress, await pending_progress(client, handle.id))


@api_call
async def approve_task(
    client: Client, plan: str, request: ApprovalRequest, *, answer_time: timedelta = ANSWER_TIME
) -> ApprovalDecision:
    """Approve or reject a task waiting for a person, as `client`'s identity (the decision's
    author, which the plan reads from what the server recorded). The workflow refuses (one
    line, naming the field) a task that is not one of the plan's or is not waiting for
    approval, and a caller the task's approvers do not name (`approval_refused`); NoWorker when
    no worker took the decision up within `answer_time`."""
    handle = await named_plan(client, plan)
    try:
        # The SDK types a named async update's result as its coroutine; the decoded result is
        # the handler's declared return type.
        decided = cast(
            ApprovalDecision,
            await handle.execute_update(
                TaskGraph.approve,
                request.model_dump(mode="json", exclude_none=True),
                rpc_timeout=answer_time,
            ),
        )
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise NoWorker(
            f"plan {plan!r}: no worker took the decision up within {answer_time.total_seconds():g}s"
            " (is one running on its task queue?); ask again: a task is decided once"
        ) from None
    except RPCError as error:
        raise await ended_or_missing(
            handle, f"plan {plan!r}", f"task {request.task!r} was not decided", error, plan_outcome
        ) from None
    return decided


@api_call
async def add_tasks(
    client: Client,
    plan: str,
    tasks: list[dict[str, Any]],
    *,
    answer_time: timedelta = ANSWER_TIME,
    registry: KnownAgents | None = None,
    source: str = "add_tasks",
) -> AddedTasks:
    """Add `tasks` (each in the shape of a spec's task) to a running plan; a task whose
    dependencies have all succeeded starts at once. The plan refuses, in one line naming the
    field (`invalid_tasks`), a cycle, a repeated id, a dependency that is no task of the plan
    or that already ended without succeeding, the caps, and a plan that has ended; NoWorker
    when no worker took the request up within `answer_time`.

    The plan does not check the agents a new task names (a task naming an agent no worker
    serves waits on its queue, then fails `agent_unavailable`), so with a `registry` they are
    checked here before anything is sent, as a spec is before it starts
    (`check_added_tasks`): each must be one the plan declares inline, read once from its start
    input in its history (a plan never continues as new), or one `registry` knows; else a
    SpecError `<source>: tasks[i].agent: unknown agent ...`."""
    request = AddTasks.model_validate({"tasks": tasks})
    handle = await named_plan(client, plan)
    if registry is not None:
        await described(handle, NotFound(f"plan {plan!r} does not exist"))
        try:
            started = PlanSpec.model_validate(await started_input(client, handle))
        except ValidationError:
            pass  # it started nothing, and refuses the tasks itself
        else:
            check_added_tasks(source, started, request.tasks, registry)
    try:
        added: AddedTasks = await handle.execute_update(
            TaskGraph.add_tasks, request.model_dump(mode="json"), rpc_timeout=answer_time
        )
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise NoWorker(
            f"plan {plan!r}: no worker took the tasks up within {answer_time.total_seconds():g}s"
            " (is one running on its task queue?)"
        ) from None
    except RPCError as error:
        raise await ended_or_missing(
            handle, f"plan {plan!r}", "no task was added", error, plan_outcome
        ) from None
    return added


@api_call
async def cancel_plan(client: Client, plan: str) -> None:
    """Running tasks are cancelled and the record says so. Refused when the plan has ended: the
    server would accept the request and nothing would happen."""
    await cancel_running(await named_plan(client, plan), f"plan {plan!r}", plan_outcome)
