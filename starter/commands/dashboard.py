"""`coord dashboard`: the event-system dashboard, live in the terminal, once (`--once`),
or as a web page (`--web`)."""

from pathlib import Path
from typing import Annotated

import httpx
import typer

from coord.infra.temporal import task_queue
from coord.models.mesh.declared import declared_agents
from coord.models.wire.specs import SpecError
from coord.starter.commands.common import connect, runs_async
from coord.starter.dashboard.collect import Dashboard, metrics_source
from coord.starter.dashboard.terminal import show_live, show_once
from coord.starter.exits import ExitCode

app = typer.Typer()
DEFAULT_PORT = 8765


@app.command()
@runs_async
async def dashboard(
    prometheus: Annotated[
        str | None,
        typer.Option(
            help="A Prometheus server scraping the workers: figures of the last hour "
            "(also $COORD_PROMETHEUS_URL)"
        ),
    ] = None,
    metrics: Annotated[
        list[str] | None,
        typer.Option(
            "--metrics",
            help="Without a Prometheus server: the workers' metrics endpoints, comma-separated "
            "or repeated, summed here (also $COORD_METRICS_ENDPOINTS)",
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit")] = False,
    interval: Annotated[
        float, typer.Option(min=0.5, help="Seconds between frames (live and --web)")
    ] = 5.0,
    web: Annotated[bool, typer.Option("--web", help="Serve the dashboard as a web page")] = False,
    host: Annotated[str, typer.Option(help="With --web: the address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="With --web: the port to listen on")] = DEFAULT_PORT,
    agents_file: Annotated[
        Path | None,
        typer.Option("--agents", help="Also the breakers of the agents this file declares"),
    ] = None,
) -> None:
    """Throughput in the last hour, by topic, agent activity and health (the event
    dashboard), with sagas by outcome, runs in flight, the dead-letter queue's oldest entries
    and the agents' breakers. Event figures come from a Prometheus server, else from the
    workers' metrics endpoints (the increase since the dashboard started); the rest from the
    Temporal server. `--once` exits 6 when the Temporal server does not answer (the frame,
    saying so, is printed all the same)."""
    if once and web:
        raise SpecError("--once and --web: choose one")
    async with httpx.AsyncClient() as http:
        board = Dashboard(
            metrics_source(prometheus, metrics or [], http, once=once),
            connect,
            declared_agents(agents_file),
            task_queue(),
        )
        if web:
            from coord.starter.dashboard.web import serve  # aiohttp: for --web alone

            await serve(board, host=host, port=port, interval=interval)
        elif once:
            frame = await show_once(board)
            if frame.health.bus == "down":
                raise typer.Exit(ExitCode.UNREACHABLE)
        else:
            await show_live(board, interval)
