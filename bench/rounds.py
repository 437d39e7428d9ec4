"""Interleaved rounds, shared by the benches: on a shared, noisy machine two sides measured one
after the other see different loads, so every round runs each side once, in an order that
rotates, and ratios are given over all rounds and as the median of the per-round ratios."""

import statistics
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Measured(Protocol):
    """One side's measurement in one round."""

    @property
    def side(self) -> str: ...

    @property
    def round(self) -> int: ...


M = TypeVar("M", bound=Measured)


def rotated(sides: Sequence[T], round_: int) -> list[T]:
    """The order of round `round_` (from 1): each round starts one side later."""
    turn = (round_ - 1) % len(sides)
    return [*sides[turn:], *sides[:turn]]


def ratio_line(label: str, overall: float, per_round: Sequence[float], suffix: str = "") -> str:
    """`label: 0.95x (per round 0.93, 0.97; median 0.95x<suffix>)`."""
    rounds = ", ".join(f"{ratio:.2f}" for ratio in per_round)
    median = statistics.median(per_round) if per_round else float("nan")
    return f"{label}: {overall:.2f}x (per round {rounds}; median {median:.2f}x{suffix})"


def per_round(
    results: Sequence[M], side: str, other: str, value: Callable[[M], float]
) -> list[float]:
    """`side`'s `value` over `other`'s, round by round (the ratios `ratio_line` gives)."""
    return [
        value(mine) / value(theirs)
        for mine in results
        if mine.side == side
        for theirs in results
        if theirs.side == other and theirs.round == mine.round
    ]
