"""A correlation's whole event log, kept outside the chain: segments of timeline rows.

A chain keeps only a window of its timeline in memory (for its own matching); every row it
records is also written, in order, to the payload store in segments of consecutive rows, each
named by its correlation and its first and last sequence number. The sequence number is the
chain's own (`TimelineEntry.seq`: one per recorded event, continued across continue-as-new),
so the log's order is the chain's logical order, never a clock's.

A segment's name is its whole identity: writing it again (a retried activity) writes the same
object, and a reader joins segments by sequence number, skipping any row it has already given,
so overlapping or repeated segments never duplicate a row. Pure: the store and the workflow
are elsewhere."""

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
