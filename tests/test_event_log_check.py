"""Proving a log whole without a server: the chain numbers its rows (positions, with no gaps
across segments and continue-as-new), and a reader's `LogCheck` names what is missing (a lost
or unreadable segment, rows between segments, the first or the last rows), or says that rows
written before the numbering cannot be checked."""

import pytest

from coord.models.chain.model import ChainModel
from coord.models.events.log import LogCheck, LogSegment
from coord.models.events.timeline import TimelineEntry
from coord.models.rewind.plan import RewindRefused, require_whole_log
from tests.chain_models import NOW, WORKFLOW_ID, FixedRun, event, new_model, take


def numbering_model() -> ChainModel:
    model = new_model(max_concurrency=1)
    model.log.enabled = True
    model.intake.numbers_rows = True
    return model


def written(model: ChainModel) -> list[LogSegment]:
    """Every row waiting, written as the workflow writes it: segment by segment."""
    segments: list[LogSegment] = []
    while model.log.pending():
        segment = model.log.next_segment()
        segments.append(segment)
        model.log.written(segment)
    return segments


def checked(rows: list[TimelineEntry], recorded: int | None = None) -> LogCheck:
    check = LogCheck()
    for row in rows:
        check.row(row)
    check.end(recorded)
    return check


def row(seq: int, position: int | None) -> TimelineEntry:
    return TimelineEntry(
        seq=seq,
        time=NOW,
        event="E",
        agent="/test",
        correlation_id="c1",
        event_id=f"e{seq}",
        causation_id=None,
        position=position,
    )


def test_rows_are_numbered_without_gaps_across_segments_and_continue_as_new() -> None:
    model = numbering_model()
    for n in range(450):
        take(model, event("Noise", n=n))
    segments = written(model)
    carried = ChainModel(model.carry(), WORKFLOW_ID, FixedRun())
    carried.log.enabled = carried.intake.numbers_rows = True
    for n in range(450, 500):
        take(carried, event("Noise", n=n))
    segments += written(carried)
    rows = [r for segment in segments for r in segment.rows]
    assert [r.position for r in rows] == list(range(1, 501))
    assert len(segments) == 4 and checked(rows, recorded=500).whole


def test_a_run_recorded_before_the_numbering_leaves_rows_unnumbered() -> None:
    model = new_model(max_concurrency=1)
    take(model, event("Noise"))
    assert model.record.timeline[0].position is None


def test_a_lost_middle_segment_is_named_by_its_positions_and_sequence_numbers() -> None:
    model = numbering_model()
    for n in range(600):
        take(model, event("Noise", n=n))
    first, _lost, *rest = written(model)
    check = checked([r for segment in [first, *rest] for r in segment.rows], recorded=600)
    assert not check.whole
    assert check.missing() == "events 201-400 (between sequence numbers 200 and 401)"


def test_the_first_and_the_last_rows_missing_are_gaps_too() -> None:
    check = checked([row(7, 3), row(8, 4)], recorded=6)
    assert check.missing() == (
        "events 1-2 (its first, before sequence number 7); "
        "events 5-6 (its last, after sequence number 8)"
    )
    assert checked([], recorded=3).missing() == "events 1-3 (all of them)"
    assert checked([row(1, 1), row(5, 2)], recorded=2).whole, "sequence gaps are runs"
    assert checked([row(1, 1), row(5, 2)], recorded=None).whole, "a running chain's tail is live"


def test_an_unreadable_segment_is_named_and_its_rows_are_a_gap() -> None:
    check = LogCheck()
    check.row(row(1, 1))
    check.segment_unreadable("000000000002-000000000003.json")
    check.row(row(4, 4))
    check.end(4)
    assert check.missing() == (
        "events 2-3 (between sequence numbers 1 and 4); "
        "segment 000000000002-000000000003.json unreadable"
    )


def test_rows_written_before_the_numbering_are_unknown_not_missing() -> None:
    check = checked([row(1, None), row(2, None), row(3, 3), row(4, 4)], recorded=4)
    assert check.whole
    assert check.unknown() == (
        "2 of its 4 events were recorded before chains numbered their log's rows: whether rows "
        "are missing among them cannot be told"
    )
    assert checked([row(1, 1)]).unknown() is None


def test_a_read_that_starts_later_cannot_tell_what_came_before() -> None:
    check = LogCheck(from_start=False)
    check.row(row(400, 300))
    check.row(row(401, 301))
    check.end(None)
    assert check.whole


def test_a_segment_refuses_positions_that_skip() -> None:
    with pytest.raises(ValueError, match="rows: position 3 follows 1"):
        LogSegment(correlation_id="c1", rows=[row(1, 1), row(2, 3)])


def test_a_rewind_refuses_a_log_with_a_gap_in_one_line() -> None:
    check = checked([row(1, 1), row(500, 300)], recorded=300)
    with pytest.raises(RewindRefused) as refused:
        require_whole_log(check, "story-42")
    assert str(refused.value) == (
        "the log of 'story-42' is incomplete: it lacks events 2-299 (between sequence numbers 1 "
        "and 500); a rewind needs the whole log"
    )
    require_whole_log(checked([row(1, None), row(9, None)]), "story-42")
