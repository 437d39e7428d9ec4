"""Interleaved rounds, shared by the benches: on a shared, noisy machine two sides measured one
after the other see different loads, so every round runs each side once, in an order that
rotates, and ratios are given over all rounds and as the median of the per-round ratios."""

import statistics
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def rotated(sides: Sequence[T], round_: int) -> list[T]:
    """The order of round `round_` (from 1): each round starts one side later."""
    turn = (round_ - 1) % len(sides)
    return [*sides[turn:], *sides[:turn]]


def ratio_line(label: str, overall: float, per_round: Sequence[float], suffix: str = "") -> str:
    """`label: 0.95x (per round 0.93, 0.97; median 0.95x<suffix>)`."""
    rounds = ", ".join(f"{ratio:.2f}" for ratio in per_round)
    median = statistics.median(per_round) if per_round else float("nan")
    return f"{label}: {overall:.2f}x (per round {rounds}; median {median:.2f}x{suffix})"
