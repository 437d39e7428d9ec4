"""Plain-text views of coordination records for the terminal."""

from collections.abc import Sequence

from coord.models.aggregator import AggregatorState
from coord.models.chain import TimelineEntry
from coord.models.contract import dlq_action
from coord.models.dlq import ENTRY_STATUSES, DlqCounts, EntrySummary

TIMELINE_COLUMNS = ("Time", "Event", "Agent", "Correlation ID", "Event ID", "Caused by")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns, a rule under the header."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [header, *rows]
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return lines


def timeline_table(entries: Sequence[TimelineEntry]) -> str:
    """The seed's correlation table, with the ids that link each event to its cause."""
    rows = [
        (
            f"{e.time:%H:%M:%S}",
            e.event,
            e.agent,
            e.correlation_id,
            e.event_id,
            ", ".join(e.causes) or e.causation_id or "-",
        )
        for e in entries
    ]
    return "\n".join(table(TIMELINE_COLUMNS, rows))


def causation_tree(entries: Sequence[TimelineEntry]) -> str:
    """Which event caused which: roots are events whose cause is not in the log."""
    known = {e.event_id: e for e in entries}
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
            causes = _joined_causes(entry, known)
            lines.append(
                f"{prefix}{branch}{entry.event} ({entry.agent}, {entry.time:%H:%M:%S}){causes}"
            )
            walk(entry.event_id, prefix + ("" if parent is None else ("   " if last else "│  ")))

    walk(None, "")
    return "\n".join(lines)


def _joined_causes(entry: TimelineEntry, known: dict[str, TimelineEntry]) -> str:
    """` ← A + B` for an event a join caused: the tree shows it under one cause, this names all."""
    if len(entry.causes) < 2:
        return ""
    return " ← " + " + ".join(known[c].event if c in known else c for c in entry.causes)


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
    lines = table(("Event", "Status", "Received At"), rows)
    lines += ["", f"Aggregation Status: {state.progress}"]
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
    return "\n".join(lines)


def dlq_table(entries: Sequence[EntrySummary]) -> str:
    """The seed's DLQ table: event, type, failure reason, retries, target, status and action."""
    header = ("Entry", "Event ID", "Type", "Failure", "Retries", "Target", "Status", "Action")
    rows = [
        (
            e.entry_id,
            e.event_id or "-",
            e.event_type or "(invalid)",
            f"{e.failure_type}: {e.message}"[:60],
            str(e.attempts),
            (e.target_workflow or "-") + (f" / {e.target_agent}" if e.target_agent else ""),
            e.status,
            e.action,
        )
        for e in entries
    ]
    return "\n".join(table(header, rows))


def dlq_counts_table(counts: DlqCounts) -> str:
    """Entries by failure type and status, with the action each failure type calls for."""
    header = ("Failure type", "Action", *(status.capitalize() for status in ENTRY_STATUSES))
    rows = [
        (kind, dlq_action(kind), *map(str, by_status.in_order()))
        for kind, by_status in counts.by_failure_type.items()
    ]
    rows.append(("Total", "", *map(str, counts.total.in_order())))
    return "\n".join(table(header, rows))
