"""Writing a chain's log to the payload store, a segment at a time (coord.infra.event_log)."""

from functools import cached_property

from temporalio import activity

from coord.infra.event_log import SegmentStore, segment_store
from coord.models import calls as refs
from coord.models.events.log import LogSegment


class LogWriter:
    """The store is opened at first use, so a worker whose chains write nothing never opens it."""

    @cached_property
    def _store(self) -> SegmentStore:
        return segment_store()

    @activity.defn(name=refs.WRITE_LOG_SEGMENT.name)
    async def write_log_segment(self, segment: LogSegment) -> None:
        """Idempotent: the segment's name is its correlation and sequence span, so a retried
        write replaces the object with the same rows."""
        await self._store.write(segment)
