"""`coord aggregate start|state|cancel`."""

from pathlib import Path
from typing import Annotated

import typer

from coord.models.aggregator.spec import AggregatorSpec
from coord.models.wire.specs import load_spec
from coord.starter import api, render
from coord.starter.commands.common import (
    START_OPTIONS,
    connect,
    echo_started,
    runs_async,
    show_record,
)

app = typer.Typer(no_args_is_help=True, help="Start and inspect aggregators.")
AggregatorId = Annotated[str, typer.Argument(metavar="ID", help="Workflow id or aggregator id")]


def load_aggregator_spec(path: Path, correlation_id: str | None) -> AggregatorSpec:
    overrides = {"correlation_id": correlation_id} if correlation_id else None
    return load_spec(AggregatorSpec, path, overrides, START_OPTIONS)


@app.command("start")
@runs_async
async def start(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC")],
    correlation_id: Annotated[
        str | None, typer.Option(help="Count only this correlation's events")
    ] = None,
) -> None:
    """Start an aggregator from a YAML or JSON spec."""
    spec = load_aggregator_spec(spec_file, correlation_id)
    client = await connect()
    handle = await api.start_aggregator(client, spec)
    echo_started(client, handle.id)


@app.command("state")
@runs_async
async def state(
    aggregator: AggregatorId,
    as_json: Annotated[bool, typer.Option("--json", help="Print the record as JSON")] = False,
) -> None:
    """Print an aggregator's status table (its columns: expected event, status, when)."""
    record = await api.aggregator_state(await connect(), aggregator)
    show_record(record, as_json, render.aggregator_table)


@app.command("cancel")
@runs_async
async def cancel(aggregator: AggregatorId) -> None:
    """Cancel an aggregator; it emits nothing."""
    workflow_id = await api.cancel_aggregator(await connect(), aggregator)
    typer.echo(f"cancellation requested for {workflow_id}")
