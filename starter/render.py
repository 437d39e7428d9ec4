"""Terminal views of coordination records, drawn by `rich`: styled on a terminal, plain text
with the same columns when piped, so scripts and tests read `|`-separated cells under a
`-+-` rule whatever the terminal."""

import io
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import IO, Any

import typer
from rich import box
from rich.console import Console, Group, RenderableType
from rich.progress import Progress
from rich.table import Column, Table
from rich.text import Text
from rich.tree import Tree

from coord.models.aggregator.spec import AggregatorState
from coord.models.dlq.letter import ENTRY_STATUSES, DlqCounts, EntrySummary
from coord.models.events.timeline import TimelineEntry
from coord.models.events.views import AgentsView
from coord.models.plan.report import elapsed, outcome, summary_line
from coord.models.plan.spec import ENDED_TASK_STATES, PlanState, TaskRecord, TaskState
from coord.models.rewind.diff import CorrelationDiff, RowStatus
from coord.models.wire.contract import dlq_action

TIMELINE_COLUMNS = ("Time", "Event", "Agent", "Correlation ID", "Event ID", "Caused by")
UNWRAPPED = 10_000
"""The width of piped output: wide enough that no table is ever wrapped to fit."""
NARROW_GUIDES = ("   ", "│  ", "├─ ", "└─ ")
NARROW_ASCII_GUIDES = ("   ", "|  ", "+- ", "`- ")
"""The causation tree's guides, narrower than rich's default: events nest deep."""
STATUS_STYLES = {
    "received": "green",
    "waiting": "yellow",
    "parked": "yellow",
    "replaying": "cyan",
    "replayed": "green",
    "archived": "dim",
    "succeeded": "green",
    "completed": "green",
    "running": "cyan",
    "reviewing": "cyan",
    "awaiting_approval": "yellow",
    "partial": "yellow",
    "failed": "red",
    "error": "red",
    "skipped": "dim",
    "cancelled": "dim",
    "closed": "green",
    "half_open": "yellow",
    "open": "red",
    "same": "dim",
    "changed": "yellow",
    "only_left": "red",
    "only_right": "green",
}
ACTIVE_TASK_STATES = (TaskState.RUNNING, TaskState.REVIEWING)


def console(file: IO[str] | None = None, **options: Any) -> Console:
    """Records are data, not markup: `[x]` or `:smile:` in an event type prints as written."""
    return Console(file=file, markup=False, emoji=False, highlight=False, **options)


def show(view: RenderableType) -> None:
    """Print a view on stdout: styled and fitted to a terminal, else as `plain` text."""
    terminal = console()
    if terminal.is_terminal:
        terminal.print(view)
    else:
        typer.echo(plain(view))


@contextmanager
def progress(awaited: str) -> Iterator[Callable[[str], None]]:
    """Where progress lines go while something is awaited: on a terminal, above a spinner that
    names it; piped, to stderr alone, a line each."""
    err = console(stderr=True)
    if not err.is_terminal:
        yield lambda line: typer.echo(line, err=True)
        return
    with err.status(Text(awaited)):
        yield err.print


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A bar on stderr that the caller moves (`advance(done, total)`); piped, nothing: the
    lines a command prints are its record, the bar only shows a person how far it got."""
    err = console(stderr=True)
    with Progress(console=err, disable=not err.is_terminal, transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def plain(view: RenderableType) -> str:
    """The view without colour, never wrapped, without trailing blanks: what scripts read."""
    text = io.StringIO()
    console(text, width=UNWRAPPED, color_system=None).print(view)
    return "\n".join(line.rstrip() for line in text.getvalue().splitlines())


def table(*columns: str | Column, show_header: bool = True) -> Table:
    """Columns under a rule, `|` between them, no outer frame (the tables)."""
    return Table(
        *columns,
        box=box.ASCII,
        show_edge=False,
        pad_edge=False,
        show_header=show_header,
        header_style="bold",
    )


def status(value: str, label: str | None = None) -> Text:
    return Text(label or value, style=STATUS_STYLES.get(value, ""))


def timeline_table(entries: Sequence[TimelineEntry], *, show_header: bool = True) -> Table:
    """The correlation table, with the ids that link each event to its cause."""
    view = table(*TIMELINE_COLUMNS, show_header=show_header)
    for e in entries:
        view.add_row(
            f"{e.time:%H:%M:%S}",
            Text(e.event, style="bold"),
            e.agent,
            e.correlation_id,
            e.event_id,
            ", ".join(e.causes) or e.causation_id or "-",
        )
    return view


def causation_tree(entries: Sequence[TimelineEntry]) -> Tree:
    """Which event caused which: roots are events whose cause is not in the log."""
    known = {e.event_id: e for e in entries}
    forest = Tree("", hide_root=True)
    forest.TREE_GUIDES, forest.ASCII_GUIDES = [NARROW_GUIDES] * 3, NARROW_ASCII_GUIDES
    nodes: dict[str | None, Tree] = {None: forest}
    for entry in entries:
        parent = entry.causation_id if entry.causation_id in known else None
        label = Text.assemble(
            (entry.event, "bold"),
            f" ({entry.agent}, {entry.time:%H:%M:%S}){_joined_causes(entry, known)}",
        )
        nodes[entry.event_id] = nodes[parent].add(label)
    return forest


def _joined_causes(entry: TimelineEntry, known: dict[str, TimelineEntry]) -> str:
    """` ← A + B` for an event a join caused: the tree shows it under one cause, this names all."""
    if len(entry.causes) < 2:
        return ""
    return " ← " + " + ".join(known[c].event if c in known else c for c in entry.causes)


def aggregator_table(state: AggregatorState) -> Group:
    """The aggregation status table and count line."""
    slots = table("Event", "Status", "Received At")
    for slot in state.slots:
        slots.add_row(
            slot.type + (f" from {slot.source}" if slot.source else ""),
            status(slot.status, "✅ Received" if slot.status == "received" else "⏳ Waiting"),
            f"{slot.received_at:%H:%M:%S}" if slot.received_at else "-",
        )
    lines = ["", f"Aggregation Status: {state.progress}"]
    if state.deadline is not None:
        left = f" ({state.seconds_left:.0f}s left)" if state.seconds_left is not None else ""
        lines.append(f"Deadline: {state.deadline:%Y-%m-%d %H:%M:%S} UTC{left}")
    lines.append(
        f"Events: received {state.received}, matched {state.matched}, unmatched "
        f"{state.unmatched}, duplicates {state.duplicates}, rejected {state.rejected_count}, "
        f"ignored after the end {state.ignored_after_finish}"
    )
    if state.lookback_failure:
        lines.append(f"Lookback failed: {state.lookback_failure}")
    if state.emitted is not None:
        lines.append(f"Emitted: {state.emitted.event.type} ({state.emitted.event.id})")
    return Group(slots, *map(Text, lines))


def dlq_table(entries: Sequence[EntrySummary]) -> Table:
    """The DLQ table: event, type, failure reason, retries, target, status and action."""
    failure = Column("Failure", max_width=60, no_wrap=True, overflow="ellipsis")
    view = table("Entry", "Event ID", "Type", failure, "Retries", "Target", "Status", "Action")
    for e in entries:
        view.add_row(
            e.entry_id,
            e.event_id or "-",
            e.event_type or "(invalid)",
            f"{e.failure_type}: {e.message}",
            str(e.attempts),
            (e.target_workflow or "-") + (f" / {e.target_agent}" if e.target_agent else ""),
            status(e.status),
            e.action,
        )
    return view


def dlq_counts_table(counts: DlqCounts) -> Table:
    """Entries by failure type and status, with the action each failure type calls for."""
    view = table("Failure type", "Action", *(name.capitalize() for name in ENTRY_STATUSES))
    for kind, by_status in counts.by_failure_type.items():
        view.add_row(kind, dlq_action(kind), *map(str, by_status.in_order()))
    view.add_row(Text("Total", style="bold"), "", *map(str, counts.total.in_order()))
    return view


def plan_view(state: PlanState, now: datetime, waiting_for: Sequence[str] = ()) -> Group:
    """`coord plan state`: per task its state, attempts, elapsed time and what it is doing (its
    agent's latest progress) or how it ended; then the counts, what the plan waits for (its
    `progress` query's words), and how to decide a task awaiting a person."""
    doing = Column("Summary", max_width=80, no_wrap=True, overflow="ellipsis")
    view = table("Task", "State", "Attempts", "Elapsed", doing)
    for task in state.tasks:
        view.add_row(
            task.id,
            status(task.state),
            str(task.attempts),
            task_elapsed(task, now),
            doing_now(task),
        )
    counts = ", ".join(f"{n} {task_state}" for task_state, n in state.counts().items())
    lines = ["", f"Plan {state.plan_id}: {state.status}, {summary_line(state)}", f"Tasks: {counts}"]
    if state.tokens.runs:
        lines.append(f"Tokens: {state.tokens.describe()}")
    if said := state.messages.summary():
        lines.append(f"Team messages: {said}")
    lines += [f"Waiting for {what}" for what in waiting_for]
    if TaskState.AWAITING_APPROVAL in state.counts():
        lines.append(
            f"Decide with `coord plan approve {state.plan_id} TASK` "
            "(`--reject --reason TEXT` to reject)"
        )
    if state.scratchpad_error:
        lines.append(f"Scratchpad not written: {state.scratchpad_error}")
    return Group(view, *map(Text, lines))


def task_elapsed(task: TaskRecord, now: datetime) -> str:
    if task.started_at is None:
        return "-"
    return elapsed((task.ended_at or now) - task.started_at)


def doing_now(task: TaskRecord) -> str:
    """A running task's latest progress (or what it does); an ended one's outcome."""
    if task.state in ENDED_TASK_STATES or task.error is not None:
        return outcome(task)
    if task.state in ACTIVE_TASK_STATES:
        return task.progress or task.summary or "-"
    return task.summary or "-"


def diff_table(diff: CorrelationDiff) -> Group:
    """Two correlations side by side, one aligned row per event, and the counts under them."""
    labels = {
        RowStatus.SAME: "same",
        RowStatus.CHANGED: "changed",
        RowStatus.ONLY_LEFT: f"only in {diff.left}",
        RowStatus.ONLY_RIGHT: f"only in {diff.right}",
    }
    view = table("", "Event", diff.left, diff.right, "What differs")
    for row in diff.rows:
        view.add_row(
            status(row.status.value, labels[row.status]),
            Text(row.event, style="bold"),
            _side(row.left),
            _side(row.right),
            ", ".join(row.changed) or "-",
        )
    counts = ", ".join(f"{n} {labels[s]}" for s, n in diff.counts().items())
    return Group(view, Text(counts))


def _side(entry: TimelineEntry | None) -> str:
    return f"{entry.agent} {entry.event_id}" if entry is not None else "-"


def agents_activity(view: AgentsView) -> Table:
    """Per-agent activity (`coord events C --replay-into agents`), by agent name."""
    shown = table("Agent", "Events", "Runs", "Succeeded", "Failed", "Last event")
    for name in sorted(view.agents):
        a = view.agents[name]
        last = f"{a.last_event} (#{a.last_seq})"
        shown.add_row(
            name, f"{a.events:,}", f"{a.runs:,}", f"{a.successes:,}", f"{a.failures:,}", last
        )
    return shown
