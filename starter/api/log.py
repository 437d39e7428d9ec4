"""A correlation's whole log, read page by page, and read models rebuilt by replaying it.

The log is the segments its chain wrote to the payload store (coord.infra.event_log) joined with
the rows its chain still holds in memory (its `timeline` query), in the chain's sequence order,
each row once. A running chain's window is read first and the store after it: a row the chain
dropped from its window before the query was written before it was dropped, so the store read
after holds it, and no row falls between the two. An ended chain wrote every row when it ended,
so its log is read from the store alone (no worker needed) when the store reaches its last row;
when it does not (the chain ended before chains wrote their logs, or a segment is gone), what
its window kept is asked for too, which needs a worker (NoWorker without one)."""

from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client

from coord.infra.event_log import SegmentStore, segment_store
from coord.models.events.log import (
    MAX_PAGE_ROWS,
    PAGE_ROWS,
    LogCheck,
    joined,
    segment_span,
    segments_from,
)
from coord.models.events.timeline import TimelineEntry
from coord.models.events.views import view_named
from coord.starter.api.chains import chain_handle, chain_state, chain_timeline, no_chain
from coord.starter.api.common import api_call, closed_with_result, described


class LogPage(BaseModel):
    """Up to a page of the log's rows after `since`, oldest first; `next_since` is where the
    next page starts (None: no more rows for now)."""

    rows: list[TimelineEntry]
    next_since: int | None
    unreadable: list[str] = Field(default_factory=list)
    """The stored segments this page would have read but could not (gone between listing and
    reading, or not a segment any more): their rows are missing from it."""
    recorded: int | None = None
    """How many events the chain recorded in all, once it has ended (None while it runs): where
    its log must end (`LogCheck.end`)."""


def checked_page_size(page_size: int) -> int:
    if not 1 <= page_size <= MAX_PAGE_ROWS:
        raise ValueError(f"page_size: {page_size} is not between 1 and {MAX_PAGE_ROWS}")
    return page_size


async def _window(client: Client, correlation_id: str) -> tuple[list[TimelineEntry], int | None]:
    """The rows the chain holds in memory (none once it has ended), and how many events an
    ended chain recorded (None while it runs). NotFound when the correlation has no chain."""
    handle = chain_handle(client, correlation_id)
    await described(handle, no_chain(correlation_id))
    if await closed_with_result(handle):
        return [], (await chain_state(client, correlation_id)).events_seen
    return await chain_timeline(client, correlation_id), None


class Stored(BaseModel):
    """Up to a page of stored rows, the segments that could not be read on the way, and the
    last sequence number the store's segments name (0: none)."""

    rows: list[TimelineEntry] = Field(default_factory=list)
    unreadable: list[str] = Field(default_factory=list)
    up_to: int = 0


async def _stored(store: SegmentStore, correlation_id: str, since: int, page_size: int) -> Stored:
    """Up to `page_size` stored rows after `since`, reading only the segments it needs; a
    segment that cannot be read is named and passed over (its rows show as a gap)."""
    names = await store.names(correlation_id)
    spans = [span for name in names if (span := segment_span(name)) is not None]
    stored = Stored(up_to=max((last for _, last in spans), default=0))
    last = since
    for name in segments_from(names, since):
        try:
            segment = await store.read(correlation_id, name)
        except (OSError, ValidationError):
            stored.unreadable.append(name)
            continue
        stored.rows += joined([segment.rows], last)
        last = stored.rows[-1].seq if stored.rows else last
        if len(stored.rows) >= page_size:
            break
    stored.rows = stored.rows[:page_size]
    return stored


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
    stored = await _stored(store, correlation_id, start, page_size)
    if recorded is not None and stored.up_to < recorded:
        window = await _ended_window(client, correlation_id)
    rows = list(joined([stored.rows, window], start))[:page_size]
    return LogPage(
        rows=rows,
        next_since=rows[-1].seq if len(rows) == page_size else None,
        unreadable=stored.unreadable,
        recorded=recorded,
    )


async def _ended_window(client: Client, correlation_id: str) -> list[TimelineEntry]:
    """An ended chain whose store does not reach its last row (it ended before chains wrote
    their logs, or its last segment is gone: nothing read here tells which): what its window
    kept, by query (a worker replays it; NoWorker without one)."""
    return await chain_timeline(client, correlation_id)


async def read_log(
    client: Client,
    correlation_id: str,
    *,
    since: int | None = None,
    page_size: int = PAGE_ROWS,
    store: SegmentStore | None = None,
    check: LogCheck | None = None,
) -> AsyncIterator[TimelineEntry]:
    """Every row of the correlation's log after `since`, oldest first (each with its `seq`, the
    chain's sequence number: `since` for a later read), read `page_size` rows at a time. A
    `check` (made `from_start` when `since` is None or 0) hears every row and segment read, and
    says afterwards whether the log was whole."""
    store = store or segment_store()
    cursor: int | None = since
    while True:
        page = await read_log_page(
            client, correlation_id, since=cursor, page_size=page_size, store=store
        )
        if check is not None:
            checked_page(check, page)
        for row in page.rows:
            yield row
        if page.next_since is None:
            return
        cursor = page.next_since


def checked_page(check: LogCheck, page: LogPage) -> None:
    """The page told to `check`; the last page (no `next_since`) ends the log."""
    for name in page.unreadable:
        check.segment_unreadable(name)
    for row in page.rows:
        check.row(row)
    if page.next_since is None:
        check.end(page.recorded)


@api_call
async def replay_into(
    client: Client,
    correlation_id: str,
    view: str,
    *,
    page_size: int = PAGE_ROWS,
    store: SegmentStore | None = None,
    check: LogCheck | None = None,
) -> Any:
    """The read model `view` (coord.models.events.views: `table`, `agents`) rebuilt by folding
    every row of the log, page by page (`check` hears them: was the log whole?). A ValueError
    names the views when there is no `view`."""
    chosen = view_named(view)
    state = chosen.start()
    rows = read_log(client, correlation_id, page_size=page_size, store=store, check=check)
    async for row in rows:
        state = chosen.step(state, row)
    return state
