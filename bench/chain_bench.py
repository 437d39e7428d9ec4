"""Reactive chain benchmark: events per second into one chain and the latency from publish to the
subscribed agent's start, against a hand-written temporalio workflow doing the same work; then a
soak: R runs in a row of M events from 10 publishers at full speed into one chain, across
continue-as-new, each checking that every event is accounted for (`received = seen + duplicates +
rejected`, nothing parked) and every `state` query sent meanwhile is answered.

    .venv/bin/python -m bench.chain_bench [--events N] [--soak-events M] [--soak-runs R]
        [--interval-ms MS]

`--interval-ms` sends the comparison's events from one sender waiting that long after each
send: a chain at a trickle, whose every local run goes alone (a batch of one).

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
subscription match and the bookkeeping around each agent run. One difference is the product's
own: the chain runs its python agent as a local activity (as it runs every short in-process agent
its worker serves), the hand-written workflow an activity task, as each side's user gets it by
default. History events per event are compared too, over every run of the chain.
"""

import argparse
import asyncio
import math
import resource
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.client import Client
    from temporalio.worker import Worker

    from bench.layouts import every_run
    from bench.rounds import ratio_line
    from bench.server import bench_server
    from coord.infra.process import exit_without_teardown
    from coord.models.chain.spec import ChainSpec, ChainState
    from coord.models.events.envelope import EventEnvelope
    from coord.models.mesh.agents import AgentContext, AgentRegistry
    from coord.starter import api
    from coord.worker import build_worker

EVENT_TYPE = "Ping"
SOURCE = "/bench"
PROBE_AGENT = "bench_probe"
SOAK_AGENT = "bench_soak"
SOAK_FILTER = "payload.n % 1000 == 0"
COMPARISON_SENDERS = 10
SOAK_SENDERS = 10
QUERY_EVERY = 0.5
QUERY_TIMEOUT = 30.0
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
    history_events: int = 0
    """Its workflow's history events, over every run (a chain continues as new)."""

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
    count: int, senders: int, send: Callable[[int], Awaitable[None]], interval: float = 0.0
) -> dict[int, float]:
    """Send events 0..count-1 from `senders` concurrent senders, each waiting `interval` seconds
    after each of its sends; when each send began."""
    sent: dict[int, float] = {}
    numbers = iter(range(count))

    async def sender() -> None:
        for n in numbers:
            sent[n] = time.perf_counter()
            await send(n)
            if interval:
                await asyncio.sleep(interval)

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


async def history_events(client: Client, workflow_id: str) -> int:
    """History events of the workflow's every run (`every_run`)."""
    return sum(len(history.events) for history in await every_run(client, workflow_id))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# The two sides of the comparison.


async def run_project(
    client: Client, registry: AgentRegistry, probe: StartRecorder, events: int, pace: "Pace"
) -> tuple[Measurement, ChainState, int]:
    probe.clear()
    queue, correlation_id = unique("bench-chain-tq"), unique("bench-chain")
    spec = bench_spec("bench-chain", PROBE_AGENT)
    async with build_worker(client, queue, registry):
        handle = await api.start_chain(client, spec, correlation_id, queue=queue)
        await api.chain_state(client, correlation_id)  # warm: the worker holds the chain

        async def send(n: int) -> None:
            await api.publish(client, envelope(n, correlation_id))

        sent = await send_all(events, pace.senders, send, pace.interval)
        await wait_until(lambda: len(probe.started) >= events, 120, "the chain's agent starts")
        result = measure("project (ReactiveChain)", sent, dict(probe.started))
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), timeout=120)
    result = replace(result, history_events=await history_events(client, handle.id))
    return result, state, await count_runs(client, handle.id)


async def run_baseline(
    client: Client, probe: StartRecorder, events: int, pace: "Pace"
) -> Measurement:
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

        sent = await send_all(events, pace.senders, send, pace.interval)
        await wait_until(lambda: len(probe.started) >= events, 120, "the baseline's activities")
        result = measure("baseline (temporalio)", sent, dict(probe.started))
        await handle.signal(BaselineSignalActivity.close)
        started = await asyncio.wait_for(handle.result(), timeout=120)
    if started != events:
        raise RuntimeError(f"baseline saw {started} events, expected {events}")
    return replace(result, history_events=await history_events(client, handle.id))


def print_comparison(project: Measurement, baseline: Measurement) -> None:
    print(f"{'side':<26} {'events':>7} {'events/s':>10} {'p50 ms':>9} {'p95 ms':>9}")
    for row in (project, baseline):
        print(
            f"{row.side:<26} {row.events:>7} {row.rate:>10.1f} "
            f"{row.p50_ms:>9.1f} {row.p95_ms:>9.1f}"
        )
    for label, mine, theirs in (
        ("events/s", project.rate, baseline.rate),
        ("history per event", project.history_events, baseline.history_events),
        ("publish-to-agent-start p50", project.p50_ms, baseline.p50_ms),
        ("publish-to-agent-start p95", project.p95_ms, baseline.p95_ms),
    ):
        print(ratio_line(f"project/baseline {label}", mine / theirs, [mine / theirs]))


# The soak.


def peak_rss_mib() -> float:
    """The process's peak resident set; ru_maxrss is in KiB on Linux."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class QueryProbe:
    """`state` queries sent while a soak publishes: how many were answered, how long they took,
    and the ones that were not."""

    latencies: list[float] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)

    async def run(self, client: Client, correlation_id: str, done: asyncio.Event) -> None:
        while not done.is_set():
            begin = time.perf_counter()
            try:
                await asyncio.wait_for(api.chain_state(client, correlation_id), QUERY_TIMEOUT)
                self.latencies.append(time.perf_counter() - begin)
            except Exception as error:  # every failure is a finding of the soak, reported
                self.unanswered.append(f"{type(error).__name__}: {error}")
            await asyncio.sleep(QUERY_EVERY)


@dataclass(frozen=True)
class SoakRun:
    events: int
    wall: float
    published: float
    runs: int
    state: ChainState
    parked: int
    queries: QueryProbe

    @property
    def accounted(self) -> bool:
        """Every event received once, and `received = seen + duplicates + rejected`."""
        state = self.state
        identity = state.received == state.events_seen + state.duplicates + state.rejected_count
        return identity and state.events_seen == self.events

    @property
    def ok(self) -> bool:
        return self.accounted and self.parked == 0 and not self.queries.unanswered


async def run_soak(client: Client, registry: AgentRegistry, events: int) -> SoakRun | None:
    """One soak: `events` from `SOAK_SENDERS` publishers at full speed into one new chain, with
    `state` queries meanwhile; None when the chain does not end after `close`."""
    queue, correlation_id = unique("bench-soak-tq"), unique("bench-soak")
    spec = bench_spec("bench-soak", SOAK_AGENT, SOAK_FILTER)
    queries, published_all = QueryProbe(), asyncio.Event()
    async with build_worker(client, queue, registry):
        handle = await api.start_chain(client, spec, correlation_id, queue=queue)
        await api.chain_state(client, correlation_id)
        begin = time.perf_counter()
        querying = asyncio.create_task(queries.run(client, correlation_id, published_all))

        async def send(n: int) -> None:
            await api.publish(client, envelope(n, correlation_id))

        await send_all(events, SOAK_SENDERS, send)
        published = time.perf_counter() - begin
        published_all.set()
        await querying
        await api.close_chain(client, correlation_id)
        try:
            state = await asyncio.wait_for(handle.result(), timeout=300)
        except TimeoutError:
            await handle.terminate("bench: the chain did not end after close")
            return None
        wall = time.perf_counter() - begin
        parked = len(await api.dlq_entries(client, queue=queue))
    runs = await count_runs(client, handle.id)
    return SoakRun(events, wall, published, runs, state, parked, queries)


def print_soak(number: int, soak: SoakRun) -> None:
    state, queries = soak.state, soak.queries
    answered = len(queries.latencies)
    p95 = percentile(queries.latencies, 0.95) if queries.latencies else 0.0
    print(
        f"{number:>3} {soak.wall:7.1f} {soak.events / soak.published:8.1f} {soak.runs:5d} "
        f"{state.received:9d} {state.events_seen:6d} {state.duplicates:5d} "
        f"{state.rejected_count:5d} {soak.parked:7d} "
        f"{answered:>4}/{answered + len(queries.unanswered):<4} {p95 * 1000:8.0f} "
        f"{'ok' if soak.ok else 'FAILED'}"
    )
    for failure in queries.unanswered[:3]:
        print(f"      unanswered query: {failure}")


async def run_soaks(client: Client, registry: AgentRegistry, events: int, rounds: int) -> bool:
    """`rounds` soaks in a row; returns whether every one accounted for every event, parked
    nothing and answered every query."""
    before = peak_rss_mib()
    print(
        f"soak: {rounds} runs of {events} events into one chain each, {SOAK_SENDERS} publishers "
        f"at full speed, a `state` query every {QUERY_EVERY}s meanwhile (subscription filter "
        f"`{SOAK_FILTER}`)"
    )
    print("run  wall s  pub ev/s  runs  received   seen  dups  rej.  parked  queries  q p95 ms")
    results = []
    for number in range(1, rounds + 1):
        soak = await run_soak(client, registry, events)
        if soak is None:
            print(f"{number:>3} FAILED: the chain did not end within 300s of `close`")
            return False
        print_soak(number, soak)
        results.append(soak.ok)
    after = peak_rss_mib()
    print(
        f"  worker peak RSS {after:.1f} MiB (+{after - before:.1f} MiB over {before:.1f} MiB "
        "before the soaks; worker and publishers share this process)"
    )
    return all(results)


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


@dataclass(frozen=True)
class Pace:
    """How the comparison's events are sent: `senders` at once, each waiting `interval` seconds
    after each send (0: at full speed)."""

    senders: int = COMPARISON_SENDERS
    interval: float = 0.0

    def describe(self) -> str:
        if not self.interval:
            return f"{self.senders} senders at full speed"
        return f"{self.senders} sender(s), each waiting {self.interval * 1000:g} ms after a send"


async def run(events: int, soak_events: int, soak_runs: int, pace: Pace = Pace()) -> int:
    probe = StartRecorder()
    registry = bench_registry(probe)
    async with temporal(soak_events) as client:
        project, state, runs = await run_project(client, registry, probe, events, pace)
        baseline = await run_baseline(client, probe, events, pace)
        print()
        print(f"comparison: {events} events into one workflow, {pace.describe()}")
        print_comparison(project, baseline)
        print(
            f"  (the chain: {runs} run(s), events_seen {state.events_seen}, "
            f"duplicates {state.duplicates})"
        )
        print()
        ok = await run_soaks(client, registry, soak_events, soak_runs)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=500, help="events per comparison side")
    parser.add_argument("--soak-events", type=int, default=20_000, help="events per soak run")
    parser.add_argument("--soak-runs", type=int, default=5, help="soak runs in a row")
    parser.add_argument(
        "--interval-ms",
        type=float,
        default=0.0,
        help="one sender, waiting this long after each send (a chain at a trickle); "
        f"default: {COMPARISON_SENDERS} senders at full speed",
    )
    args = parser.parse_args(argv)
    pace = Pace(1, args.interval_ms / 1000) if args.interval_ms > 0 else Pace()
    return asyncio.run(run(args.events, args.soak_events, args.soak_runs, pace))


if __name__ == "__main__":
    exit_without_teardown(main)
