"""The saga's serial latency against the hand-written temporalio saga's, interleaved saga by saga.

    .venv/bin/python -m bench.saga_serial [--sagas 25] [--warmup 3] [--eager]

`bench.saga_bench` runs each side's sagas in a row, a round at a time: on a shared machine whose
load moves within seconds, two sides a few seconds apart see different loads, and a ratio of
their p50s moves by tens of percent from one run to the next. Here one saga of each side runs
in turn, one at a time, the order rotating, so the load's drift reaches every side alike. Each
saga's latency is taken at the client (start request to result) and at the server (the first
to the last event of its history: no client, no result long-poll), and that span's phases (the
p50 over the sagas of the time their workflow tasks and activity tasks waited in their queues
and ran, summed per saga, and the history's length); the ratios given are of the p50s. The
sides are `bench.saga_bench`'s: `served` against `baseline`, `local` against `base-local`, on
one worker process, one client, one server.
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

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
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


PHASES = ("task queued", "first task run", "task run", "activity queued", "activity run")
"""Where a saga's span goes, by the server's clock, summed over its history: its workflow tasks
from scheduled to started and from started to completed (the first apart: it makes the run's
instance), its activity tasks likewise."""
PHASE_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED: ("task queued", "scheduled_event_id"),
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: ("task run", "started_event_id"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: ("activity queued", "scheduled_event_id"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: ("activity run", "started_event_id"),
}
"""Each phase's closing event, and the field naming the event that opened it."""


@dataclass
class Side:
    """One side's sagas: each one's latency at the client, its span at the server and that
    span's phases (`PHASES`), in seconds, its history's length, and why those that failed
    did."""

    latencies: list[float] = field(default_factory=list)
    spans: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)
    events: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def p50_ms(self, values: Sequence[float]) -> float:
        return 1000 * statistics.median(values) if values else float("nan")

    def add_history(self, events: Sequence[HistoryEvent]) -> None:
        first, last = events[0].event_time, events[-1].event_time
        self.spans.append((last.ToNanoseconds() - first.ToNanoseconds()) / 1e9)
        self.events.append(len(events))
        for phase, seconds in phases(events).items():
            self.phases.setdefault(phase, []).append(seconds)


def phases(events: Sequence[HistoryEvent]) -> dict[str, float]:
    """Seconds spent in each of `PHASES` over the run (a local activity is part of its task)."""
    opened = {event.event_id: event.event_time.ToNanoseconds() for event in events}
    spent = dict.fromkeys(PHASES, 0.0)
    for event in events:
        if event.event_type not in PHASE_EVENTS:
            continue
        phase, field_name = PHASE_EVENTS[event.event_type]
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
        attributes = getattr(event, f"{kind}_event_attributes")
        since = opened[getattr(attributes, field_name)]
        if phase == "task run" and not spent["first task run"]:
            phase = "first task run"
        spent[phase] += (event.event_time.ToNanoseconds() - since) / 1e9
    return spent


async def history(client: Client, workflow_id: str) -> list[HistoryEvent]:
    handle = client.get_workflow_handle(workflow_id)
    return [event async for event in handle.fetch_history_events()]


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
    measured.add_history(await history(client, WORKFLOW_ID_OF[side](saga_id)))


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
    print(f"{'side':<12}{'events':>7}" + "".join(f" {phase + ' ms':>17}" for phase in PHASES))
    for side, got in measured.items():
        p50s = "".join(f"{got.p50_ms(got.phases.get(phase, [])):>18.1f}" for phase in PHASES)
        events = statistics.median(got.events) if got.events else float("nan")
        print(f"{side:<12}{events:>7.0f}{p50s}")
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
