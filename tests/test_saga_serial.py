"""bench.saga_serial's report: the sides on Temporal split their time in three (`Split`),
Restate's sagas are timed at the client only, and a ratio with Restate is given at the client
alone."""

import pytest

from bench.saga_serial import Side, Split, ratio_line


def _side(latencies: list[float], splits: list[Split] | None = None) -> Side:
    return Side(latencies=latencies, splits=splits or [])


def test_a_temporal_side_gives_the_p50_of_each_part_of_its_time() -> None:
    side = _side(
        [0.05, 0.06, 0.07],
        [Split(0.003, 0.040, 0.007), Split(0.002, 0.050, 0.008), Split(0.004, 0.060, 0.009)],
    )
    assert side.split_ms().split() == ["3.0", "50.0", "8.0"]
    assert side.spans == pytest.approx([0.040, 0.050, 0.060])


def test_restate_s_time_is_not_split_and_its_ratio_is_at_the_client_only() -> None:
    fast = _side([0.08], [Split(0.003, 0.065, 0.010)])
    restate = _side([0.04])
    assert restate.split_ms().split() == ["-", "-", "-"]
    assert ratio_line("fast", "restate", fast, restate) == "fast/restate p50: 2.00x at the client"


def test_two_temporal_sides_are_compared_at_the_client_and_at_the_server() -> None:
    fast = _side([0.06], [Split(0.003, 0.050, 0.007)])
    base = _side([0.05], [Split(0.003, 0.040, 0.007)])
    line = ratio_line("fast", "base-local", fast, base)
    assert line == "fast/base-local p50: 1.20x at the client, 1.25x at the server"
