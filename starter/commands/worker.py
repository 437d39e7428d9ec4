"""`coord worker` runs a worker against the configured server; `coord dev` runs an embedded
server and a worker together.

The only commands that host a worker, so the only ones that load it (with the agents' code), and
only when they run: every other command checks specs against the agents' declarations alone."""

import asyncio
from typing import Annotated

import typer
from temporalio.runtime import Runtime

from coord.infra.devserver import local_temporal
from coord.infra.metrics import DEFAULT_BIND, MetricsEndpoint
from coord.starter.commands.common import AgentsFile, DemoAgents, ServerPort, UiPort, runs_async

app = typer.Typer()


@app.command()
@runs_async
async def worker(
    agents: AgentsFile = None,
    demo_agents: DemoAgents = False,
    only: Annotated[
        str | None,
        typer.Option(help="Serve only these agents (comma-separated names); others run elsewhere"),
    ] = None,
    no_workflows: Annotated[
        bool,
        typer.Option(
            "--no-workflows",
            help="Serve agents only; the coordinator queue's workflows run elsewhere",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Serve Prometheus metrics at http://BIND:PORT/metrics (also $COORD_METRICS_PORT)"
        ),
    ] = None,
    metrics_bind: Annotated[
        str | None,
        typer.Option(
            help=f"The IP address the metrics endpoint listens on (also $COORD_METRICS_BIND; "
            f"default {DEFAULT_BIND}, 0.0.0.0 for every interface)"
        ),
    ] = None,
    shutdown_grace: Annotated[
        float | None,
        typer.Option(
            min=0,
            max=86400,
            help="Stopped (SIGTERM, Ctrl-C), let running agent runs finish for this many seconds "
            "before cancelling them (also $COORD_SHUTDOWN_GRACE)  [default: 30]",
        ),
    ] = None,
) -> None:
    """Run a worker against the configured server (TEMPORAL_ADDRESS, or localhost:7233): the
    workflows on the coordinator queue (the agents' ledgers on `<queue>/ledgers`), and each
    agent on its own queue (`agent-<name>`)."""
    from coord.worker import run_worker
    from coord.worker import shutdown_grace as grace

    names = [name.strip() for name in only.split(",") if name.strip()] if only is not None else None
    endpoint = MetricsEndpoint.of(metrics_port, metrics_bind)
    await run_worker(
        agents,
        demo_agents=demo_agents,
        only=names,
        workflows=not no_workflows,
        metrics=endpoint,
        grace=grace(shutdown_grace),
    )


@app.command()
@runs_async
async def dev(
    demo_agents: DemoAgents = False, port: ServerPort = None, ui_port: UiPort = None
) -> None:
    """Run server and worker together for local work: on the configured server
    (TEMPORAL_ADDRESS), unless --port names a local one; without either, on localhost:7233. A
    local server that is not running is started there, embedded; with a --ui-port other than
    the default, it says what COORD_UI_URL the links of other commands need, as `coord server`
    does."""
    from coord.worker import build_worker, default_registry, start_agent_monitor, worker_runtime

    Runtime.set_default(worker_runtime(), error_if_already_set=False)
    registry = default_registry(demo_agents=demo_agents)
    async with (
        local_temporal(port, ui_port) as temporal,
        build_worker(temporal.client, registry=registry) as worker,
    ):
        await start_agent_monitor(temporal.client, worker.task_queue)
        typer.echo(f"worker running against {temporal.where}; Ctrl-C to stop")
        if temporal.ui_hint:
            typer.echo(temporal.ui_hint)
        await asyncio.Event().wait()
