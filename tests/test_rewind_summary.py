"""Rewinding many and counting what changed, without a server: the window, the copies' names,
the outcomes read off a chain's record and the counts over many pairs."""

from datetime import UTC, datetime, timedelta

import pytest

from coord.models.rewind.batch import (
    BatchLine,
    BatchRefused,
    BatchReport,
    LineStatus,
    copy_name,
    count_line,
    instant,
    window_query,
)
from coord.models.rewind.diff import diff_logs
from coord.models.rewind.summary import (
    ChainRecord,
    Outcome,
    outcome_of,
    pair_summary,
    summarise,
    summary_lines,
)
from tests.test_rewind_model import STORY, row

NOW = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
STUCK = ChainRecord(status="running", dead_lettered=1)
DONE = ChainRecord(status="running", terminal_seen=True)


def test_the_window_selects_chains_by_start_time_and_refuses_an_empty_one() -> None:
    query = window_query(NOW - timedelta(hours=1), NOW, "coord")
    assert query == (
        "CoordPattern = 'chain' AND TaskQueue = 'coord' "
        "AND StartTime >= '2026-11-27T08:00:00+00:00' AND StartTime < '2026-11-27T09:00:00+00:00'"
    )
    with pytest.raises(BatchRefused, match=r"--until: .* is not after --since"):
        window_query(NOW, NOW, "coord")
    with pytest.raises(BatchRefused, match=r"COORD_TASK_QUEUE: .* holds a quote"):
        window_query(NOW - timedelta(hours=1), NOW, "it's")


def test_since_and_until_take_a_time_or_a_duration_ago() -> None:
    assert instant("2h", NOW, "--since") == NOW - timedelta(hours=2)
    assert instant("2026-11-27T07:30:00", NOW, "--since") == NOW - timedelta(minutes=90)
    with pytest.raises(BatchRefused, match="--until: 'yesterday' is neither"):
        instant("yesterday", NOW, "--until")


def test_a_copy_is_named_by_its_original_and_the_suffix() -> None:
    assert copy_name("story-1", "-fixed") == "story-1-fixed"
    with pytest.raises(BatchRefused, match="--suffix"):
        copy_name("story-1", " ")


def test_the_batch_counts_every_status_zero_included() -> None:
    report = BatchReport(
        lines=[
            BatchLine(original="a", copy_id="a-x", status=LineStatus.REWOUND, point="e1"),
            BatchLine(original="b", copy_id="b-x", status=LineStatus.SKIPPED),
            BatchLine(original="c", copy_id="c-x", status=LineStatus.REWOUND, point="e1"),
        ]
    )
    assert count_line(report.counts()) == "2 rewound, 1 skipped, 0 filtered, 0 refused"


@pytest.mark.parametrize(
    ("record", "outcome"),
    [
        (DONE, Outcome.COMPLETED),
        (ChainRecord(status="completed", dead_lettered=2), Outcome.COMPLETED),
        (STUCK, Outcome.FAILED),
        (ChainRecord(status="paused"), Outcome.RUNNING),
        (ChainRecord(status="idle_closed"), Outcome.CLOSED),
    ],
)
def test_an_outcome_is_read_off_the_chain_record(record: ChainRecord, outcome: Outcome) -> None:
    assert outcome_of(record) is outcome


def test_the_summary_counts_changed_outcomes_by_way_and_pairs_that_differ() -> None:
    fixed = [*STORY[:3], row(4, "ImplementationCompleted", "f4", "e3")]
    changed = pair_summary(diff_logs("a", STORY, "a-x", fixed), STUCK, DONE)
    alike = pair_summary(diff_logs("b", STORY, "b-x", STORY), STUCK, STUCK)
    summary = summarise([changed, alike, changed], ["c"])
    assert summary.compared == 3
    assert summary.outcomes_changed == {"failed -> completed": 2}
    assert summary.rows_differ == 2
    assert summary_lines(summary) == [
        "3 pairs compared",
        "2 outcomes changed",
        "  failed -> completed: 2",
        "2 pairs whose rows differ",
        "1 originals without a copy",
    ]
    assert summary.model_dump(mode="json")["pairs"][0]["change"] == "failed -> completed"
