"""`coord demo`: the README's first command (the run itself is starter/demo.py)."""

from typing import Annotated

import typer

from coord.starter.commands.common import runs_async

app = typer.Typer()


@app.command()
@runs_async
async def demo(
    exit_when_done: Annotated[
        bool, typer.Option("--exit", help="Exit when the sagas are done instead of serving the UI")
    ] = False,
) -> None:
    """Run the Feature Deployment saga to success, then failing at DeployToProduction."""
    from coord.starter.demo import run_demo  # hosts a worker: loaded only for this command

    await run_demo(keep_serving=not exit_when_done)
