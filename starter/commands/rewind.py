"""`coord diff`: two correlations side by side, a rewound copy beside its original."""

from typing import Annotated

import typer

from coord.starter import api, render
from coord.starter.commands.common import AsJson, connect, echo_json, runs_async
from coord.starter.exits import ExitCode

app = typer.Typer()


@app.command()
@runs_async
async def diff(
    left: Annotated[str, typer.Argument(help="A correlation id (the original)")],
    right: Annotated[str, typer.Argument(help="Another correlation id (the copy)")],
    as_json: AsJson = False,
) -> None:
    """Show two correlations' tables side by side, aligned by causation: the rows that are the
    same, changed (payload or source) or only in one. Exits 13 when they differ."""
    client = await connect()
    compared = await api.diff_correlations(client, left, right)
    if as_json:
        echo_json(compared)
    else:
        render.show(render.diff_table(compared))
    if compared.differs:
        raise typer.Exit(ExitCode.DIFFERS)
