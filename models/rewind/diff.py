"""Two correlations side by side, each row aligned with its counterpart by what caused it.

Time and position cannot align two runs of the same story: a copy's agents answer at other
moments and its events get new ids. What stays is the causation: an event is "the `TestsPassed`
that the first `CodeWritten` caused". So each row gets an alignment key: its own id where both
logs hold that id (the rows a rewound copy took over as they stood, the events re-delivered
from outside), otherwise its type under its cause's key, numbered among its siblings of the
same type in log order. Rows with equal keys are one row of the diff: the same, or changed
(their payloads or sources differ); the others are only in one of the two."""

from collections import Counter
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from coord.models.events.timeline import TimelineEntry


class RowStatus(StrEnum):
    SAME = "same"
    CHANGED = "changed"
    ONLY_LEFT = "only_left"
    ONLY_RIGHT = "only_right"


class RowDiff(BaseModel):
    """One aligned row: the event as each side has it (None where that side lacks it)."""

    key: str
    status: RowStatus
    event: str
    left: TimelineEntry | None = None
    right: TimelineEntry | None = None
    changed: list[str] = Field(default_factory=list)
    """What differs between the two: `source`, or `payload.<field>` for each payload field."""


class CorrelationDiff(BaseModel):
    left: str
    right: str
    rows: list[RowDiff] = Field(default_factory=list)

    def counts(self) -> dict[RowStatus, int]:
        """How many rows of each status, every status named (zero included)."""
        found = Counter(row.status for row in self.rows)
        return {status: found[status] for status in RowStatus}

    @property
    def differs(self) -> bool:
        return any(row.status is not RowStatus.SAME for row in self.rows)


def alignment_keys(rows: Sequence[TimelineEntry], shared_ids: set[str]) -> dict[str, str]:
    """Each row's alignment key by event id (see the module's docstring). A cause outside the
    log (an event the correlation never held) is named by its id, the same on both sides."""
    keys: dict[str, str] = {}
    siblings: Counter[str] = Counter()
    for row in sorted(rows, key=lambda entry: entry.seq):
        if row.event_id in shared_ids:
            keys[row.event_id] = f"id:{row.event_id}"
            continue
        cause = row.causation_id or ""
        base = f"{row.event}<-{keys.get(cause, cause)}"
        siblings[base] += 1
        keys[row.event_id] = f"{base}#{siblings[base]}"
    return keys


def diff_logs(
    left_id: str,
    left: Sequence[TimelineEntry],
    right_id: str,
    right: Sequence[TimelineEntry],
) -> CorrelationDiff:
    """The two logs aligned row by row, in the left log's order, each row only in the right
    placed by its own position in the right log."""
    shared = {row.event_id for row in left} & {row.event_id for row in right}
    left_keys = alignment_keys(left, shared)
    right_rows = {key: row for row, key in _keyed(right, alignment_keys(right, shared))}
    ordered: list[tuple[tuple[int, int], RowDiff]] = []
    for row, key in _keyed(left, left_keys):
        counterpart = right_rows.pop(key, None)
        ordered.append(((row.seq, 0), _compared(key, row, counterpart)))
    for key, row in right_rows.items():
        only = RowDiff(key=key, status=RowStatus.ONLY_RIGHT, event=row.event, right=row)
        ordered.append(((row.seq, 1), only))
    ordered.sort(key=lambda item: item[0])
    return CorrelationDiff(left=left_id, right=right_id, rows=[row for _, row in ordered])


def _keyed(rows: Sequence[TimelineEntry], keys: dict[str, str]) -> list[tuple[TimelineEntry, str]]:
    return [(row, keys[row.event_id]) for row in sorted(rows, key=lambda entry: entry.seq)]


def _compared(key: str, left: TimelineEntry, right: TimelineEntry | None) -> RowDiff:
    if right is None:
        return RowDiff(key=key, status=RowStatus.ONLY_LEFT, event=left.event, left=left)
    changed = changed_fields(left, right)
    status = RowStatus.CHANGED if changed else RowStatus.SAME
    return RowDiff(
        key=key, status=status, event=left.event, left=left, right=right, changed=changed
    )


def changed_fields(left: TimelineEntry, right: TimelineEntry) -> list[str]:
    """What an operator would call a different outcome: who published it, or what it says."""
    changed = ["source"] if left.agent != right.agent else []
    fields = sorted(set(left.payload) | set(right.payload))
    missing: Any = object()
    return changed + [
        f"payload.{name}"
        for name in fields
        if left.payload.get(name, missing) != right.payload.get(name, missing)
    ]
