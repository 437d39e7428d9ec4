"""`coord run GOAL --planner AGENT`: the mode switch. The planner is asked which level of
coordination fits the goal (direct: it answers itself; a single delegation; a team; a
coordinator's task graph) and the graph for it; the plan records the choice and why, runs it,
and prints the outcome."""

import uuid
from typing import Annotated

import typer

from coord.models.plan.spec import PlanSpec
from coord.models.wire.specs import parse_model
from coord.starter.commands.common import AsJson, NoWorkerTimeout, check_agents, runs_async
from coord.starter.commands.plan import PLANS

app = typer.Typer()


@app.command("run")
@runs_async
async def run(
    goal: str,
    planner: Annotated[str, typer.Option(help="The agent that plans how the goal is done")],
    plan_id: Annotated[
        str | None, typer.Option("--id", help="Plan id (default: run-<random>)")
    ] = None,
    approve: Annotated[
        bool, typer.Option("--approve", help="A person approves the planned tasks first")
    ] = False,
    wait: Annotated[
        bool, typer.Option(help="Wait for the outcome and print it (--no-wait: start only)")
    ] = True,
    as_json: AsJson = False,
    no_worker_timeout: NoWorkerTimeout = 30,
) -> None:
    """Ask PLANNER how to do GOAL (answer it, delegate it, a team, or a task graph), then do it.
    The plan's record says which level was chosen and why."""
    document = {
        "plan_id": plan_id or f"run-{uuid.uuid4().hex[:8]}",
        "goal": goal,
        "planner": {"agent": planner, "choose_level": True},
        "approve_plan": approve,
    }
    spec = parse_model(PlanSpec, document, "run")
    check_agents("run", spec)
    await PLANS.run(
        spec, spec.plan_id, wait=wait, as_json=as_json, no_worker_timeout=no_worker_timeout
    )
