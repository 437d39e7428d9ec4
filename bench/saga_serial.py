"""The saga's serial latency against the hand-written temporalio saga's, interleaved saga by saga.

    .venv/bin/python -m bench.saga_serial [--sagas 25] [--warmup 3] [--eager] [--no-restate]

`bench.saga_bench` runs each side's sagas in a row, a round at a time: on a shared machine whose
load moves within seconds, two sides a few seconds apart see different loads, and a ratio of
their p50s moves by tens of percent from one run to the next. Here one saga of each side runs
in turn, one at a time, the order rotating, so the load's drift reaches every side alike. Each
saga's latency is taken at the client (start request to result) and at the server (the first
to the last event of its history: no client, no result long-poll); the ratios given are of the
p50s. The sides are `bench.saga_bench`'s: `served` against `baseline`, `local` against
`base-local`, and the fast path (`fast`: `local` started eagerly) against `base-local` and, when
it is installed, the same saga on Restate (`restate`), on one worker process, one client, one
server.

Where a Temporal saga's time went, by the server's clock against the client's (one machine,
one clock): `to start` from the start request to the run's first event, `span` from its first
event to its last (the worker's workflow tasks and the server's bookkeeping of them), and
`to result` from the last event to the caller holding the saga's outcome (the completion's
answer to the worker, the result's long poll waking, the result decoded). `cpu ms` is the p50
of this process's CPU over each saga (its workers and client, and the Restate side's handlers,
never a server's): the measure a shared machine's load moves least. A second table gives each
Temporal side's history length and where its span went (`PHASES`: the p50 over the sagas of the
time their workflow tasks and activity tasks waited in their queues and ran, summed per saga).
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

from bench.restate_saga import restate_side
from bench.rounds import RunOne, rotated
from bench.saga_bench import (
    BASELINE,
    BASELINE_LOCAL,
    FAST,
    LOCAL,
    RESTATE,
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

PAIRS = ((SERVED, BASELINE), (LOCAL, BASELINE_LOCAL), (FAST, BASELINE_LOCAL), (FAST, RESTATE))


@dataclass(frozen=True)
class Split:
    """Where one saga's time went, in seconds: from the start request to the run's first
    event, from its first event to its last, and from its last event to the caller's result."""

    to_start: float
    span: float
    to_result: float


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
    """One side's sagas: each one's latency at the client and, on Temporal, its `Split`, in
    seconds, and why those that failed did."""

    latencies: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    """This process's CPU seconds over each saga: its workers', its client's (and, for
    Restate's sagas, the SDK's handlers), never a server's; load moves it far less than time."""
    splits: list[Split] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)
    events: list[int] = field(default_factory=list)
    """Each saga's history length."""
    failures: list[str] = field(default_factory=list)

    @property
    def spans(self) -> list[float]:
        return [part.span for part in self.splits]

    def p50_ms(self, values: Sequence[float]) -> float:
        return 1000 * statistics.median(values) if values else float("nan")

    def split_ms(self) -> str:
        """The p50 of each part (Restate's sagas have none: the columns say `-`)."""
        if not self.splits:
            return f"{'-':>10}{'-':>10}{'-':>10}"
        columns = (
            [part.to_start for part in self.splits],
            self.spans,
            [part.to_result for part in self.splits],
        )
        return "".join(f"{self.p50_ms(column):>10.1f}" for column in columns)

    def add_history(self, events: Sequence[HistoryEvent], requested: float, held: float) -> None:
        """A saga's history: its `Split` (its first and last events' times, the server's clock,
        against `requested` and `held`, when the client asked to start it and when it held its
        outcome: `time.time()`, the same machine's clock), its length and its phases."""
        first = events[0].event_time.ToNanoseconds() / 1e9
        last = events[-1].event_time.ToNanoseconds() / 1e9
        self.splits.append(Split(first - requested, last - first, held - last))
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
    requested, started, cpu = time.time(), time.perf_counter(), time.process_time()
    try:
        async with asyncio.timeout(SAGA_DEADLINE):
            failure = await run_one(saga_id)
    except Exception as error:
        failure = f"{saga_id}: {type(error).__name__}: {error}"
    latency, held, cpu = time.perf_counter() - started, time.time(), time.process_time() - cpu
    if measured is None:
        return
    if failure is not None:
        measured.failures.append(failure)
        return
    measured.latencies.append(latency)
    measured.cpu.append(cpu)
    if side in WORKFLOW_ID_OF:
        events = await history(client, WORKFLOW_ID_OF[side](saga_id))
        measured.add_history(events, requested, held)


def report(measured: dict[str, Side], header: list[str]) -> int:
    for line in header:
        print(line)
    print(
        f"{'side':<12}{'sagas':>7}{'p50 ms':>10}{'mean ms':>10}{'cpu ms':>10}"
        f"{'to start':>10}{'span':>10}{'to result':>10}   (p50 ms)"
    )
    for side, got in measured.items():
        mean = 1000 * statistics.mean(got.latencies) if got.latencies else float("nan")
        print(
            f"{side:<12}{len(got.latencies):>7}{got.p50_ms(got.latencies):>10.1f}{mean:>10.1f}"
            f"{got.p50_ms(got.cpu):>10.1f}" + got.split_ms()
        )
    print(f"{'side':<12}{'events':>7}" + "".join(f" {phase + ' ms':>17}" for phase in PHASES))
    for side, got in measured.items():
        if not got.events:
            continue
        p50s = "".join(f"{got.p50_ms(got.phases.get(phase, [])):>18.1f}" for phase in PHASES)
        print(f"{side:<12}{statistics.median(got.events):>7.0f}{p50s}")
    for side, other in PAIRS:
        if other not in measured:
            continue
        print(ratio_line(side, other, measured[side], measured[other]))
    failures = [failure for got in measured.values() for failure in got.failures]
    for failure in failures[:5]:
        print(f"did not complete: {failure}")
    return 1 if failures else 0


def ratio_line(side: str, other: str, mine: Side, theirs: Side) -> str:
    """The two sides' p50 ratio at the client, and at the server when both ran on Temporal."""
    client = mine.p50_ms(mine.latencies) / theirs.p50_ms(theirs.latencies)
    line = f"{side}/{other} p50: {client:.2f}x at the client"
    if not (mine.splits and theirs.splits):
        return line
    server = mine.p50_ms(mine.spans) / theirs.p50_ms(theirs.spans)
    return f"{line}, {server:.2f}x at the server"


async def bench(sagas: int, warmup: int, eager: bool, restate: bool = True) -> int:
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
            FAST: project_side(client, queue[LOCAL], spec, eager=True),
        }
        async with (
            baseline_worker(client, queue[BASELINE]),
            build_worker(client, queue[LOCAL], registry),
            build_worker(client, queue[SERVED], served_here(registry)),
            restate_side(spec.input, restate) as (restate_run, restate_told),
        ):
            if restate_run is not None:
                sides[RESTATE] = restate_run
            measured = {side: Side() for side in sides}
            for turn in range(warmup + sagas):
                for side in rotated(list(sides), turn):
                    timed = measured[side] if turn >= warmup else None
                    await one_saga(client, side, sides[side], timed)
    header = [
        "Feature Deployment saga, serial, interleaved saga by saga: project vs hand-written",
        f"server: {server}; CPUs: {os.cpu_count()}; load average: {os.getloadavg()[0]:.1f}",
        f"sagas per side: {sagas} after {warmup} warm-up; every side starts "
        + ("eagerly" if eager else "as the samples start a workflow (not eagerly)")
        + f", but {FAST}, always eagerly",
        restate_told,
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
    parser.add_argument(
        "--no-restate",
        dest="restate",
        action="store_false",
        help="leave out the Restate side even when it is installed (make bench-restate-setup)",
    )
    args = parser.parse_args()
    if args.sagas < 1 or args.warmup < 0:
        parser.error("--sagas must be at least 1, --warmup at least 0")
    run = bench(args.sagas, args.warmup, args.eager, args.restate)
    exit_without_teardown(lambda: asyncio.run(run))


if __name__ == "__main__":
    main()
