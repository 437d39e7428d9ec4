"""`coord server` runs the embedded Temporal dev server; `coord setup` prepares another one."""

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from coord.infra.devserver import embedded_server, ui_link_hint
from coord.infra.search_attributes import register_search_attributes
from coord.infra.state_dir import DESCRIBED
from coord.infra.temporal import DEFAULT_PORT, dev_ui_port
from coord.starter.commands.common import connect, runs_async

app = typer.Typer()


@app.command()
@runs_async
async def server(
    port: int = DEFAULT_PORT,
    ui_port: Annotated[
        int | None, typer.Option(help="The UI's port  [default: the server's port plus 1000]")
    ] = None,
    db_file: Annotated[
        Path | None,
        typer.Option(
            help=f"SQLite file holding the server's state  [default: {DESCRIBED}/coord.db]"
        ),
    ] = None,
) -> None:
    """Run the embedded Temporal dev server (SQLite, UI, search attributes) until Ctrl-C. With
    a --ui-port other than the default, the `started ...` links of other commands need
    COORD_UI_URL (they cannot know the UI's port): it says so, unless it is set so already."""
    ui_port = ui_port or dev_ui_port(port)
    async with embedded_server(port=port, ui_port=ui_port, db_file=db_file):
        typer.echo(f"Temporal dev server on localhost:{port}, UI on http://localhost:{ui_port}")
        if hint := ui_link_hint(port, ui_port):
            typer.echo(hint)
        await asyncio.Event().wait()


@app.command()
@runs_async
async def setup() -> None:
    """Register the project's search attributes on the configured server (once per namespace;
    `coord server` and the compose stack do it themselves, a plain `temporal server start-dev`
    does not)."""
    client = await connect()
    added = await register_search_attributes(client)
    registered = ", ".join(added) if added else "none missing"
    address = client.service_client.config.target_host
    typer.echo(f"search attributes on {address} ({client.namespace}): {registered}")
