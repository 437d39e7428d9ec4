"""A correlation's whole event log, kept outside the chain: segments of timeline rows.

A chain keeps only a window of its timeline in memory (for its own matching); every row it
records is also written, in order, to the payload store in segments of consecutive rows, each
named by its correlation and its first and last sequence number. The sequence number is the
chain's own (`TimelineEntry.seq`: one per recorded event, continued across continue-as-new),
so the log's order is the chain's logical order, never a clock's.

Each row a chain records also carries its `position` in the log (`TimelineEntry.position`:
1, 2, 3, ... with no gaps, across segments and continue-as-new), since sequence numbers have gaps
of their own (queued runs share the count) and cannot tell a lost row from a run. A reader feeds
the rows it gives to a `LogCheck`, which proves the log whole or names what is missing: a
segment lost or unreadable, rows missing between two segments, the first or the last rows.

A segment's name is its whole identity: writing it again (a retried activity) writes the same
object, and a reader joins segments by sequence number, skipping any row it has already given,
so overlapping or repeated segments never duplicate a row. Pure: the store and the workflow
are elsewhere."""

import itertools
import re
from collections.abc import Iterable, Iterator
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coord.models.events.timeline import TimelineEntry
from coord.models.wire.sizes import json_size

SEGMENT_ROWS = 200
"""Rows a segment holds at most: the chain's window, so a chain writes once per window's worth
of events."""
SEGMENT_BYTES = 1024 * 1024
"""Payload bytes a segment holds at most (a row larger than this is a segment of its own)."""
PAGE_ROWS = 200
"""Rows a reader asks for at a time by default."""
MAX_PAGE_ROWS = 5000
SEGMENT_NAME = re.compile(r"(?P<first>[0-9]{12})-(?P<last>[0-9]{12})\.json")


class LogSegment(BaseModel):
    """Consecutive rows of one correlation's log, `first` to `last` by sequence number."""

    model_config = ConfigDict(extra="forbid")

    correlation_id: str = Field(min_length=1)
    rows: list[TimelineEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _in_order(self) -> Self:
        seqs = [row.seq for row in self.rows]
        if seqs != sorted(set(seqs)):
            raise ValueError("rows: not in increasing sequence order")
        for row, after in itertools.pairwise(self.rows):
            if row.position is None or after.position is None:
                continue
            if after.position != row.position + 1:
                raise ValueError(f"rows: position {after.position} follows {row.position}")
        return self

    @property
    def first(self) -> int:
        return self.rows[0].seq

    @property
    def last(self) -> int:
        return self.rows[-1].seq

    @property
    def name(self) -> str:
        return segment_name(self.first, self.last)


def segment_name(first: int, last: int) -> str:
    """Zero-padded, so names sort as their sequence numbers do."""
    return f"{first:012d}-{last:012d}.json"


def segment_span(name: str) -> tuple[int, int] | None:
    """The first and last sequence numbers a segment's name gives; None for another name."""
    match = SEGMENT_NAME.fullmatch(name)
    return (int(match["first"]), int(match["last"])) if match else None


def next_segment(rows: list[TimelineEntry], after: int) -> list[TimelineEntry]:
    """The rows of the next segment to write: those after sequence `after`, oldest first, up to
    `SEGMENT_ROWS` rows and `SEGMENT_BYTES` of payload (at least one row)."""
    pending = [row for row in rows if row.seq > after]
    taken: list[TimelineEntry] = []
    size = 0
    for row in pending[:SEGMENT_ROWS]:
        size += json_size(row.payload)
        if taken and size > SEGMENT_BYTES:
            break
        taken.append(row)
    return taken


def segments_from(names: Iterable[str], since: int) -> list[str]:
    """The segment names that may hold rows after `since`, in sequence order."""
    spans = [(span, name) for name in names if (span := segment_span(name)) is not None]
    return [name for span, name in sorted(spans) if span[1] > since]


def joined(parts: Iterable[Iterable[TimelineEntry]], since: int) -> Iterator[TimelineEntry]:
    """The rows after `since` of parts given in sequence order (stored segments, then the live
    window), each row once: a row at or before the last one given is skipped, so overlapping
    parts (a segment written twice, the live window holding rows already stored) add nothing."""
    last = since
    for part in parts:
        for row in part:
            if row.seq > last:
                last = row.seq
                yield row


class LogGap(BaseModel):
    """Rows missing from a log: its positions `first` to `last`, between the rows numbered
    `after_seq` and `before_seq` (None: the log's start, or its end)."""

    first: int
    last: int
    after_seq: int | None
    before_seq: int | None

    def describe(self) -> str:
        events = (
            f"event {self.first}" if self.first == self.last else f"events {self.first}-{self.last}"
        )
        if self.after_seq is None and self.before_seq is None:
            return f"{events} (all of them)"
        if self.after_seq is None:
            return f"{events} (its first, before sequence number {self.before_seq})"
        if self.before_seq is None:
            return f"{events} (its last, after sequence number {self.after_seq})"
        return f"{events} (between sequence numbers {self.after_seq} and {self.before_seq})"


class LogCheck:
    """What a reader of a log saw, row by row in its order: whether it is whole. A row with a
    position must follow the last one given (`from_start`: the first must be 1); a row without
    one (recorded before chains numbered their rows) cannot be checked, and is counted, so the
    reader can say that part is unknown. A segment that cannot be read is named, and the rows it
    held show as a gap once a later row (or the chain's count, `end`) says where the log goes on."""

    def __init__(self, *, from_start: bool = True) -> None:
        self.gaps: list[LogGap] = []
        self.unreadable: list[str] = []
        self.unnumbered = 0
        self.rows = 0
        self._next: int | None = 1 if from_start else None
        self._last_seq: int | None = None

    def row(self, row: TimelineEntry) -> None:
        self.rows += 1
        if row.position is None:
            self.unnumbered += 1
            self._next = None
        elif self._next is not None and row.position > self._next:
            self.gaps.append(
                LogGap(
                    first=self._next,
                    last=row.position - 1,
                    after_seq=self._last_seq,
                    before_seq=row.seq,
                )
            )
        if row.position is not None:
            self._next = row.position + 1
        self._last_seq = row.seq

    def segment_unreadable(self, name: str) -> None:
        self.unreadable.append(name)

    def end(self, recorded: int | None) -> None:
        """The log has no more rows; an ended chain recorded `recorded` in all (None: it runs,
        and its newest rows were read from it)."""
        if recorded is not None and self._next is not None and recorded >= self._next:
            self.gaps.append(
                LogGap(first=self._next, last=recorded, after_seq=self._last_seq, before_seq=None)
            )

    @property
    def whole(self) -> bool:
        """Nothing found missing (with `unnumbered` rows, only as far as can be told)."""
        return not self.gaps and not self.unreadable

    def missing(self) -> str:
        """What is missing, in a few words: `events 201-400 (between sequence numbers 215 and
        431); segment 000000000216-000000000430.json unreadable`."""
        parts = [gap.describe() for gap in self.gaps]
        parts += [f"segment {name} unreadable" for name in self.unreadable]
        return "; ".join(parts)

    def unknown(self) -> str | None:
        """Why wholeness cannot be told for part of the log (None: it can for all of it)."""
        if not self.unnumbered:
            return None
        return (
            f"{self.unnumbered} of its {self.rows} events were recorded before chains numbered "
            "their log's rows: whether rows are missing among them cannot be told"
        )
