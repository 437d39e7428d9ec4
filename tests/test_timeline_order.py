"""The correlation table's order without a server: the chain's sequence, then the patterns'
records in theirs, each row after its cause; never the wall clock."""

from datetime import UTC, datetime, timedelta

from coord.models.events.timeline import TimelineEntry, logical_order

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def row(event_id: str, seq: int, cause: str | None = None, late: int = 0) -> TimelineEntry:
    return TimelineEntry(
        seq=seq,
        time=T0 - timedelta(seconds=late),
        event=event_id.upper(),
        agent="/x",
        correlation_id="c",
        event_id=event_id,
        causation_id=cause,
    )


def ids(rows: list[TimelineEntry]) -> list[str]:
    return [entry.event_id for entry in rows]


def test_the_chain_sequence_wins_over_clocks_and_records_fill_in_what_it_lacks() -> None:
    chain = [row("b", 2, "a", late=50), row("a", 1)]
    plan = [row("p2", 2, "p1", late=90), row("p1", 1, late=10), row("a", 7)]
    assert ids(logical_order(chain, [plan])) == ["a", "b", "p1", "p2"]


def test_a_row_waits_for_its_cause_wherever_the_cause_comes_from() -> None:
    chain = [row("reaction", 1, "v2"), row("later", 2)]
    vote = [row("v1", 1, "t1"), row("v2", 2, "v1")]
    plan = [row("t1", 1)]
    assert ids(logical_order(chain, [vote, plan])) == ["later", "t1", "v1", "v2", "reaction"]


def test_a_cause_outside_the_table_or_a_cycle_loses_no_row() -> None:
    chain = [row("x", 1, "gone"), row("y", 2, "z"), row("z", 3, "y")]
    assert sorted(ids(logical_order(chain, []))) == ["x", "y", "z"]
    assert ids(logical_order(chain, []))[0] == "x"
