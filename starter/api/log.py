"""A correlation's whole log, read page by page, and read models rebuilt by replaying it.

The log is the segments its chain wrote to the payload store (coord.infra.event_log) joined with
the rows its chain still holds in memory (its `timeline` query), in the chain's sequence order,
each row once. A running chain's window is read first and the store after it: a row the chain
dropped from its window before the query was written before it was dropped, so the store read
after holds it, and no row falls between the two. An ended chain wrote every row when it ended,
so its log is read from the store alone (no worker needed), unless it ended before chains wrote
their logs (then what its window kept is all there is)."""

from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from coord.infra.event_log import SegmentStore, segment_store
from coord.models.events.log import (
    MAX_PAGE_ROWS,
    PAGE_ROWS,
    joined,
    segment_span,
    segments_from,
)
from coord.models.events.timeline import TimelineEntry
from coord.models.events.views import view_named
from coord.starter.api.chains import chain_handle, chain_state, chain_timeline
from coord.starter.api.common import NotFound, api_call, closed_with_result


class LogPage(BaseModel):
    """Up to a page of the log's rows after `since`, oldest first; `next_since` is where the
    next page starts (None: no more rows for now)."""

    rows: list[TimelineEntry]
    next_since: int | None


def checked_page_size(page_size: int) -> int:
    if not 1 <= page_size <= MAX_PAGE_ROWS:
        raise ValueError(f"page_size: {page_size} is not between 1 and {MAX_PAGE_ROWS}")
    return page_size


async def _window(client: Client, correlation_id: str) -> tuple[list[TimelineEntry], int | None]:
    """The rows the chain holds in memory (none once it has ended), and how many events an
    ended chain recorded (None while it runs). NotFound when the correlation has no chain."""
    handle = chain_handle(client, correlation_id)
    try:
        if await closed_with_result(handle):
            return [], (await chain_state(client, correlation_id)).events_seen
        return await chain_timeline(client, correlation_id), None
    except NotFound:
        raise NotFound(f"no chain for correlation id {correlation_id!r}") from None
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(f"no chain for correlation id {correlation_id!r}") from None
        raise


async def _stored(
    store: SegmentStore, correlation_id: str, since: int, page_size: int
) -> tuple[list[TimelineEntry], int]:
    """Up to `page_size` stored rows after `since`, reading only the segments it needs, and the
    last sequence number the store holds (0: none)."""
    names = await store.names(correlation_id)
    spans = [span for name in names if (span := segment_span(name)) is not None]
    return await _segments_read(store, correlation_id, names, since, page_size), max(
        (last for _, last in spans), default=0
    )


async def _segments_read(
    store: SegmentStore, correlation_id: str, names: list[str], since: int, page_size: int
) -> list[TimelineEntry]:
    rows: list[TimelineEntry] = []
    last = since
    for name in segments_from(names, since):
        segment = await store.read(correlation_id, name)
        rows += joined([segment.rows], last)
        last = rows[-1].seq if rows else last
        if len(rows) >= page_size:
            break
    return rows[:page_size]


@api_call
async def read_log_page(
    client: Client,
    correlation_id: str,
    *,
    since: int | None = None,
    page_size: int = PAGE_ROWS,
    store: SegmentStore | None = None,
) -> LogPage:
    """The log's rows after sequence number `since` (from the start: None or 0), at most
    `page_size` (1 to `MAX_PAGE_ROWS`)."""
    checked_page_size(page_size)
    start = since or 0
    store = store or segment_store()
    window, recorded = await _window(client, correlation_id)
    stored, stored_up_to = await _stored(store, correlation_id, start, page_size)
    if recorded is not None and stored_up_to < recorded:
        window = await _ended_window(client, correlation_id)
    rows = list(joined([stored, window], start))[:page_size]
    return LogPage(rows=rows, next_since=rows[-1].seq if len(rows) == page_size else None)


async def _ended_window(client: Client, correlation_id: str) -> list[TimelineEntry]:
    """An ended chain whose store does not reach its last row (it ended before chains wrote
    their logs): what its window kept, by query (a worker replays it)."""
    return await chain_timeline(client, correlation_id)


async def read_log(
    client: Client,
    correlation_id: str,
    *,
    since: int | None = None,
    page_size: int = PAGE_ROWS,
    store: SegmentStore | None = None,
) -> AsyncIterator[TimelineEntry]:
    """Every row of the correlation's log after `since`, oldest first (each with its `seq`, the
    chain's sequence number: `since` for a later read), read `page_size` rows at a time."""
    store = store or segment_store()
    cursor: int | None = since
    while True:
        page = await read_log_page(
            client, correlation_id, since=cursor, page_size=page_size, store=store
        )
        for row in page.rows:
            yield row
        if page.next_since is None:
            return
        cursor = page.next_since


@api_call
async def replay_into(
    client: Client,
    correlation_id: str,
    view: str,
    *,
    page_size: int = PAGE_ROWS,
    store: SegmentStore | None = None,
) -> Any:
    """The read model `view` (coord.models.events.views: `table`, `agents`) rebuilt by folding
    every row of the log, page by page. A ValueError names the views when there is no `view`."""
    chosen = view_named(view)
    state = chosen.start()
    async for row in read_log(client, correlation_id, page_size=page_size, store=store):
        state = chosen.step(state, row)
    return state
