"""`coord plan start|state|approve|add-tasks|cancel`: coordinator mode from the command
line."""

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from coord.models.mesh.declared import declared_agents, read_agents_file
from coord.models.plan.planner import AddTasks, planning_line
from coord.models.plan.spec import ApprovalRequest, PlanSpec, PlanState, PlanStatus
from coord.models.wire.specs import load_spec, parse_model, read_document
from coord.starter import api, render
from coord.starter.commands.common import (
    START_OPTIONS,
    AsJson,
    CopyAgents,
    StartCommand,
    check_agents,
    connect,
    echo_json,
    echo_started,
    runs_async,
)
from coord.starter.exits import ExitCode
from coord.starter.progress import plan_activity

app = typer.Typer(
    no_args_is_help=True, help="Start, inspect, approve and cancel plans (coordinator mode)."
)


def load_plan_spec(file: Path, plan_id: str | None, correlation_id: str | None = None) -> PlanSpec:
    """The spec file with `--id` over its plan id and `--correlation-id` over its correlation,
    its agents checked as the worker would."""
    given = {"plan_id": plan_id, "correlation_id": correlation_id}
    overrides = {field: value for field, value in given.items() if value is not None}
    spec = load_spec(PlanSpec, file, overrides or None, START_OPTIONS)
    check_agents(file, spec)
    return spec


def show_plan(state: PlanState, as_json: bool, waiting_for: Sequence[str] = ()) -> None:
    """The record on one line for tools, else the table for people."""
    if as_json:
        echo_json(state, one_line=True)
        return
    render.show(render.plan_view(state, datetime.now(UTC), waiting_for))
    if state.planning is not None:
        typer.echo(planning_line(state.planning))
        if state.planning.answer is not None:
            typer.echo(json.dumps(state.planning.answer, indent=2))


PLANS = StartCommand(
    "plan",
    api.start_plan,
    lambda handle, _client: api.plan_outcome(handle),  # its record needs no worker
    plan_activity,
    show_plan,
    ended_well=lambda state: state.status == PlanStatus.COMPLETED,
    otherwise=ExitCode.PLAN_NOT_COMPLETED,
)


PLANS.register(app, load_plan_spec, lambda spec: spec.plan_id)


@app.command("state")
@runs_async
async def state(plan: str, as_json: AsJson = False) -> None:
    """Print a plan's tasks, counts and what it waits for (--json: the record)."""
    client = await connect()
    record = await api.plan_state(client, plan)
    running = record.status == PlanStatus.RUNNING and not as_json
    waits = (await api.plan_progress(client, plan)).waiting_for if running else []
    show_plan(record, as_json, waits)


@app.command("approve")
@runs_async
async def approve(
    plan: str,
    task: str,
    reject: Annotated[bool, typer.Option("--reject", help="Reject the task instead")] = False,
    reason: Annotated[str, typer.Option(help="Why (recorded with the task)")] = "",
) -> None:
    """Approve (or --reject) a task waiting for a person. The decision is recorded as yours:
    the client identity coord connects with ($COORD_IDENTITY, else user@host)."""
    request = parse_model(
        ApprovalRequest, {"task": task, "approve": not reject, "reason": reason}, "approval"
    )
    decided = await api.approve_task(await connect(), plan, request)
    verb = "approved" if decided.approved else "rejected"
    typer.echo(f"{verb} task {task} of plan {plan} (by {decided.by})")


@app.command("add-tasks")
@runs_async
async def add_tasks(plan: str, file: Path) -> None:
    """Add tasks to a running plan from a YAML or JSON file (`tasks:`, a list in the shape of a
    spec's tasks). The plan does not check their agents, so before sending, each agent a new
    task names must be one the plan declares inline (read once from its start) or one a worker
    started here would serve ($COORD_AGENTS, $COORD_DEMO_AGENTS), as `plan start` checks a
    spec's; else one line naming the field, exit 1 (an agent only the plan's worker knows is
    refused too, as at `plan start`). The plan refuses, naming the field, a cycle, a repeated
    id, a dependency that is unknown or already failed, and a plan that has ended."""
    request = parse_model(AddTasks, read_document(file), str(file))
    added = await api.add_tasks(
        await connect(), plan, request.tasks, registry=declared_agents(), source=str(file)
    )
    typer.echo(f"added {', '.join(added.added)} to plan {plan} ({added.total} tasks)")


@app.command("cancel")
@runs_async
async def cancel(plan: str) -> None:
    """Cancel a plan; its running tasks are cancelled and the record says so."""
    await api.cancel_plan(await connect(), plan)
    typer.echo(f"cancellation requested for plan {plan}; its running tasks are cancelled")


@app.command("rewind")
@runs_async
async def rewind(
    plan: str,
    copy_id: Annotated[str, typer.Option("--as", help="The copy's plan id")],
    to_task: Annotated[
        str | None, typer.Option(help="The task run again, with all that depends on it")
    ] = None,
    agents_file: CopyAgents = None,
) -> None:
    """Re-run a plan as a new plan: `--to-task` and what depends on it run again (without it,
    every task that did not succeed); the other tasks that succeeded are reused as they stood,
    never run again. The original is never touched."""
    agents = read_agents_file(agents_file).agents if agents_file else None
    client = await connect()
    handle = await api.rewind_plan(client, plan, copy_id=copy_id, to_task=to_task, agents=agents)
    echo_started(client, handle.id)
