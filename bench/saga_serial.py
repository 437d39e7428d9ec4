"""The saga's serial latency against the hand-written temporalio saga's, interleaved saga by saga.

    .venv/bin/python -m bench.saga_serial [--sagas 25] [--warmup 3] [--eager]

`bench.saga_bench` runs each side's sagas in a row, a round at a time: on a shared machine whose
load moves within seconds, two sides a few seconds apart see different loads, and a ratio of
their p50s moves by tens of percent from one run to the next. Here one saga of each side runs
in turn, one at a time, the order rotating, so the load's drift reaches every side alike. Each
saga's latency is taken at the client (start request to result) and at the server (the first
to the last event of its history: no client, no result long-poll); the ratios given are of the
p50s. The sides are `bench.saga_bench`'s: `served` against `baseline`, `local` against
`base-local`, on one worker process, one client, one server.
"""

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from bench.rounds import RunOne, rotated
from bench.saga_bench import (
    BASELINE,
    BASELINE_LOCAL,
    LOCAL,
    SAGA_DEADLINE,
    SERVED,
    WORKFLOW_ID_OF,
    baseline_side,
    baseline_worker,
    project_side,
    served_here,
)
from bench.server import bench_server
from coord.infra.process import exit_without_teardown
from coord.models.saga.spec import SagaSpec
from coord.models.wire.specs import load_spec
from coord.worker import build_worker, default_registry

PAIRS = ((SERVED, BASELINE), (LOCAL, BASELINE_LOCAL))


@dataclass
class Side:
    """One side's sagas: each one's latency at the client and its span at the server, in
    seconds, and why those that failed did."""

    latencies: list[float] = field(default_factory=list)
    spans: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def p50_ms(self, values: Sequence[float]) -> float:
        return 1000 * statistics.median(values) if values else float("nan")


async def server_span(client: Client, workflow_id: str) -> float:
    """Seconds from the run's first event to its last, by the server's clock."""
    events = [
        event async for event in client.get_workflow_handle(workflow_id).fetch_history_events()
    ]
    first, last = events[0].event_time, events[-1].event_time
    return (last.ToNanoseconds() - first.ToNanoseconds()) / 1e9


async def one_saga(client: Client, side: str, run_one: RunOne, measured: Side | None) -> None:
    """One saga of `side`, timed into `measured` (None: a warm-up)."""
    saga_id = f"serial-{side}-{uuid.uuid4().hex[:10]}"
    started = time.perf_counter()
    try:
        async with asyncio.timeout(SAGA_DEADLINE):
            failure = await run_one(saga_id)
    except Exception as error:
        failure = f"{saga_id}: {type(error).__name__}: {error}"
    latency = time.perf_counter() - started
    if measured is None:
        return
    if failure is not None:
        measured.failures.append(failure)
        return
    measured.latencies.append(latency)
    measured.spans.append(await server_span(client, WORKFLOW_ID_OF[side](saga_id)))


def report(measured: dict[str, Side], header: list[str]) -> int:
    for line in header:
        print(line)
    print(f"{'side':<12}{'sagas':>7}{'p50 ms':>10}{'mean ms':>10}{'server p50 ms':>15}")
    for side, got in measured.items():
        mean = 1000 * statistics.mean(got.latencies) if got.latencies else float("nan")
        print(
            f"{side:<12}{len(got.latencies):>7}{got.p50_ms(got.latencies):>10.1f}{mean:>10.1f}"
            f"{got.p50_ms(got.spans):>15.1f}"
        )
    for side, other in PAIRS:
        mine, theirs = measured[side], measured[other]
        client = mine.p50_ms(mine.latencies) / theirs.p50_ms(theirs.latencies)
        server = mine.p50_ms(mine.spans) / theirs.p50_ms(theirs.spans)
        print(f"{side}/{other} p50: {client:.2f}x at the client, {server:.2f}x at the server")
    failures = [failure for got in measured.values() for failure in got.failures]
    for failure in failures[:5]:
        print(f"did not complete: {failure}")
    return 1 if failures else 0


async def bench(sagas: int, warmup: int, eager: bool) -> int:
    example = Path(__file__).resolve().parent.parent / "examples" / "feature-deployment.yaml"
    spec = load_spec(SagaSpec, example)
    run_id = uuid.uuid4().hex[:8]
    queue = {side: f"serial-{side}-{run_id}" for side in (LOCAL, SERVED, BASELINE)}
    async with bench_server() as (client, server):
        registry = default_registry()
        sides = {
            SERVED: project_side(client, queue[SERVED], spec, eager=eager),
            BASELINE: baseline_side(client, queue[BASELINE], spec.input, eager=eager),
            LOCAL: project_side(client, queue[LOCAL], spec, eager=eager),
            BASELINE_LOCAL: baseline_side(
                client, queue[BASELINE], spec.input, "BaselineLocalSaga", eager=eager
            ),
        }
        measured = {side: Side() for side in sides}
        async with (
            baseline_worker(client, queue[BASELINE]),
            build_worker(client, queue[LOCAL], registry),
            build_worker(client, queue[SERVED], served_here(registry)),
        ):
            for turn in range(warmup + sagas):
                for side in rotated(list(sides), turn):
                    timed = measured[side] if turn >= warmup else None
                    await one_saga(client, side, sides[side], timed)
    header = [
        "Feature Deployment saga, serial, interleaved saga by saga: project vs hand-written",
        f"server: {server}; CPUs: {os.cpu_count()}; load average: {os.getloadavg()[0]:.1f}",
        f"sagas per side: {sagas} after {warmup} warm-up; every side starts "
        + ("eagerly" if eager else "as the samples start a workflow (not eagerly)"),
    ]
    return report(measured, header)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sagas", type=int, default=25, help="timed sagas per side")
    parser.add_argument("--warmup", type=int, default=3, help="untimed sagas per side first")
    parser.add_argument(
        "--eager",
        action="store_true",
        help="start every side eagerly, as start_saga starts a saga by default",
    )
    args = parser.parse_args()
    if args.sagas < 1 or args.warmup < 0:
        parser.error("--sagas must be at least 1, --warmup at least 0")
    run = bench(args.sagas, args.warmup, args.eager)
    exit_without_teardown(lambda: asyncio.run(run))


if __name__ == "__main__":
    main()
