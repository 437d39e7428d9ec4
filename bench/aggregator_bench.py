"""Events absorbed by one aggregator: the project's `Aggregator` against a hand-written temporalio
workflow doing the same, in one run on one server.

Fair because both take the same plain-JSON envelopes by signal from the same senders, deduplicate
by event id and count what they receive; the project's side also validates each envelope and
matches it against its slots, which is the work it exists to do. Each side runs on its own task
queue and worker in this process. Also reported: history events per received event, and the CPU
this process spent per event while each side took the flood in (its worker, Core's threads
and the senders, which are the same for both; not the server's): what the machine's load
changes least.

    .venv/bin/python -m bench.aggregator_bench [--events 5000] [--senders 10]
"""

import argparse
import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.client import Client, WorkflowHandle
    from temporalio.worker import Worker

    from bench.rounds import ratio_line
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
    workflow_id: str

    @property
    def per_second(self) -> float:
        return self.events / self.seconds

    @property
    def history_per_event(self) -> float:
        return self.history_events / self.events

    @property
    def cpu_per_event(self) -> float:
        return self.cpu_seconds / self.events


async def absorb(side: str, handle: WorkflowHandle[Any, Any], events: int, senders: int) -> Result:
    """Send `events` Noise events from `senders` at once, then Done; time until the result."""
    noise = [EventEnvelope.new("Noise", "/bench", payload={"n": n}) for n in range(events)]
    done = EventEnvelope.new("Done", "/bench")

    async def sender(share: list[EventEnvelope]) -> None:
        for envelope in share:
            await handle.signal("event", envelope.model_dump(mode="json"))

    started, cpu_started, threads = time.perf_counter(), time.process_time(), thread_cpu()
    await asyncio.gather(*(sender(noise[i::senders]) for i in range(senders)))
    await handle.signal("event", done.model_dump(mode="json"))
    await handle.result()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    split = by_thread(threads, thread_cpu(), events + 1)
    history = await handle.fetch_history()
    return Result(side, events + 1, seconds, cpu, split, len(history.events), handle.id)


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
    async with build_worker(client, queue):
        handle = await api.start_aggregator(client, spec, queue=queue)
        result = await absorb("project (Aggregator)", handle, events, senders)
        state = await api.aggregator_state(client, handle.id)
    if state.status != AggregatorStatus.COMPLETED or state.matched + state.unmatched != events + 1:
        raise SystemExit(f"the aggregator lost events: {state.model_dump_json()}")
    return result


async def baseline(client: Client, events: int, senders: int) -> Result:
    queue = f"bench-baseline-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[BaselineAggregator]):
        handle = await client.start_workflow(
            BaselineAggregator.run, id=f"baseline-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        result = await absorb("baseline (temporalio)", handle, events, senders)
        if await handle.result() != events + 1:
            raise SystemExit("the baseline lost events")
    return result


async def bench(events: int, senders: int) -> int:
    async with bench_server() as (client, where):
        print(f"server: {where}; {events} events + Done from {senders} senders into one workflow")
        results = [await project(client, events, senders), await baseline(client, events, senders)]
    print(
        f"{'side':<24}{'events':>8}{'events/s':>11}{'history':>10}{'history/event':>15}"
        f"{'CPU µs/event':>14}"
    )
    for r in results:
        print(
            f"{r.side:<24}{r.events:>8}{r.per_second:>11.1f}{r.history_events:>10}"
            f"{r.history_per_event:>15.2f}{1e6 * r.cpu_per_event:>14.0f}"
        )
    for r in results:
        print(f"{r.side}: {r.threads}")
    mine, theirs = results
    for label, ratio in (
        ("events/s", mine.per_second / theirs.per_second),
        ("history per event", mine.history_per_event / theirs.history_per_event),
        ("process CPU per event", mine.cpu_per_event / theirs.cpu_per_event),
    ):
        print(ratio_line(f"project/baseline {label}", ratio, [ratio]))
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--senders", type=int, default=10)
    args = parser.parse_args()
    exit_without_teardown(lambda: asyncio.run(bench(args.events, args.senders)))


if __name__ == "__main__":
    main()
