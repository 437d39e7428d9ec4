"""Plain-text views of coordination records for the terminal."""

from collections.abc import Sequence

from models.aggregator import AggregatorState
from models.chain import TimelineEntry

TIMELINE_COLUMNS = ("Time", "Event", "Agent", "Correlation ID", "Event ID", "Caused by")


def timeline_table(entries: Sequence[TimelineEntry]) -> str:
    """The seed's correlation table, with the ids that link each event to its cause."""
    rows = [
        (
            f"{e.time:%H:%M:%S}",
            e.event,
            e.agent,
            e.correlation_id,
            e.event_id,
            e.causation_id or "-",
        )
        for e in entries
    ]
    widths = [
        max(len(str(cell)) for cell in column)
        for column in zip(TIMELINE_COLUMNS, *rows, strict=False)
    ]
    lines = [
        " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in [TIMELINE_COLUMNS, *rows]
    ]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(lines)


def causation_tree(entries: Sequence[TimelineEntry]) -> str:
    """Which event caused which: roots are events whose cause is not in the log."""
    known = {e.event_id for e in entries}
    children: dict[str | None, list[TimelineEntry]] = {}
    for entry in entries:
        parent = entry.causation_id if entry.causation_id in known else None
        children.setdefault(parent, []).append(entry)
    lines: list[str] = []

    def walk(parent: str | None, prefix: str) -> None:
        kids = children.get(parent, [])
        for index, entry in enumerate(kids):
            last = index == len(kids) - 1
            branch = "" if parent is None else ("└─ " if last else "├─ ")
            lines.append(f"{prefix}{branch}{entry.event} ({entry.agent}, {entry.time:%H:%M:%S})")
            walk(entry.event_id, prefix + ("" if parent is None else ("   " if last else "│  ")))

    walk(None, "")
    return "\n".join(lines)


def aggregator_table(state: AggregatorState) -> str:
    """The seed's aggregation status table and count line."""
    rows = [
        (
            slot.type + (f" from {slot.source}" if slot.source else ""),
            "✅ Received" if slot.status == "received" else "⏳ Waiting",
            f"{slot.received_at:%H:%M:%S}" if slot.received_at else "-",
        )
        for slot in state.slots
    ]
    header = ("Event", "Status", "Received At")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    lines = [
        " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [header, *rows]
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    lines += ["", f"Aggregation Status: {state.progress}"]
    if state.deadline is not None:
        left = f" ({state.seconds_left:.0f}s left)" if state.seconds_left is not None else ""
        lines.append(f"Deadline: {state.deadline:%Y-%m-%d %H:%M:%S} UTC{left}")
    if state.emitted is not None:
        lines.append(f"Emitted: {state.emitted.event.type} ({state.emitted.event.id})")
    return "\n".join(lines)
