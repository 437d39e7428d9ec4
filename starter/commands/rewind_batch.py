"""`coord rewind --all` and `coord diff --summary`: the options they share (a window of start
times and a suffix naming the copies) and what they print."""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, TypedDict

import typer

from coord.models.chain.spec import ChainSpec
from coord.models.mesh.config import AgentConfig
from coord.models.rewind.batch import (
    BatchLine,
    BatchRefused,
    BatchReport,
    checked_window,
    count_line,
    describe,
    instant,
)
from coord.models.rewind.summary import summary_lines
from coord.starter import api, render
from coord.starter.commands.common import connect, echo_record

BatchOptions = Annotated[
    bool,
    typer.Option(
        "--all",
        help="Rewind every chain of this coordinator's queue started between --since and --until",
    ),
]
Since = Annotated[
    str | None,
    typer.Option(help="Chains started at or after: ISO 8601 time (UTC) or a duration ago (2h)"),
]
Until = Annotated[str | None, typer.Option(help="Chains started before (default: now); as --since")]
Where = Annotated[str | None, typer.Option(help="CEL filter on each correlation's first event")]
ToType = Annotated[
    str | None,
    typer.Option("--to-type", help="Rewind to the first event of this type (default: the first)"),
]
Suffix = Annotated[str | None, typer.Option(help="The copies are named <C><SUFFIX>")]
Concurrency = Annotated[int, typer.Option(help="Correlations rewound at once")]


class BatchRewind(TypedDict):
    """--where, --to-type, the copies' spec and agents, --concurrency: as `api.rewind_many`
    takes them."""

    where: str | None
    to_type: str | None
    spec: ChainSpec | None
    agents: dict[str, AgentConfig] | None
    concurrency: int


@dataclass(frozen=True)
class Window:
    """--since, --until and --suffix as given."""

    since: str | None
    until: str | None
    suffix: str | None

    def bounds(self) -> tuple[datetime, datetime]:
        if self.since is None:
            raise BatchRefused("--since: give the earliest start time of the chains to take")
        now = datetime.now(UTC)
        until = instant(self.until, now, "--until") if self.until else now
        return checked_window(instant(self.since, now, "--since"), until)

    def copies(self) -> str:
        if not self.suffix:
            raise BatchRefused("--suffix: give the suffix that names the copies (<C><SUFFIX>)")
        return self.suffix


async def rewind_all(window: Window, options: BatchRewind, as_json: bool) -> None:
    """Rewind the window's chains, a line each (or JSON), then the counts."""
    since, until = window.bounds()
    suffix = window.copies()
    client = await connect()
    with render.progress_bar("rewinding") as advance:
        done: list[BatchLine] = []

        def on_line(line: BatchLine, total: int) -> None:
            done.append(line)
            advance(len(done), total)

        report = await api.rewind_many(
            client, since=since, until=until, suffix=suffix, on_line=on_line, **options
        )
    echo_record(report, as_json, batch_lines)


def batch_lines(report: BatchReport) -> list[str]:
    """A line for each correlation, then the counts."""
    return [*map(describe, report.lines), count_line(report.counts())]


async def summarise_copies(window: Window, as_json: bool) -> None:
    """Every original of the window beside its copy: the counts (or JSON with every pair)."""
    since, until = window.bounds()
    suffix = window.copies()
    summary = await api.diff_summary(await connect(), since=since, until=until, suffix=suffix)
    echo_record(summary, as_json, summary_lines)
