"""`coord demo`: the README's first command (the run itself is starter/demo.py)."""

from typing import Annotated

import typer

from coord.starter.commands.common import ServerPort, UiPort, runs_async

app = typer.Typer()


@app.command()
@runs_async
async def demo(
    exit_when_done: Annotated[
        bool, typer.Option("--exit", help="Exit when the runs are done instead of serving the UI")
    ] = False,
    port: ServerPort = None,
    ui_port: UiPort = None,
) -> None:
    """Run each pattern on the demo agents: the Feature Deployment saga to success and then
    failing at DeployToProduction (compensated), the user-story chain with its aggregator, and
    a plan to success and with a failing task; then serve the UI until Ctrl-C. On the
    configured server (TEMPORAL_ADDRESS), unless --port names a local one; without either, on
    localhost:7233. A local server that is not running is started there, embedded."""
    from coord.starter.demo import run_demo  # hosts a worker: loaded only for this command

    await run_demo(keep_serving=not exit_when_done, port=port, ui_port=ui_port)
