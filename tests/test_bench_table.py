"""The benchmark table's reading of what each bench prints (no server): its ratio lines, and the
p50 ratios of a summary line that names its sides."""

from bench.rounds import ratio_line
from bench.table import ratio_rows


def test_every_ratio_line_a_bench_prints_becomes_a_row() -> None:
    output = "\n".join(
        [
            "round  side  sagas/s",
            ratio_line("project/baseline throughput", 0.8, [0.75, 0.85]),
            ratio_line("ack/signal publish-to-accepted p50", 1.25, [1.25], "; goal <= 2x"),
        ]
    )
    assert ratio_rows(output) == [
        ("project/baseline throughput", 0.8, [0.75, 0.85], 0.8),
        ("ack/signal publish-to-accepted p50", 1.25, [1.25], 1.25),
    ]


def test_a_summary_of_the_sides_gives_each_sides_p50_over_each_baseline() -> None:
    summary = (
        "project: 5.2 sagas/s, p50 150.0 ms; baseline: 9.5 sagas/s, p50 120.0 ms; "
        "baseline-local: 24.7 sagas/s, p50 30.0 ms (all rounds)"
    )
    rows = {label: overall for label, overall, _, _ in ratio_rows(summary)}
    assert rows == {
        "project/baseline p50 (of the rounds' medians)": 1.25,
        "project/baseline-local p50 (of the rounds' medians)": 5.0,
    }


def test_a_side_whose_p50_ratio_a_bench_printed_gets_no_summary_row() -> None:
    """The saga bench prints each project side's ratios to its own hand-written saga
    (`base-...` sides are baselines too); its summary line adds no rows beside them."""
    output = "\n".join(
        [
            ratio_line("queues/base-queues throughput", 0.9, [0.9]),
            ratio_line("queues/base-queues p50", 1.1, [1.1]),
            "queues: 5.0 sagas/s, p50 110.0 ms; base-queues: 5.5 sagas/s, p50 100.0 ms; "
            "vote: 2.0 votes/s, p50 150.0 ms (all rounds)",
        ]
    )
    assert [label for label, *_ in ratio_rows(output)] == [
        "queues/base-queues throughput",
        "queues/base-queues p50",
        "vote/base-queues p50 (of the rounds' medians)",
    ]
