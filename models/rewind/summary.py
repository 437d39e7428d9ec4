"""Count what changed between many originals and their rewound copies.

Each pair is compared twice: by its rows (`diff_logs`: how many are the same, changed or only
on one side) and by its outcome, what an operator asks first: did the copy get further than the
original? A chain's outcome is read off its record: it reached its terminal event (or was
completed), it failed (an agent run or an event went to the dead-letter queue and the end was
not reached), it still runs without having failed, or it was closed before its end."""

from collections import Counter
from enum import StrEnum

from pydantic import BaseModel, Field, computed_field

from coord.models.rewind.diff import CorrelationDiff, RowStatus


class Outcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    RUNNING = "running"
    CLOSED = "closed"


class ChainRecord(BaseModel):
    """The part of a chain's record an outcome is read from."""

    status: str
    terminal_seen: bool = False
    dead_lettered: int = 0


def outcome_of(record: ChainRecord) -> Outcome:
    """Reaching the end wins over failures on the way (a retried run that went on)."""
    if record.terminal_seen or record.status == "completed":
        return Outcome.COMPLETED
    if record.dead_lettered:
        return Outcome.FAILED
    if record.status in {"running", "paused"}:
        return Outcome.RUNNING
    return Outcome.CLOSED


class PairSummary(BaseModel):
    """One original beside its copy."""

    original: str
    copy_id: str
    original_outcome: Outcome
    copy_outcome: Outcome
    original_record: ChainRecord
    copy_record: ChainRecord
    rows: dict[RowStatus, int]
    rows_differ: bool

    @computed_field  # type: ignore[prop-decorator]
    @property
    def change(self) -> str | None:
        """`failed -> completed`, or None when both ended alike."""
        if self.original_outcome is self.copy_outcome:
            return None
        return f"{self.original_outcome.value} -> {self.copy_outcome.value}"


def pair_summary(
    compared: CorrelationDiff, original: ChainRecord, copy: ChainRecord
) -> PairSummary:
    return PairSummary(
        original=compared.left,
        copy_id=compared.right,
        original_outcome=outcome_of(original),
        copy_outcome=outcome_of(copy),
        original_record=original,
        copy_record=copy,
        rows=compared.counts(),
        rows_differ=compared.differs,
    )


class DiffSummary(BaseModel):
    """Every pair compared, and the counts `coord diff --summary` prints."""

    pairs: list[PairSummary] = Field(default_factory=list)
    without_copy: list[str] = Field(default_factory=list)
    """The originals selected that have no copy of the suffix (not rewound, or refused)."""
    compared: int = 0
    outcomes_changed: dict[str, int] = Field(default_factory=dict)
    """How many pairs changed outcome, by way (`failed -> completed`)."""
    rows_differ: int = 0


def summarise(pairs: list[PairSummary], without_copy: list[str]) -> DiffSummary:
    changes = Counter(pair.change for pair in pairs if pair.change)
    return DiffSummary(
        pairs=pairs,
        without_copy=without_copy,
        compared=len(pairs),
        outcomes_changed=dict(sorted(changes.items())),
        rows_differ=sum(pair.rows_differ for pair in pairs),
    )


def summary_lines(summary: DiffSummary) -> list[str]:
    """What `coord diff --summary` prints: the counts, one a line."""
    changed = sum(summary.outcomes_changed.values())
    lines = [
        f"{summary.compared} pairs compared",
        f"{changed} outcomes changed",
        *(f"  {way}: {n}" for way, n in summary.outcomes_changed.items()),
        f"{summary.rows_differ} pairs whose rows differ",
    ]
    if summary.without_copy:
        lines.append(f"{len(summary.without_copy)} originals without a copy")
    return lines
