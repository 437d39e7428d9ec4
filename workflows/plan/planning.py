"""A plan's planning step and its growth, inside the `TaskGraph` workflow.

Planning: a plan that names a `planner` asks it, before anything runs, for its task graph (one
run through the one agent-run path, `start_agent_run`), sent the goal and the agents the worker
knows; the answer is read by `coord.models.plan.planner` as a written spec is, and its agents
are checked on the worker as `coord plan start` checks a written spec's. A refused answer, or a
planner whose run failed for good, ends the planning step with the reason in the record: no
task runs, and the workflow task never fails.

Growth: the `add_tasks` update's checks (`checked_tasks`), which its validator and its handler
both make (the plan may have moved between the two); while the planner plans, the validator
checks the request's shape alone (`checked_request`) and the handler waits for the graph."""

import asyncio
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.events.envelope import EventEnvelope
    from coord.models.mesh.agents import AgentRequest, AgentResult
    from coord.models.mesh.usage import TokenMeter
    from coord.models.plan.model import PlanModel
    from coord.models.plan.planner import (
        ANSWER,
        AddTasks,
        extended_tasks,
        planned_spec,
        planner_request,
        planning_failed,
    )
    from coord.models.plan.spec import Dispatch, Planning, PlanSpec, PlanState, PlanTask
    from coord.models.wire.contract import FailureType, failure
    from coord.models.wire.specs import SpecError
    from coord.workflows._runtime import calls
    from coord.workflows._runtime.agent_runs import RunSettings, start_agent_run
    from coord.workflows._runtime.common import InvalidInput, PlainInput, decode_input, task_error

A = TypeVar("A")
R = TypeVar("R")
PLANNER_ACTIVITY_ID = "~planner"
"""The planner's run: `~` is in no task id, so no task's activity shares it."""
PLAN_REQUESTED = "PlanRequested"
"""The planner's event type (its payload: the goal)."""
CHECK_TIMEOUT = timedelta(seconds=30)
CHECK_RETRY = RetryPolicy(maximum_attempts=3)
"""Reading the catalogue and checking the graph are the worker's own, quick: a few tries."""


async def plan_tasks(spec: PlanSpec, state: PlanState) -> tuple[PlanSpec | None, Planning]:
    """The spec the plan runs, planned by its planner, with the record of the planning; None
    (the record saying why) when the planner gave no graph the plan can run."""
    workflow_id = workflow.info().workflow_id
    try:
        catalogue = await _worker_check(refs.PLANNING_CATALOGUE, workflow_id, "planner: agents")
        result = await _ask(spec, state, catalogue, workflow_id)
    except ActivityError as error:
        if is_cancelled_exception(error):
            raise asyncio.CancelledError from error
        failed = task_error(error)
        problem = f"planner.agent: the planner's run failed: {failed.type}: {failed.message}"
        return None, planning_failed(spec, problem, workflow.now())
    if result.reference is not None:
        problem = f"{ANSWER}: larger than the plan's result_limit; a graph is sent inline"
        return None, planning_failed(spec, problem, workflow.now())
    try:
        planned, planning = planned_spec(spec, result.data, workflow.now())
    except SpecError as error:
        return None, planning_failed(spec, str(error), workflow.now())
    unfit = await _checked_agents(planned) if planned.tasks else None
    if unfit is not None:
        return None, planning_failed(spec, f"{ANSWER}: {unfit}", workflow.now())
    return planned, planning


async def _ask(
    spec: PlanSpec, state: PlanState, catalogue: dict[str, list[str]], workflow_id: str
) -> AgentResult:
    """The planner's run, with the plan's dispatch, budget and inline agents."""
    planner = spec.planner
    assert planner is not None
    payload, inputs = planner_request(spec, catalogue)
    event = EventEnvelope.new(
        PLAN_REQUESTED, workflow_id, payload=payload, correlation_id=spec.correlation_id
    )
    request = AgentRequest(
        agent=planner.agent,
        event=event,
        retry_on=planner.retry.retry_on,
        config=spec.agents.get(planner.agent),
        idempotency_key=f"{workflow_id}/{PLANNER_ACTIVITY_ID}",
        inputs=inputs,
    )
    settings = RunSettings(
        summary=f"planner {planner.agent}: {spec.goal[:120]}",
        retry=planner.retry,
        start_to_close=planner.timeout,
        activity_id=PLANNER_ACTIVITY_ID,
        agent_queue=spec.dispatch == Dispatch.AGENT_QUEUES,
        inline_agents=spec.agents,
        tokens=TokenMeter(state.tokens, spec.budget),
    )
    return await start_agent_run(request, settings)


async def _checked_agents(planned: PlanSpec) -> str | None:
    """The planned graph's first agent problem by the worker's agents; a check that cannot be
    made is one too (the graph is not run unchecked)."""
    try:
        return await _worker_check(refs.CHECK_PLAN_AGENTS, planned, "planner: check agents")
    except ActivityError as error:
        return f"tasks: the agents could not be checked: {task_error(error).message}"


async def _worker_check(ref: "refs.ActivityRef[A, R]", argument: A, summary: str) -> R:
    return await calls.execute(
        ref,
        argument,
        start_to_close_timeout=CHECK_TIMEOUT,
        retry_policy=CHECK_RETRY,
        summary=summary,
    )


def planning_now(model: PlanModel | None, open: bool) -> bool:
    """The planner is writing the graph (there is none yet to check tasks against); `open`:
    the plan's loop that starts tasks still runs."""
    planned = model is None or model.spec.planner is None or model.state.planning is not None
    return open and not planned


def checked_tasks(model: PlanModel | None, raw: PlainInput, *, open: bool) -> list[PlanTask]:
    """The tasks an `add_tasks` update adds, if the plan takes them now (`open`: its loop still
    runs); else an `invalid_tasks` failure whose message is one line naming the field."""
    if model is None:
        raise _invalid("plan: it did not start (its spec is invalid): it takes no tasks")
    if not open or model.stopping is not None:
        state = model.state
        ended = f"it has ended {state.status.value} ({state.summary})" if state.summary else ""
        why = model.stopping or ended or "it has ended"
        raise _invalid(f"add_tasks: plan {model.spec.plan_id} takes no new tasks: {why}")
    try:
        return extended_tasks(model.spec, model.state, checked_request(raw))
    except SpecError as error:
        raise _invalid(str(error)) from None


def checked_request(raw: PlainInput) -> AddTasks:
    """The update's request as sent (its shape only), else `invalid_tasks` naming the field."""
    try:
        return decode_input(AddTasks, raw, "add_tasks")
    except InvalidInput as error:
        raise _invalid(str(error)) from None


def _invalid(message: str) -> ApplicationError:
    return failure(FailureType.INVALID_TASKS, message, non_retryable=True)
