"""`coord gc`: remove what has outlived its retention and nothing refers to any more (README
"Retention"); `--dry-run` lists what would go and why."""

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from coord.infra.gc import Collector, options_for
from coord.infra.temporal import task_queue
from coord.models.mesh.config import WorkerSettings
from coord.models.mesh.declared import read_agents_file
from coord.models.ops.retention import Action, GcReport
from coord.models.wire.specs import SpecError
from coord.starter.commands.common import AsJson, connect, echo_json, runs_async
from coord.starter.exits import ExitCode

app = typer.Typer()
SHOWN_ALWAYS = (
    Action.REMOVED,
    Action.WOULD_REMOVE,
    Action.ARCHIVED,
    Action.WOULD_ARCHIVE,
    Action.FAILED,
)
"""What a run prints whatever happens; what is kept only with --verbose (--json: everything)."""


def worker_settings(agents: Path | None) -> WorkerSettings:
    """The `worker:` section of the agents file the worker reads (its retention and scratchpad
    root), or the defaults."""
    if agents is None:
        return WorkerSettings()
    return read_agents_file(agents).worker


def env_agents() -> Path | None:
    return Path(os.environ["COORD_AGENTS"]) if os.environ.get("COORD_AGENTS") else None


def decode_cursor(cursor: str | None) -> dict[str, str]:
    if cursor is None:
        return {}
    try:
        decoded = json.loads(cursor)
    except json.JSONDecodeError:
        decoded = None
    if not isinstance(decoded, dict) or not all(isinstance(v, str) for v in decoded.values()):
        raise SpecError("--cursor: not a cursor printed by `coord gc`")
    return decoded


def print_report(report: GcReport, verbose: bool) -> None:
    for item in report.items:
        if verbose or item.action in SHOWN_ALWAYS:
            typer.echo(f"{item.action.value}: {item.kind.value} {item.name}: {item.reason}")
    counts = ", ".join(f"{n} {action}" for action, n in sorted(report.counts().items()))
    typer.echo(f"gc: {counts or 'nothing stored'}")
    if report.next_cursor:
        typer.echo(f"more: coord gc --cursor '{json.dumps(report.next_cursor)}'")


@app.command()
@runs_async
async def gc(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be removed and why; change nothing")
    ] = False,
    agents: Annotated[
        Path | None,
        typer.Option(
            help="The worker's agents file: its retention and scratchpad root (also $COORD_AGENTS)"
        ),
    ] = None,
    batch: Annotated[
        int | None, typer.Option(min=1, help="The most things of each kind examined (default 1000)")
    ] = None,
    cursor: Annotated[str | None, typer.Option(help="Go on where a run stopped (`more:`)")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Also list what is kept, and why")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Remove stored payloads and results, dead letters and scratchpads that have outlived their
    retention and that nothing refers to; exit 12 if something could not be removed."""
    settings = worker_settings(agents or env_agents())
    options, _ = options_for(settings, task_queue(), dry_run=dry_run, batch=batch)
    client = await connect()
    report = await Collector(client, options).run(decode_cursor(cursor))
    if as_json:
        echo_json(report)
    else:
        print_report(report, verbose)
    if report.failed:
        raise typer.Exit(ExitCode.GC_INCOMPLETE)
