"""Interleaved rounds, shared by the benches: on a shared, noisy machine two sides measured one
after the other see different loads, so every round runs each side once, in an order that
rotates, and ratios are given over all rounds and as the median of the per-round ratios."""

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")


class Measured(Protocol):
    """One side's measurement in one round."""

    @property
    def side(self) -> str: ...

    @property
    def round(self) -> int: ...


M = TypeVar("M", bound=Measured)

RunOne = Callable[[str], Awaitable[str | None]]
"""Runs one workflow under the given id; returns None when it did what it should, else why
not."""


@dataclass(frozen=True)
class Timed:
    """One side's runs in one round: the wall time of them all, each one's latency, why
    those that failed did, and the id of the last one (whose history a bench may read)."""

    wall: float
    latencies: list[float]
    failures: list[str]
    last_id: str


async def timed_runs(
    side: str, run_one: RunOne, runs: int, concurrency: int, deadline: float
) -> Timed:
    """`runs` runs of `run_one`, at most `concurrency` at once, each under a new id and given
    `deadline` seconds (one past it counts as failed instead of hanging the bench)."""
    limit = asyncio.Semaphore(concurrency)
    prefix = f"bench-{side}-{uuid.uuid4().hex[:8]}"

    async def timed(index: int) -> tuple[float, str | None]:
        async with limit:
            started = time.perf_counter()
            try:
                async with asyncio.timeout(deadline):
                    failure = await run_one(f"{prefix}-{index}")
            except Exception as error:
                failure = f"{prefix}-{index}: {type(error).__name__}: {error}"
            return time.perf_counter() - started, failure

    started = time.perf_counter()
    outcomes = await asyncio.gather(*(timed(index) for index in range(runs)))
    wall = time.perf_counter() - started
    return Timed(
        wall,
        latencies=[latency for latency, _ in outcomes],
        failures=[failure for _, failure in outcomes if failure is not None],
        last_id=f"{prefix}-{runs - 1}",
    )


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
