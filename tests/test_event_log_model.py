"""The whole log without a server: segments, joining them with the live window, the chain's side
(rows kept until written, carried across continue-as-new), the store's idempotent writes (in a
directory, and in a bucket on a local S3-compatible server), and the read models folded over
rows."""

from pathlib import Path

import aioboto3
import pytest

from coord.infra.event_log import BucketSegments, DirectorySegments, SegmentStore
from coord.models.chain.intake import TIMELINE_WINDOW
from coord.models.chain.model import ChainModel
from coord.models.events.log import (
    SEGMENT_BYTES,
    SEGMENT_ROWS,
    LogSegment,
    joined,
    next_segment,
    segment_name,
    segment_span,
    segments_from,
)
from coord.models.events.timeline import TimelineEntry
from coord.models.events.views import AgentsView, TableView, fold, view_named
from coord.starter.api.log import _stored
from tests.chain_models import NOW, event, new_model, take
from tests.test_large_payloads import s3_server  # noqa: F401  (the moto server fixture)


def row(
    seq: int, *, agent: str = "/test", cause: str | None = None, **payload: object
) -> TimelineEntry:
    return TimelineEntry(
        seq=seq,
        time=NOW,
        event=f"E{seq}",
        agent=agent,
        correlation_id="c1",
        event_id=f"e{seq}",
        causation_id=cause,
        payload=dict(payload),
    )


def rows(first: int, last: int) -> list[TimelineEntry]:
    return [row(seq) for seq in range(first, last + 1)]


def test_segment_names_sort_as_their_sequence_numbers() -> None:
    assert segment_span(segment_name(1, 200)) == (1, 200)
    assert segment_span("1-200.json") is None
    names = [segment_name(201, 400), segment_name(1, 200), "junk", segment_name(401, 450)]
    assert segments_from(names, 0) == [
        segment_name(1, 200),
        segment_name(201, 400),
        segment_name(401, 450),
    ]
    assert segments_from(names, 400) == [segment_name(401, 450)]


def test_a_segment_refuses_rows_out_of_order() -> None:
    with pytest.raises(ValueError, match="rows: not in increasing sequence order"):
        LogSegment(correlation_id="c1", rows=[row(2), row(1)])


def test_joined_gives_each_row_once_across_overlapping_parts() -> None:
    parts = [rows(1, 200), rows(150, 300), rows(1, 300), rows(290, 320)]
    assert [r.seq for r in joined(parts, 0)] == list(range(1, 321))
    assert [r.seq for r in joined(parts, 310)] == list(range(311, 321))


def test_next_segment_is_bounded_by_rows_and_bytes() -> None:
    assert [r.seq for r in next_segment(rows(1, 500), 100)] == list(range(101, 101 + SEGMENT_ROWS))
    big = "x" * (SEGMENT_BYTES // 2)
    heavy = [row(seq, blob=big) for seq in range(1, 6)]
    assert [r.seq for r in next_segment(heavy, 0)] == [1]
    assert [r.seq for r in next_segment([row(1, blob=big * 3)], 0)] == [1], "one row at least"


def logging_model() -> ChainModel:
    model = new_model(max_concurrency=1)
    model.log.enabled = True
    return model


def test_the_chain_keeps_every_row_not_written_and_carries_it() -> None:
    model = logging_model()
    for n in range(3 * TIMELINE_WINDOW):
        assert take(model, event("Noise", n=n)) == "recorded"
    timeline = model.record.timeline
    assert [r.seq for r in timeline] == list(range(1, 3 * TIMELINE_WINDOW + 1)), "none trimmed"
    assert model.log.due()
    carried = model.carry().carried
    assert carried is not None and len(carried.timeline) == 3 * TIMELINE_WINDOW


def test_written_rows_leave_the_window_and_the_rest_is_written_at_the_end() -> None:
    model = logging_model()
    written: list[LogSegment] = []
    for n in range(1, 1001):
        take(model, event("Noise", n=n))
        while model.log.due():
            segment = model.log.next_segment()
            written.append(segment)
            model.log.written(segment)
        assert len(model.record.timeline) <= 2 * TIMELINE_WINDOW + SEGMENT_ROWS
    while model.log.pending():
        segment = model.log.next_segment()
        written.append(segment)
        model.log.written(segment)
    assert [r.seq for r in joined([s.rows for s in written], 0)] == list(range(1, 1001))
    assert all(len(s.rows) == SEGMENT_ROWS for s in written)
    assert len(model.carry().carried.timeline) == TIMELINE_WINDOW  # type: ignore[union-attr]


def test_a_segment_is_due_at_its_bytes_too() -> None:
    model = logging_model()
    blob = "x" * (SEGMENT_BYTES // 4)
    for n in range(3):
        take(model, event("Big", n=n, blob=blob))
        assert not model.log.due()
    take(model, event("Big", n=3, blob=blob))
    assert model.log.due()
    segment = model.log.next_segment()
    assert [r.seq for r in segment.rows] == [1, 2, 3], "a segment stays within its bytes"
    model.log.written(segment)
    assert not model.log.due() and model.log.pending()


def test_a_run_that_does_not_write_its_log_trims_as_before() -> None:
    model = new_model(max_concurrency=1)
    for n in range(3 * TIMELINE_WINDOW):
        take(model, event("Noise", n=n))
    assert len(model.record.timeline) <= 2 * TIMELINE_WINDOW
    assert not model.log.due() and not model.log.pending()


async def check_idempotent_writes(store: SegmentStore) -> None:
    first = LogSegment(correlation_id="c1", rows=rows(1, 200))
    await store.write(first)
    await store.write(first)  # the activity retried after its write landed
    await store.write(LogSegment(correlation_id="c1", rows=rows(201, 400)))
    await store.write(LogSegment(correlation_id="c1", rows=rows(150, 300)))  # cut elsewhere
    await store.write(LogSegment(correlation_id="c2", rows=rows(1, 3)))
    assert sorted(await store.names("c1")) == [
        segment_name(1, 200),
        segment_name(150, 300),
        segment_name(201, 400),
    ]
    read, up_to = await _stored(store, "c1", 0, 10_000)
    assert [r.seq for r in read] == list(range(1, 401)) and up_to == 400
    read, up_to = await _stored(store, "c1", 250, 100)
    assert [r.seq for r in read] == list(range(251, 351)) and up_to == 400
    assert await store.correlations(None, 10) == ["c1", "c2"]
    assert await store.correlations("c1", 10) == ["c2"]
    assert await store.correlations(None, 1) == ["c1"]
    assert await store.newest("c1") is not None
    await store.remove("c1")
    assert await store.names("c1") == [] and await store.newest("c1") is None
    assert await store.correlations(None, 10) == ["c2"]


async def test_a_retried_segment_write_never_duplicates_a_row(tmp_path: Path) -> None:
    await check_idempotent_writes(DirectorySegments(tmp_path))


async def test_a_bucket_keeps_segments_as_a_directory_does(
    s3_server: str,  # noqa: F811  (the fixture)
) -> None:
    async with aioboto3.Session().client("s3") as s3:
        await s3.create_bucket(Bucket=s3_server)
    await check_idempotent_writes(BucketSegments(s3_server))


async def test_the_store_refuses_a_correlation_id_that_is_not_an_identifier(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="correlation_id"):
        await DirectorySegments(tmp_path).names("../elsewhere")


def agent_rows() -> list[TimelineEntry]:
    return [
        row(1, agent="/pm"),
        row(2, agent="/planner", cause="e1"),
        row(3, agent="/planner", cause="e1"),
        row(4, agent="/coder", cause="e2"),
        row(5, agent="/coder", cause="e3", error="boom"),
        row(6, agent="/coder", cause="e4"),
    ]


def test_the_agents_view_counts_runs_successes_and_failures() -> None:
    view: AgentsView = fold(view_named("agents"), agent_rows())
    coder, planner = view.agents["/coder"], view.agents["/planner"]
    assert (coder.events, coder.runs, coder.successes, coder.failures) == (3, 3, 2, 1)
    assert (coder.last_event, coder.last_seq) == ("E6", 6)
    assert (planner.events, planner.runs, planner.successes, planner.failures) == (2, 1, 1, 0)


def test_a_view_folded_page_by_page_equals_one_folded_at_once() -> None:
    whole = agent_rows()
    for name in ("table", "agents"):
        view = view_named(name)
        paged = fold(view, whole[:2])
        paged = fold(view, whole[2:5], paged)
        paged = fold(view, whole[5:], paged)
        assert paged == fold(view, whole)
    table: TableView = fold(view_named("table"), whole)
    assert table.rows == whole


def test_an_unknown_view_is_refused_naming_the_views() -> None:
    with pytest.raises(ValueError, match=r"--replay-into: no view 'nope' \(views: agents, table\)"):
        view_named("nope")
