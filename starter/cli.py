"""`coord`: the command line of the Event Coordinator, assembled from one module per command
group (starter/commands/)."""

from importlib import metadata
from typing import Annotated

import typer
from temporalio.runtime import Runtime

from coord.infra.extras import PROJECT
from coord.infra.logs import configure_logging
from coord.infra.process import exit_without_teardown
from coord.infra.temporal import client_runtime
from coord.infra.tracing import configure_tracing
from coord.starter.commands import (
    agents,
    aggregator,
    chain,
    dashboard,
    demo,
    dlq,
    events,
    gc,
    plan,
    planned,
    rewind,
    saga,
    server,
    specs,
    vote,
    worker,
)

app = typer.Typer(
    no_args_is_help=True,
    help="Event Coordinator: durable event coordination on Temporal.",
    rich_markup_mode="markdown",
)
for commands in (server, worker, demo, events, rewind, agents, gc, specs, planned):
    app.add_typer(commands.app)
app.add_typer(dashboard.app)
app.add_typer(saga.app, name="saga")
app.add_typer(chain.app, name="chain")
app.add_typer(aggregator.app, name="aggregate")
app.add_typer(dlq.app, name="dlq")
app.add_typer(plan.app, name="plan")
app.add_typer(vote.app, name="vote")

DEFAULT_LOG_LEVELS = {"server": "INFO", "worker": "INFO", "dev": "INFO", "demo": "ERROR"}


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"coord {metadata.version(PROJECT)}")
        raise typer.Exit()


@app.callback()
def configure(
    ctx: typer.Context,
    log_level: Annotated[
        str | None,
        typer.Option(
            help="Log level (default: INFO for server/worker/dev, ERROR for demo, else WARNING)"
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=show_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    default = DEFAULT_LOG_LEVELS.get(ctx.invoked_subcommand or "", "WARNING")
    # server, worker, dev and demo run until stopped, and keep every line; any other command
    # says how it ended itself, so the core's retries are said once.
    runs_until_stopped = ctx.invoked_subcommand in DEFAULT_LOG_LEVELS
    configure_logging(log_level or default, retries_once=not runs_until_stopped)
    # Before any client: the SDK core's log lines go to stderr as log lines, never to stdout.
    Runtime.set_default(client_runtime(), error_if_already_set=False)
    configure_tracing(f"coord-{ctx.invoked_subcommand or 'cli'}")


def main() -> None:
    exit_without_teardown(app)
