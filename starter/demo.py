"""The README's first command: the Feature Deployment saga (to success and to rollback),
its user-story reactive chain, and a coordinator-mode plan with a five-task graph (to completion
through a fix round of each gate, and to `partial` with one injected failure), on the embedded
server."""

import asyncio
import os
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import typer
from temporalio.client import Client

from coord.infra.devserver import local_temporal
from coord.infra.temporal import ui_url, workflow_link
from coord.models.aggregator.spec import AggregatorSpec
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.plan.spec import PlanSpec
from coord.models.saga.spec import SagaSpec
from coord.models.wire.contract import COORD_PATTERN
from coord.models.wire.specs import load_spec
from coord.starter import api, render
from coord.starter.examples import EXAMPLES
from coord.worker import build_worker, default_registry

SAGA_RUNS: dict[str, dict[str, Any]] = {
    "success": {},
    "rollback": {"inject": {"fail": ["DeployToProduction"]}},
}
PLAN_RUNS: dict[str, dict[str, Any]] = {
    "reviewed": {"reject": ["reviewer", "verifier-b"]},
    "failure": {"fail": ["scan-security"]},
}
"""The plan's runs: one where the reviewer and one verifier each send a first result back to be
fixed, one where scan-security fails for good (fix-findings and release are skipped)."""


async def run_sagas(client: Client, stamp: str) -> None:
    spec = load_spec(SagaSpec, EXAMPLES / "feature-deployment.yaml")
    for run, injected in SAGA_RUNS.items():
        saga = spec.model_copy(
            update={"saga_id": f"{spec.saga_id}-{stamp}-{run}", "input": {**spec.input, **injected}}
        )
        handle = await api.start_saga(client, saga, eager=True)
        typer.secho(f"\n▶ {handle.id} ({run})", bold=True)
        state = await api.saga_outcome(handle, client)
        typer.echo(state.model_dump_json(indent=2, exclude={"events"}))
        render.show(render.timeline_table(state.events))
        typer.echo(f"  status: {state.status.value}  UI: {workflow_link(handle.id)}")


async def run_chain(client: Client, stamp: str) -> None:
    """The user-story chain, with the phase1 aggregator listening to it."""
    spec = load_spec(ChainSpec, EXAMPLES / "user-story-chain.yaml")
    correlation_id = f"story-{stamp}"
    await api.start_chain(client, spec, correlation_id, eager=True)
    phase1 = load_spec(
        AggregatorSpec, EXAMPLES / "phase1-aggregator.yaml", {"correlation_id": correlation_id}
    )
    aggregator = await api.start_aggregator(client, phase1, eager=True)
    approved = EventEnvelope.new(
        "UserStoryApproved",
        "/product-strategist",
        payload={"story": "As a user I can reset my password"},
        correlation_id=correlation_id,
        topic="project.tasks",
    )
    workflow_id = await api.publish(client, approved)
    typer.secho(f"\n▶ {workflow_id} (user-story reactive chain)", bold=True)
    state = await api.chain_handle(client, correlation_id).result()
    typer.secho(f"\n▶ {aggregator.id} (phase1 aggregator)", bold=True)
    render.show(render.aggregator_table(await aggregator.result()))
    typer.secho(f"\n▶ {workflow_id}: timeline and causation tree", bold=True)
    timeline = await api.chain_timeline(client, correlation_id)
    render.show(render.timeline_table(timeline))
    typer.echo()
    render.show(render.causation_tree(timeline))
    typer.echo(f"  status: {state.status.value}  UI: {workflow_link(workflow_id)}")


def plan_run(spec: PlanSpec, plan_id: str, inject: dict[str, Any]) -> PlanSpec:
    """The plan under its own id, with `inject` in every task's input (the demo agents' flag)."""
    tasks = [
        task.model_copy(update={"input": {**task.input, "inject": inject}}) for task in spec.tasks
    ]
    return spec.model_copy(update={"plan_id": plan_id, "correlation_id": plan_id, "tasks": tasks})


async def run_plans(client: Client, stamp: str) -> None:
    spec = load_spec(PlanSpec, EXAMPLES / "plan-seed003.yaml")
    for run, inject in PLAN_RUNS.items():
        plan = plan_run(spec, f"{spec.plan_id}-{stamp}-{run}", inject)
        handle = await api.start_plan(client, plan, eager=True)
        typer.secho(f"\n▶ {handle.id} ({run}: inject {inject})", bold=True)
        state = await api.plan_outcome(handle)
        render.show(render.plan_view(state, datetime.now(UTC)))
        typer.echo(f"  status: {state.status.value}  UI: {workflow_link(handle.id)}")


async def run_demo(
    *, keep_serving: bool, port: int | None = None, ui_port: int | None = None
) -> None:
    """The demo against `local_temporal(port, ui_port)`; its links point at that server's UI
    (unless $COORD_UI_URL says otherwise)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    async with local_temporal(port, ui_port) as temporal:
        client = temporal.client
        if temporal.ui is not None:
            os.environ.setdefault("COORD_UI_URL", temporal.ui)
        typer.echo(f"Temporal: {temporal.where}")
        async with build_worker(client, registry=default_registry(demo_agents=True)):
            await run_sagas(client, stamp)
            await run_chain(client, stamp)
            await run_plans(client, stamp)
            query = quote(f'{COORD_PATTERN.name}!=""')
            runs = f"{workflow_link('').rstrip('/')}?query={query}"
            typer.echo(f"\nAll coordination runs: {runs}")
            if keep_serving:
                typer.echo(f"Serving the Temporal UI at {ui_url()}; Ctrl-C to stop.")
                if temporal.ui_hint:  # the demo's own links know the port; others' do not
                    typer.echo(temporal.ui_hint)
                await asyncio.Event().wait()
