"""`coord`: the command line of the Event Coordinator."""

import asyncio
import functools
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from temporalio.service import RPCError

from infra.devserver import PortInUse, embedded_server, local_temporal
from infra.logs import configure_logging
from infra.temporal import ConnectionSettings, ServerUnreachable, workflow_link
from models.saga import SagaSpec
from models.specs import SpecError, parse_json_object, parse_model, read_document
from starter import api
from starter.demo import run_demo
from worker import build_worker, run_worker

app = typer.Typer(
    no_args_is_help=True, help="Event Coordinator: durable event coordination on Temporal."
)
saga_app = typer.Typer(no_args_is_help=True, help="Start, inspect and cancel sagas.")
app.add_typer(saga_app, name="saga")

R = TypeVar("R")
DEFAULT_LOG_LEVELS = {"server": "INFO", "worker": "INFO", "dev": "INFO", "demo": "ERROR"}


@app.callback()
def configure(
    ctx: typer.Context,
    log_level: Annotated[
        str | None,
        typer.Option(
            help="Log level (default: INFO for server/worker/dev, ERROR for demo, else WARNING)"
        ),
    ] = None,
) -> None:
    default = DEFAULT_LOG_LEVELS.get(ctx.invoked_subcommand or "", "WARNING")
    configure_logging(log_level or default)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM stops like Ctrl-C, so an embedded server is shut down, not orphaned."""
    raise KeyboardInterrupt


def runs_async(fn: Callable[..., Coroutine[Any, Any, R]]) -> Callable[..., R]:
    """Run the command's coroutine; user errors become one line on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            return asyncio.run(fn(*args, **kwargs))
        except (SpecError, ServerUnreachable, PortInUse, RPCError) as error:
            typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

    return wrapper


@app.command()
@runs_async
async def server(
    port: int = 7233,
    ui_port: int = 8233,
    db_file: Annotated[Path, typer.Option(help="SQLite file holding the server's state")] = Path(
        ".temporal/coord.db"
    ),
) -> None:
    """Run the embedded Temporal dev server (SQLite, UI, search attributes) until Ctrl-C."""
    async with embedded_server(port=port, ui_port=ui_port, db_file=db_file):
        typer.echo(f"Temporal dev server on localhost:{port}, UI on http://localhost:{ui_port}")
        await asyncio.Event().wait()


@app.command()
@runs_async
async def worker() -> None:
    """Run a worker against the configured server (TEMPORAL_ADDRESS, or localhost:7233)."""
    await run_worker()


@app.command()
@runs_async
async def dev() -> None:
    """Run server and worker together for local work."""
    async with local_temporal() as (client, where), build_worker(client):
        typer.echo(f"worker running against {where}; Ctrl-C to stop")
        await asyncio.Event().wait()


@app.command()
@runs_async
async def demo(
    exit_when_done: Annotated[
        bool, typer.Option("--exit", help="Exit when the sagas are done instead of serving the UI")
    ] = False,
) -> None:
    """Run the seed's Feature Deployment saga to success, then failing at DeployToProduction."""
    await run_demo(keep_serving=not exit_when_done)


@saga_app.command("start")
@runs_async
async def saga_start(
    file: Path,
    input: Annotated[
        str | None, typer.Option(help="JSON object merged into the spec's input")
    ] = None,
    saga_id: Annotated[
        str | None, typer.Option("--id", help="Saga id (overrides the spec's)")
    ] = None,
    wait: Annotated[
        bool, typer.Option(help="Wait for the saga to end and print its state")
    ] = False,
) -> None:
    """Start a saga from a YAML or JSON spec."""
    document = read_document(file)
    if isinstance(document, dict):
        if input is not None:
            extra = parse_json_object(input, "--input")
            document["input"] = {**(document.get("input") or {}), **extra}
        if saga_id is not None:
            document["saga_id"] = saga_id
    spec = parse_model(SagaSpec, document, str(file))
    settings = ConnectionSettings.load()
    client = await settings.connect()
    handle = await api.start_saga(client, spec)
    typer.echo(f"started {handle.id}: {workflow_link(handle.id, settings.namespace)}")
    if wait:
        state = await api.saga_outcome(handle)
        typer.echo(state.model_dump_json(indent=2))
        if state.status != "completed":
            raise typer.Exit(2)


@saga_app.command("state")
@runs_async
async def saga_state(saga_id: str) -> None:
    """Print a saga's coordinator record (JSON)."""
    client = await ConnectionSettings.load().connect()
    state = await api.saga_state(client, saga_id)
    typer.echo(state.model_dump_json(indent=2))


@saga_app.command("cancel")
@runs_async
async def saga_cancel(saga_id: str) -> None:
    """Cancel a saga; its compensation stack is unwound."""
    client = await ConnectionSettings.load().connect()
    await api.cancel_saga(client, saga_id)
    typer.echo(f"cancellation requested for saga {saga_id}; its compensations will run")


def main() -> None:
    app()
