"""`coord chain start|state|close`."""

from pathlib import Path
from typing import Annotated

import typer

from coord.models.chain.spec import ChainSpec
from coord.models.wire.contract import chain_workflow_id
from coord.models.wire.specs import load_spec
from coord.starter import api
from coord.starter.commands.common import (
    AsJson,
    check_agents,
    connect,
    echo_json,
    echo_started,
    runs_async,
)

app = typer.Typer(no_args_is_help=True, help="Start, inspect and close reactive chains.")


@app.command("start")
@runs_async
async def start(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC")],
    correlation_id: Annotated[str, typer.Option(help="The correlation id the chain serves")],
) -> None:
    """Start the chain of a correlation id from a YAML or JSON spec."""
    spec = load_spec(ChainSpec, spec_file)
    check_agents(spec_file, spec)
    client = await connect()
    handle = await api.start_chain(client, spec, correlation_id)
    echo_started(client, handle.id)


@app.command("state")
@runs_async
async def state(correlation_id: str, as_json: AsJson = False) -> None:
    """Print a chain's record (JSON; --json prints it on one line): events seen, running agents,
    waiting joins, rejections."""
    echo_json(await api.chain_state(await connect(), correlation_id), one_line=as_json)


@app.command("close")
@runs_async
async def close(correlation_id: str) -> None:
    """Close a chain: it accepts no more events and ends once its started work is done."""
    await api.close_chain(await connect(), correlation_id)
    typer.echo(f"closing {chain_workflow_id(correlation_id)}")
