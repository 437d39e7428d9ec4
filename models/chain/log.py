"""The chain's side of its log (coord.models.events.log): which rows wait to be written, the next
segment, and what was written. A run that writes its log keeps every row not yet written in its
timeline (the window trims only written rows) and carries them across continue-as-new, so a row
can leave the chain's memory only once it is in the store. The workflow writes a segment when a
full one waits (`due`), so the hot path pays one activity per `SEGMENT_ROWS` events, and writes
what is left when the chain ends."""

from bisect import bisect_right
from collections.abc import Callable

from coord.models.chain.spec import ChainCarry
from coord.models.events.log import SEGMENT_BYTES, SEGMENT_ROWS, LogSegment, next_segment
from coord.models.events.timeline import TimelineEntry
from coord.models.wire.sizes import json_size


def by_seq(row: TimelineEntry) -> int:
    return row.seq


class ChainLog:
    def __init__(self, record: ChainCarry, timeline_bytes: Callable[[], int]) -> None:
        self._record = record
        self._timeline_bytes = timeline_bytes
        self._summed_to = record.logged
        self._pending_bytes = 0
        """The payload bytes of the rows not written yet, summed up to row `_summed_to`: each
        row is measured once, however many workflow tasks ask `due`."""
        self.enabled = False
        """Set once the run starts: whether it writes its log (runs recorded before did not)."""

    def keep_after(self) -> int | None:
        """The sequence number after which the timeline's rows must stay in memory (None: the
        window alone decides)."""
        return self._record.logged if self.enabled else None

    def due(self) -> bool:
        """A full segment waits: `SEGMENT_ROWS` rows, or `SEGMENT_BYTES` of payload (measured
        only when the whole timeline holds that much: this is asked every workflow task)."""
        pending = self._pending()
        if pending >= SEGMENT_ROWS:
            return True
        if not pending or self._timeline_bytes() < SEGMENT_BYTES:
            return False
        for row in self._record.timeline[-pending:]:
            if row.seq > self._summed_to:
                self._pending_bytes += json_size(row.payload)
                self._summed_to = row.seq
        return self._pending_bytes >= SEGMENT_BYTES

    def pending(self) -> bool:
        """Rows wait to be written (at the end, however few)."""
        return self._pending() > 0

    def _pending(self) -> int:
        """Rows not written yet: those numbered after `logged` (the timeline is in sequence
        order; its numbers rise with gaps, since queued runs take numbers from the same count)."""
        if not self.enabled:
            return 0
        timeline = self._record.timeline
        return len(timeline) - bisect_right(timeline, self._record.logged, key=by_seq)

    def next_segment(self) -> LogSegment:
        """The oldest rows not written yet, a segment's worth; only when `pending`."""
        record = self._record
        rows = next_segment(record.timeline, record.logged)
        return LogSegment(correlation_id=record.state.correlation_id, rows=rows)

    def written(self, segment: LogSegment) -> None:
        """The segment is in the store; the rows still waiting are measured again."""
        self._record.logged = max(self._record.logged, segment.last)
        self._summed_to, self._pending_bytes = self._record.logged, 0
