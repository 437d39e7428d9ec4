"""The dashboard in the terminal: the seed's four sections (throughput, by topic, agent
activity, health) and the pattern panels, redrawn in place by `rich.live` every interval, or
printed once (`--once`) as the plain text scripts read."""

import asyncio
from datetime import datetime

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from coord.models.ops.dashboard import BusStatus, PatternFigures, Snapshot
from coord.starter import render
from coord.starter.dashboard.collect import Dashboard

BAR_CELLS = 20
WIDE = 140
"""Columns from which sections are drawn two side by side."""
BUS_LIGHTS: dict[BusStatus, str] = {"healthy": "🟢", "degraded": "🟡", "down": "🔴"}
BUS_STYLES: dict[BusStatus, str] = {"healthy": "green", "degraded": "yellow", "down": "red"}


def figure(value: float | None) -> str:
    """`1,247`; `-` for a figure no source gave."""
    return "-" if value is None else f"{value:,.0f}"


def bar(value: int | None, scale: int) -> str:
    """The seed's bar: `BAR_CELLS` cells, filled in proportion to the largest figure."""
    filled = round(BAR_CELLS * (value or 0) / scale) if scale else 0
    return "█" * filled + "░" * (BAR_CELLS - filled)


def section(title: str, body: RenderableType) -> Panel:
    return Panel(body, title=Text(title, style="bold"), title_align="left", expand=True)


def throughput_title(frame: Snapshot) -> str:
    """`Throughput (last hour)`, or the window the figures are of."""
    return "Throughput" if frame.throughput.published is None else f"Throughput ({frame.window})"


def throughput_view(frame: Snapshot) -> Table:
    t = frame.throughput
    rows = [
        ("Events Published", t.published),
        ("Events Consumed", t.consumed),
        ("Events Failed", t.failed),
        ("Events in DLQ", t.in_dlq),
    ]
    scale = max((value or 0 for _, value in rows), default=0)
    grid = Table.grid(padding=(0, 1))
    for label, value in rows:
        grid.add_row(f"{label}:", bar(value, scale), figure(value))
    return grid


def no_rows(frame: Snapshot, what: str) -> Text:
    """Why a table is empty: nothing happened, or no metrics source answered."""
    missing = frame.throughput.published is None
    return Text(frame.window if missing else f"no {what} in the window", style="dim")


def topics_view(frame: Snapshot) -> RenderableType:
    if not frame.topics:
        return no_rows(frame, "events")
    table = render.table("Topic", "Published", "Consumed", "Lag")
    for row in frame.topics:
        table.add_row(row.topic, figure(row.published), figure(row.consumed), figure(row.lag))
    return table


def agents_view(frame: Snapshot) -> RenderableType:
    if not frame.agents:
        return no_rows(frame, "agent runs")
    table = render.table("Agent", "Published", "Consumed", "Processing")
    for row in frame.agents:
        table.add_row(
            row.agent, figure(row.published), figure(row.consumed), figure(row.processing)
        )
    return table


def health_view(frame: Snapshot) -> Group:
    h = frame.health
    latency = "-" if h.latency_ms is None else f"{h.latency_ms:,.0f}ms"
    lag = "-" if h.consumer_lag is None else f"{h.consumer_lag} ({figure(h.lag)} events)"
    lines = [
        Text.assemble(
            "Event Bus: ", (f"{BUS_LIGHTS[h.bus]} {h.bus.capitalize()}", BUS_STYLES[h.bus])
        ),
        Text(f"Average Latency: {latency}"),
        Text(f"Consumer Lag: {lag}"),
        *(Text(f"- {reason}", style="yellow") for reason in h.reasons),
    ]
    return Group(*lines)


def sagas_view(patterns: PatternFigures) -> Group:
    sagas = render.table("Saga outcome", "Sagas")
    for outcome, count in patterns.sagas.items():
        if count:
            sagas.add_row(render.status(outcome), figure(count))
    flight = render.table("Pattern", "In flight")
    for pattern, count in patterns.in_flight.items():
        flight.add_row(pattern, figure(count))
    none = Text("no saga running or ended in the last hour", style="dim")
    return Group(sagas if any(patterns.sagas.values()) else none, Text(""), flight)


def oldest_view(patterns: PatternFigures, now: datetime) -> RenderableType:
    if not patterns.oldest:
        return Text("the queue is empty", style="dim")
    table = render.table("Entry", "Failure type", "Event", "Target", "Parked")
    for entry in patterns.oldest:
        age = (now - entry.parked_at).total_seconds()
        table.add_row(
            entry.entry_id,
            entry.failure_type,
            entry.event_type or "-",
            entry.target or "-",
            f"{entry.parked_at:%Y-%m-%d %H:%M:%S} ({age:,.0f}s ago)",
        )
    return table


def breakers_view(patterns: PatternFigures) -> RenderableType:
    if not patterns.breakers:
        return Text("no agent declared or serving", style="dim")
    table = render.table("Agent", "Breaker", "Health")
    for row in patterns.breakers:
        table.add_row(row.agent, render.status(row.state), render.status(row.status))
    return table


def sources_view(frame: Snapshot) -> Text:
    parts = [f"{source.name}: {'ok' if source.ok else source.error}" for source in frame.sources]
    return Text("Sources: " + "; ".join(parts), style="dim")


def sections(frame: Snapshot) -> list[tuple[str, RenderableType]]:
    """The seed's four sections, then the patterns' panels (when Temporal answered)."""
    shown: list[tuple[str, RenderableType]] = [
        (throughput_title(frame), throughput_view(frame)),
        ("By Topic", topics_view(frame)),
        ("Agent Activity", agents_view(frame)),
        ("Health", health_view(frame)),
    ]
    patterns = frame.patterns
    if patterns is not None:
        shown += [
            ("Sagas (running now, ended in the last hour), runs in flight", sagas_view(patterns)),
            (
                f"Dead-letter queue: {patterns.parked:,} parked, the oldest",
                oldest_view(patterns, frame.at),
            ),
            ("Breakers", breakers_view(patterns)),
        ]
    return shown


def title(frame: Snapshot) -> Text:
    return Text(f"Event System Dashboard  {frame.at:%Y-%m-%d %H:%M:%S} UTC", style="bold")


def boxed_view(frame: Snapshot, width: int) -> Group:
    """For a terminal: each section in a panel, two side by side from `WIDE` columns."""
    panels = [section(heading, body) for heading, body in sections(frame)]
    if width < WIDE:
        return Group(title(frame), *panels, sources_view(frame))
    panels[1:4] = [panels[3], panels[1], panels[2]]  # as the web page: health beside throughput
    grid = Table.grid(expand=True, padding=(0, 1))
    grid.add_column(ratio=1)
    grid.add_column(ratio=1)
    for pair in range(0, len(panels), 2):
        grid.add_row(*panels[pair : pair + 2])
    return Group(title(frame), grid, sources_view(frame))


def plain_view(frame: Snapshot) -> Group:
    """For scripts: each section under its heading, one after the other."""
    parts: list[RenderableType] = [title(frame)]
    for heading, body in sections(frame):
        parts += [Text(""), Text(f"## {heading}", style="bold"), body]
    return Group(*parts, Text(""), sources_view(frame))


async def show_once(dashboard: Dashboard) -> Snapshot:
    """Boxed on a terminal, as plain text when piped."""
    frame = await dashboard.frame()
    screen = render.console()
    if screen.is_terminal:
        screen.print(boxed_view(frame, screen.width))
    else:
        typer.echo(render.plain(plain_view(frame)))
    return frame


async def show_live(dashboard: Dashboard, interval: float) -> None:
    """Redrawn in place every `interval` seconds until interrupted."""
    screen = render.console()
    with Live(console=screen, auto_refresh=False, screen=False) as live:
        while True:
            frame = await dashboard.frame()
            live.update(boxed_view(frame, screen.width), refresh=True)
            await asyncio.sleep(interval)
