"""Events absorbed by one aggregator: the project's `Aggregator` against a hand-written temporalio
workflow doing the same, in one run on one server.

Fair because both take the same plain-JSON envelopes by signal from the same senders, deduplicate
by event id and count what they receive; the project's side also validates each envelope and
matches it against its slots, which is the work it exists to do. Each side runs on its own task
queue and worker in this process; the baseline's client and worker use the SDK's default data
converter, as a hand-written app does (its signals are the same JSON bytes), the project's its
own (pydantic, large payloads by reference), whose cost is the project's. The project's worker
serves no agent (an aggregator runs none), also under `make bench`, which declares the demo
agents for the benches that run them: each agent's worker polls its own queue, idle here.

Also reported: history events per received event, counted over every run it continued as new
into (the project's continues as new when the server suggests it, a few thousand events in);
workflow tasks per event (a worker that finishes its tasks sooner takes the same flood in more,
smaller tasks, three history events each, so the history besides them is given too); the CPU
this process spent per event while each side took the flood in (its worker, Core's threads and
the senders), what the machine's load changes least; and the embedded dev server's CPU per
event, which each task costs too (the server shares the machine's cores with this process).

The rate of one flood on a shared machine moves by a third from one run to the next, so both
sides first take a small flood each (`--warmup`: the process's first signals, converters and
sandbox imports are paid there, not by whichever side goes first), then `--rounds` interleaved
rounds run each side once, the first side rotating (`bench.rounds`); the ratios are given over
all rounds, per round and as their median.

    .venv/bin/python -m bench.aggregator_bench [--events 2000] [--senders 10] [--rounds 3]
        [--warmup 100]
"""

import argparse
import asyncio
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client, WorkflowHandle
    from temporalio.converter import DataConverter
    from temporalio.worker import Worker

    from bench.layouts import every_run
    from bench.rounds import per_round, ratio_line, rotated
    from bench.saga_bench import server_cpu_seconds
    from bench.saga_replay import thread_cpu
    from bench.server import bench_server
    from coord.infra.process import exit_without_teardown
    from coord.models.aggregator.spec import AggregatorSpec, AggregatorStatus
    from coord.models.events.envelope import EventEnvelope
    from coord.starter import api
    from coord.worker import build_worker


@workflow.defn(name="BaselineAggregator")
class BaselineAggregator:
    """What a hand-written temporalio join does: dedupe by id, count, finish on `Done`."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self._done)
        return len(self._seen)

    @workflow.signal
    def event(self, envelope: dict[str, Any]) -> None:
        self._seen.add(envelope["event"]["id"])
        self._done = self._done or envelope["event"]["type"] == "Done"


@dataclass
class Result:
    side: str
    events: int
    seconds: float
    cpu_seconds: float
    threads: str
    """The CPU per event split by the process's threads (`bench.saga_replay.thread_cpu`)."""
    history_events: int
    """Over every run of the workflow id, from the first to the one that finished."""
    tasks: int
    """Workflow tasks completed, over the same runs."""
    workflow_id: str
    server_cpu_seconds: float | None = None
    """The embedded dev server's CPU meanwhile (None on another server: not this process's)."""
    round: int = 0

    @property
    def per_second(self) -> float:
        return self.events / self.seconds

    @property
    def history_per_event(self) -> float:
        return self.history_events / self.events

    @property
    def cpu_per_event(self) -> float:
        return self.cpu_seconds / self.events

    @property
    def server_cpu_per_event(self) -> float:
        return (
            float("nan")
            if self.server_cpu_seconds is None
            else self.server_cpu_seconds / self.events
        )

    @property
    def tasks_per_event(self) -> float:
        return self.tasks / self.events

    @property
    def own_history_per_event(self) -> float:
        """Less the three events of each workflow task (scheduled, started, completed): the
        signals, the run's commands and their outcomes, whatever the tasks' sizes."""
        return (self.history_events - 3 * self.tasks) / self.events


@dataclass(frozen=True)
class Histories:
    """What the runs of one workflow id wrote, summed: history events and workflow tasks."""

    events: int
    tasks: int


async def histories(client: Client, workflow_id: str) -> Histories:
    """Summed over every run (`every_run`)."""
    runs = [history.events for history in await every_run(client, workflow_id)]
    tasks = sum(1 for events in runs for e in events if e.event_type == TASK_COMPLETED)
    return Histories(sum(len(events) for events in runs), tasks)


TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
PROJECT, BASELINE = "project (Aggregator)", "baseline (temporalio)"


async def absorb(
    client: Client, side: str, handle: WorkflowHandle[Any, Any], events: int, senders: int
) -> Result:
    """Send `events` Noise events from `senders` at once, then Done; time until the result."""
    noise = [EventEnvelope.new("Noise", "/bench", payload={"n": n}) for n in range(events)]
    done = EventEnvelope.new("Done", "/bench")

    async def sender(share: list[EventEnvelope]) -> None:
        for envelope in share:
            await handle.signal("event", envelope.model_dump(mode="json"))

    started, cpu_started, threads = time.perf_counter(), time.process_time(), thread_cpu()
    server_started = server_cpu_seconds()
    await asyncio.gather(*(sender(noise[i::senders]) for i in range(senders)))
    await handle.signal("event", done.model_dump(mode="json"))
    await handle.result()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    split = by_thread(threads, thread_cpu(), events + 1)
    server_ended = server_cpu_seconds()
    server = (
        None if server_started is None or server_ended is None else server_ended - server_started
    )
    runs = await histories(client, handle.id)
    return Result(side, events + 1, seconds, cpu, split, runs.events, runs.tasks, handle.id, server)


def by_thread(before: dict[str, float] | None, after: dict[str, float] | None, events: int) -> str:
    """µs of CPU per event each kind of thread spent between two readings."""
    if before is None or after is None:
        return "no split by thread (no /proc)"
    parts = [f"{part} {1e6 * (after[part] - before[part]) / events:.0f}" for part in after]
    return "CPU µs per event by thread: " + ", ".join(parts)


async def project(client: Client, events: int, senders: int) -> Result:
    queue = f"bench-aggregator-{uuid.uuid4().hex[:8]}"
    spec = AggregatorSpec.model_validate(
        {
            "aggregator_id": f"bench-{uuid.uuid4().hex[:8]}",
            "wait_for": [{"type": "Done"}],
            "timeout": "1h",
            "on_complete": "BenchDone",
            "on_timeout": "BenchTimedOut",
        }
    )
    async with build_worker(client, queue, only=()):  # no agent's worker: it runs none
        handle = await api.start_aggregator(client, spec, queue=queue)
        result = await absorb(client, PROJECT, handle, events, senders)
        state = await api.aggregator_state(client, handle.id)
    if state.status != AggregatorStatus.COMPLETED or state.matched + state.unmatched != events + 1:
        raise SystemExit(f"the aggregator lost events: {state.model_dump_json()}")
    return result


async def baseline(client: Client, events: int, senders: int) -> Result:
    client = hand_written(client)
    queue = f"bench-baseline-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[BaselineAggregator]):
        handle = await client.start_workflow(
            BaselineAggregator.run, id=f"baseline-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        result = await absorb(client, BASELINE, handle, events, senders)
        if await handle.result() != events + 1:
            raise SystemExit("the baseline lost events")
    return result


def hand_written(client: Client) -> Client:
    """The bench's client (same connection and namespace) with the SDK's default data
    converter, as a hand-written temporalio app has: not the project's (pydantic values, large
    ones by reference to the payload store), whose cost is the project's to show."""
    config = client.config()
    config["data_converter"] = DataConverter.default
    return Client(**config)


Side = Callable[[Client, int, int], Awaitable[Result]]
SIDES: tuple[Side, Side] = (project, baseline)
RATIOS: tuple[tuple[str, Callable[[Result], float]], ...] = (
    ("events/s", lambda r: r.per_second),
    ("history per event", lambda r: r.history_per_event),
    ("workflow tasks per event", lambda r: r.tasks_per_event),
    ("history per event besides its workflow tasks", lambda r: r.own_history_per_event),
    ("process CPU per event", lambda r: r.cpu_per_event),
    ("dev server CPU per event", lambda r: r.server_cpu_per_event),
)


async def bench(events: int, senders: int, rounds: int, warmup: int) -> int:
    async with bench_server() as (client, where):
        print(
            f"server: {where}; {events} events + Done from {senders} senders into one workflow, "
            f"{rounds} rounds after a warm-up of {warmup} events per side"
        )
        for side in SIDES if warmup else ():
            await side(client, warmup, senders)
        results = []
        for round_ in range(1, rounds + 1):
            for side in rotated(SIDES, round_):
                result = await side(client, events, senders)
                result.round = round_
                results.append(result)
    report(results)
    return 0


def report(results: Sequence[Result]) -> None:
    print(
        f"{'round':<6}{'side':<24}{'events':>8}{'events/s':>11}{'history':>10}"
        f"{'history/event':>15}{'tasks/event':>13}{'CPU µs/event':>14}{'server µs/event':>17}"
    )
    for r in results:
        print(
            f"{r.round:<6}{r.side:<24}{r.events:>8}{r.per_second:>11.1f}{r.history_events:>10}"
            f"{r.history_per_event:>15.2f}{r.tasks_per_event:>13.3f}{1e6 * r.cpu_per_event:>14.0f}"
            f"{1e6 * r.server_cpu_per_event:>17.0f}"
        )
    for r in results:
        print(f"round {r.round} {r.side}: {r.threads}")
    mine, theirs = summed(results, PROJECT), summed(results, BASELINE)
    for label, value in RATIOS:
        if math.isnan(value(mine)):  # not measured: another server than the bench's own
            continue
        ratios = per_round(results, PROJECT, BASELINE, value)
        print(ratio_line(f"project/baseline {label}", value(mine) / value(theirs), ratios))


def summed(results: Sequence[Result], side: str) -> Result:
    """`side`'s rounds as one: all its events, in all its time, with all its history."""
    runs = [r for r in results if r.side == side]
    servers = [r.server_cpu_seconds for r in runs]
    return Result(
        side,
        events=sum(r.events for r in runs),
        seconds=sum(r.seconds for r in runs),
        cpu_seconds=sum(r.cpu_seconds for r in runs),
        threads="",
        history_events=sum(r.history_events for r in runs),
        tasks=sum(r.tasks for r in runs),
        workflow_id="",
        server_cpu_seconds=None if None in servers else sum(s for s in servers if s is not None),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--senders", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of both sides")
    parser.add_argument("--warmup", type=int, default=100, help="events per side before")
    args = parser.parse_args()
    if args.rounds < 1 or args.events < 1 or args.warmup < 0:
        parser.error("--rounds and --events must be at least 1, --warmup at least 0")
    run = bench(args.events, args.senders, args.rounds, args.warmup)
    exit_without_teardown(lambda: asyncio.run(run))


if __name__ == "__main__":
    main()
