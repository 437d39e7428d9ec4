"""Reactive chain benchmark: events per second into one chain and the latency from publish to the
subscribed agent's start, against a hand-written temporalio workflow doing the same work; then a
soak of many events through one chain across continue-as-new, with the worker's peak memory.

    .venv/bin/python -m bench.chain_bench [--events N] [--soak-events M]

Why the comparison is fair: both sides run on the same Temporal server, through the same client
(same data converter), in the same process, one after the other, each with a worker of its own on
a task queue of its own using the SDK's default worker limits. Both receive the same N envelopes
(built the same way, sent as the same JSON), from the same number of concurrent senders, one
signal per event; both answer each signal by starting one activity, whose first line records the
time. Nothing but the worker limits the baseline's concurrency, and the chain's `max_concurrency`
is set well above the number of senders, so neither side is throttled by configuration. Both
workflows are warmed up (started and queried, so the worker holds them in its cache) before the
clock starts. The timestamps on both ends come from `time.perf_counter()` in this one process, so
no clocks are compared across machines. What the ratio measures is therefore exactly the
project's own per-event work: validating the envelope, deduplication, the ordered timeline, the
subscription match and the bookkeeping around each agent run.
"""

import argparse
import asyncio
import math
import resource
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

from bench.server import bench_server
from infra.process import exit_without_teardown

with workflow.unsafe.imports_passed_through():
    from temporalio.client import Client
    from temporalio.worker import Worker

    from activities.agents import AgentRegistry
    from activities.context import AgentContext
    from models.chain import ChainSpec, ChainState
    from models.envelope import EventEnvelope
    from starter import api
    from worker import build_worker

EVENT_TYPE = "Ping"
SOURCE = "/bench"
PROBE_AGENT = "bench_probe"
SOAK_AGENT = "bench_soak"
SOAK_FILTER = "payload.n % 1000 == 0"
COMPARISON_SENDERS = 10
SOAK_SENDERS = 20
MAX_CONCURRENCY = 50
ACTIVITY_TIMEOUT = timedelta(minutes=5)

SERVER_SUGGEST_CAN_EVENTS = 4096
"""The server's default `limit.historyCount.suggestContinueAsNew` (history events)."""
LOWERED_SUGGEST_CAN_EVENTS = 2000
"""Used by the embedded server when a soak of M events would not reach the default."""


class StartRecorder:
    """When each event's consumer started, by the event's `payload["n"]`."""

    def __init__(self) -> None:
        self.started: dict[int, float] = {}

    def mark(self, n: int) -> None:
        self.started.setdefault(n, time.perf_counter())

    def clear(self) -> None:
        self.started.clear()


# The baseline: what a team would write by hand with temporalio alone.


class BaselineActivities:
    def __init__(self, recorder: StartRecorder) -> None:
        self._recorder = recorder

    @activity.defn(name="baseline_agent")
    async def baseline_agent(self, raw: dict[str, Any]) -> None:
        self._recorder.mark(int(raw["payload"]["n"]))


@workflow.defn(name="BaselineSignalActivity")
class BaselineSignalActivity:
    """One activity per `event` signal, all concurrent; ends after `close` once they are done."""

    def __init__(self) -> None:
        self._closed = False
        self._started = 0

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self._closed)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._started

    @workflow.signal
    async def event(self, raw: dict[str, Any]) -> None:
        self._started += 1
        await workflow.execute_activity(
            "baseline_agent", raw, start_to_close_timeout=ACTIVITY_TIMEOUT
        )

    @workflow.signal
    def close(self) -> None:
        self._closed = True

    @workflow.query
    def started(self) -> int:
        return self._started


# Measurement helpers.


@dataclass(frozen=True)
class Measurement:
    side: str
    events: int
    seconds: float
    latencies: list[float] = field(repr=False)

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    @property
    def p50_ms(self) -> float:
        return percentile(self.latencies, 0.50) * 1000

    @property
    def p95_ms(self) -> float:
        return percentile(self.latencies, 0.95) * 1000


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def envelope(n: int, correlation_id: str) -> EventEnvelope:
    return EventEnvelope.new(EVENT_TYPE, SOURCE, payload={"n": n}, correlation_id=correlation_id)


async def send_all(
    count: int, senders: int, send: Callable[[int], Awaitable[None]]
) -> dict[int, float]:
    """Send events 0..count-1 from `senders` concurrent senders; when each send began."""
    sent: dict[int, float] = {}
    numbers = iter(range(count))

    async def sender() -> None:
        for n in numbers:
            sent[n] = time.perf_counter()
            await send(n)

    await asyncio.gather(*(sender() for _ in range(senders)))
    return sent


async def wait_until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.005)


def measure(side: str, sent: dict[int, float], started: dict[int, float]) -> Measurement:
    missing = sorted(set(sent) - set(started))
    if missing:
        raise RuntimeError(f"{side}: {len(missing)} events never reached their consumer")
    latencies = [started[n] - sent[n] for n in sent]
    return Measurement(side, len(sent), max(started.values()) - min(sent.values()), latencies)


def bench_spec(name: str, agent: str, filter_: str | None = None) -> ChainSpec:
    subscription: dict[str, Any] = {"agent": agent, "events": [EVENT_TYPE]}
    if filter_ is not None:
        subscription["filter"] = filter_
    return ChainSpec.model_validate(
        {
            "name": name,
            "triggers": [EVENT_TYPE],
            "subscriptions": [subscription],
            "max_concurrency": MAX_CONCURRENCY,
            "alerts": None,
        }
    )


def bench_registry(probe: StartRecorder) -> AgentRegistry:
    registry = AgentRegistry()

    @registry.register(PROBE_AGENT)
    async def bench_probe(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        probe.mark(int(event.payload["n"]))
        return {}

    @registry.register(SOAK_AGENT)
    async def bench_soak(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {}

    return registry


async def count_runs(client: Client, workflow_id: str) -> int:
    return len([run async for run in client.list_workflows(f"WorkflowId = '{workflow_id}'")])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# The two sides of the comparison.


async def run_project(
    client: Client, registry: AgentRegistry, probe: StartRecorder, events: int
) -> tuple[Measurement, ChainState, int]:
    probe.clear()
    queue, correlation_id = unique("bench-chain-tq"), unique("bench-chain")
    spec = bench_spec("bench-chain", PROBE_AGENT)
    async with build_worker(client, queue, registry):
        handle = await api.start_chain(client, spec, correlation_id, queue=queue)
        await api.chain_state(client, correlation_id)  # warm: the worker holds the chain

        async def send(n: int) -> None:
            await api.publish(client, envelope(n, correlation_id))

        sent = await send_all(events, COMPARISON_SENDERS, send)
        await wait_until(lambda: len(probe.started) >= events, 120, "the chain's agent starts")
        result = measure("project (ReactiveChain)", sent, dict(probe.started))
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), timeout=120)
    return result, state, await count_runs(client, handle.id)


async def run_baseline(client: Client, probe: StartRecorder, events: int) -> Measurement:
    probe.clear()
    queue, correlation_id = unique("bench-baseline-tq"), unique("bench-baseline")
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[BaselineSignalActivity],
        activities=[BaselineActivities(probe).baseline_agent],
    )
    async with worker:
        handle = await client.start_workflow(
            BaselineSignalActivity.run, id=f"baseline-{correlation_id}", task_queue=queue
        )
        await handle.query(BaselineSignalActivity.started)  # warm, as the project side

        async def send(n: int) -> None:
            raw = envelope(n, correlation_id).model_dump(mode="json")
            await handle.signal(BaselineSignalActivity.event, raw)

        sent = await send_all(events, COMPARISON_SENDERS, send)
        await wait_until(lambda: len(probe.started) >= events, 120, "the baseline's activities")
        result = measure("baseline (temporalio)", sent, dict(probe.started))
        await handle.signal(BaselineSignalActivity.close)
        started = await asyncio.wait_for(handle.result(), timeout=120)
    if started != events:
        raise RuntimeError(f"baseline saw {started} events, expected {events}")
    return result


def print_comparison(project: Measurement, baseline: Measurement) -> None:
    print(f"{'side':<26} {'events':>7} {'events/s':>10} {'p50 ms':>9} {'p95 ms':>9}")
    for row in (project, baseline):
        print(
            f"{row.side:<26} {row.events:>7} {row.rate:>10.1f} "
            f"{row.p50_ms:>9.1f} {row.p95_ms:>9.1f}"
        )
    print(
        "ratios project/baseline: "
        f"events/s {project.rate / baseline.rate:.2f}, "
        f"p50 {project.p50_ms / baseline.p50_ms:.2f}, "
        f"p95 {project.p95_ms / baseline.p95_ms:.2f}"
    )


# The soak.


def peak_rss_mib() -> float:
    """The process's peak resident set; ru_maxrss is in KiB on Linux."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run_soak(client: Client, registry: AgentRegistry, events: int) -> bool:
    """Returns whether the chain saw every event exactly once."""
    queue, correlation_id = unique("bench-soak-tq"), unique("bench-soak")
    spec = bench_spec("bench-soak", SOAK_AGENT, SOAK_FILTER)
    before = peak_rss_mib()
    async with build_worker(client, queue, registry):
        handle = await api.start_chain(client, spec, correlation_id, queue=queue)
        await api.chain_state(client, correlation_id)
        begin = time.perf_counter()

        async def send(n: int) -> None:
            await api.publish(client, envelope(n, correlation_id))

        await send_all(events, SOAK_SENDERS, send)
        published = time.perf_counter() - begin
        await api.close_chain(client, correlation_id)
        try:
            state = await asyncio.wait_for(handle.result(), timeout=180)
        except TimeoutError:
            stuck = await api.chain_state(client, correlation_id)
            runs = await count_runs(client, handle.id)
            print(
                f"soak FAILED: the chain did not end within 180s of `close` "
                f"(runs: {runs}, status: {stuck.status.value}, "
                f"events_seen: {stuck.events_seen}/{events})"
            )
            await handle.terminate("bench: the chain did not end after close")
            return False
        wall = time.perf_counter() - begin
    after = peak_rss_mib()
    runs = await count_runs(client, handle.id)
    matched = len(range(0, events, 1000))
    print(
        f"soak: {events} events through one chain ({SOAK_SENDERS} senders, subscription "
        f"filter `{SOAK_FILTER}` matches {matched})"
    )
    print(f"  wall time          {wall:8.1f} s   (publishing {published:.1f} s)")
    print(f"  events/s           {events / wall:8.1f}     (publishing {events / published:.1f})")
    print(f"  runs               {runs:8d}     ({runs - 1} continue-as-new)")
    print(f"  events_seen        {state.events_seen:8d}     (expected {events})")
    print(f"  duplicates         {state.duplicates:8d}")
    print(f"  rejected           {len(state.rejected):8d}")
    print(f"  status             {state.status.value:>8}")
    print(
        f"  worker peak RSS    {after:8.1f} MiB (+{after - before:.1f} MiB over {before:.1f} MiB "
        "before the soak; worker and publisher share this process)"
    )
    return state.events_seen == events


# Wiring.


@asynccontextmanager
async def temporal(soak_events: int) -> AsyncIterator[Client]:
    """Lowers the continue-as-new suggestion when the soak would not reach the default."""
    lowered = soak_events <= SERVER_SUGGEST_CAN_EVENTS
    extra = (
        [
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={LOWERED_SUGGEST_CAN_EVENTS}",
        ]
        if lowered
        else []
    )
    async with bench_server(extra) as (client, where):
        suggestion = (
            f"continue-as-new suggested at {LOWERED_SUGGEST_CAN_EVENTS} history events (lowered: "
            f"{soak_events} soak events would not reach the default)"
            if lowered
            else f"continue-as-new suggested at {SERVER_SUGGEST_CAN_EVENTS} history events or 4 MiB"
        )
        print(f"server: {where}; {suggestion}")
        yield client


async def run(events: int, soak_events: int) -> int:
    probe = StartRecorder()
    registry = bench_registry(probe)
    async with temporal(soak_events) as client:
        project, state, runs = await run_project(client, registry, probe, events)
        baseline = await run_baseline(client, probe, events)
        print()
        print(f"comparison: {events} events into one workflow, {COMPARISON_SENDERS} senders")
        print_comparison(project, baseline)
        print(
            f"  (the chain: {runs} run(s), events_seen {state.events_seen}, "
            f"duplicates {state.duplicates})"
        )
        print()
        ok = await run_soak(client, registry, soak_events)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=500, help="events per comparison side")
    parser.add_argument("--soak-events", type=int, default=20_000, help="events in the soak")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.events, args.soak_events))


if __name__ == "__main__":
    exit_without_teardown(main)
