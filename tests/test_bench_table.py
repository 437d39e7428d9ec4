"""The benchmark table's reading of what each bench prints (no server): its ratio lines, and the
p50 ratios of a summary line that names its sides."""

from pathlib import Path

from bench.restate_saga import RestateInstall
from bench.rounds import ratio_line
from bench.table import BENCHES, ratio_rows, restate_line, selected


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


def test_the_restate_side_is_a_peer_of_the_fast_path_not_a_side_over_the_baselines() -> None:
    """The saga bench's Restate side gets the fast/restate ratios it printed, and no rows of
    its own over the hand-written sagas from the summary line."""
    output = "\n".join(
        [
            ratio_line("fast/base-local p50", 1.05, [1.05]),
            ratio_line("fast/restate throughput", 0.45, [0.45]),
            ratio_line("fast/restate p50", 2.3, [2.3]),
            "fast: 23.9 sagas/s, p50 41.9 ms; base-local: 25.1 sagas/s, p50 40.1 ms; "
            "restate: 53.3 sagas/s, p50 18.4 ms (all rounds)",
        ]
    )
    assert [label for label, *_ in ratio_rows(output)] == [
        "fast/base-local p50",
        "fast/restate throughput",
        "fast/restate p50",
    ]


def test_the_header_names_restates_versions_or_how_to_install_it() -> None:
    install = RestateInstall(Path("/opt/restate-server"), "1.7.12", "1.2.0")
    assert "restate-server 1.7.12, restate-sdk 1.2.0" in restate_line(install)
    assert "fast/restate" in restate_line(install)
    assert "make bench-restate-setup" in restate_line(None)


def test_only_runs_the_benches_whose_pattern_starts_with_it() -> None:
    assert [bench.pattern for bench in selected(["saga"])] == ["saga serial", "saga concurrent"]
    assert selected([]) == BENCHES
    assert selected(["nothing"]) == ()
