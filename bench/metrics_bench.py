"""What the metrics endpoint costs, or tracing: saga and chain throughput with it on and off,
in interleaved rounds in one process.

    .venv/bin/python -m bench.metrics_bench [--sagas 20] [--events 200] [--rounds 3]
    .venv/bin/python -m bench.metrics_bench --tracing   # tracing on and off instead

With `--tracing`, `on` is a client (and so its workers) with the tracing interceptors
(`coord.infra.tracing.client_interceptors`, spans batched into memory), `off` one without;
both run with the no-op meter.

Why the comparison is fair: both sides are the project's own workers, in one process, against
one server, each on its own task queue and on an SDK runtime of its own: `on` with the
Prometheus exporter (`coord worker --metrics-port`), `off` without (the SDK's no-op meter, what
a worker without the option records into). Every workflow and activity is the same; only the
runtime differs. Each round runs every side once, alone, in an order that rotates (bench.rounds):
N Feature Deployment sagas (the saga bench's measure, at most C in flight), then M events into a
fresh chain whose agent records when it starts (the chain bench's probe: events per second from
the first send to the last agent start). At the end the `on` endpoint is scraped once, to show
that the facts were recorded.
"""

import argparse
import asyncio
import os
import socket
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from bench.chain_bench import (
    COMPARISON_SENDERS,
    PROBE_AGENT,
    StartRecorder,
    bench_spec,
    envelope,
    send_all,
    wait_until,
)
from bench.chain_bench import Measurement as ChainMeasurement
from bench.chain_bench import measure as chain_measure
from bench.rounds import ratio_line, rotated
from bench.saga_bench import Measurement as SagaMeasurement
from bench.saga_bench import measure as saga_measure
from bench.saga_bench import project_side
from bench.server import bench_server
from coord.infra.metrics import MetricsEndpoint
from coord.infra.process import exit_without_teardown
from coord.infra.tracing import CorrelationSpans, client_interceptors
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext
from coord.models.saga.spec import SagaSpec
from coord.models.wire.specs import load_spec
from coord.starter import api
from coord.worker import WorkerSet, build_worker, default_registry, worker_runtime

ON, OFF = "on", "off"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "feature-deployment.yaml"


@dataclass
class Side:
    """One side's client (on its own runtime), queue, chain probe and worker."""

    name: str
    client: Client
    queue: str
    probe: StartRecorder
    endpoint: MetricsEndpoint | None

    def worker(self) -> WorkerSet:
        registry = default_registry(demo_agents=True)
        probe = self.probe

        @registry.register(PROBE_AGENT)
        async def bench_probe(event: EventEnvelope, context: AgentContext) -> dict[str, str]:
            probe.mark(int(event.payload["n"]))
            return {}

        return build_worker(self.client, self.queue, registry)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def side_of(
    base: Client, name: str, endpoint: MetricsEndpoint | None, tracing: bool = False
) -> Side:
    config = base.service_client.config
    client = await Client.connect(
        config.target_host,
        namespace=base.namespace,
        runtime=worker_runtime(endpoint),
        data_converter=base.data_converter,
        interceptors=client_interceptors() if tracing else [],
    )
    return Side(
        name, client, f"bench-metrics-{name}-{uuid.uuid4().hex[:8]}", StartRecorder(), endpoint
    )


async def chain_round(side: Side, events: int) -> ChainMeasurement:
    side.probe.clear()
    correlation_id = f"bench-metrics-{side.name}-{uuid.uuid4().hex[:8]}"
    spec = bench_spec("bench-metrics", PROBE_AGENT)
    handle = await api.start_chain(side.client, spec, correlation_id, queue=side.queue)
    await api.chain_state(side.client, correlation_id)  # warm: the worker holds the chain

    async def send(n: int) -> None:
        await api.publish(side.client, envelope(n, correlation_id))

    sent = await send_all(events, COMPARISON_SENDERS, send)
    await wait_until(lambda: len(side.probe.started) >= events, 120, "the chain's agent starts")
    result = chain_measure(side.name, sent, dict(side.probe.started))
    await api.close_chain(side.client, correlation_id)
    await asyncio.wait_for(handle.result(), timeout=120)
    return result


def recorded_sagas(endpoint: MetricsEndpoint) -> float:
    with urllib.request.urlopen(endpoint.url, timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("coord_sagas_total{")
    )


@dataclass(frozen=True)
class Round:
    """One side's round: its sagas, then its chain."""

    round: int
    side: str
    sagas: SagaMeasurement
    chain: ChainMeasurement


def overall(rounds: list[Round], side: str, count: str) -> float:
    """Sagas (or events) per second over all of a side's rounds."""
    mine = [r for r in rounds if r.side == side]
    if count == "sagas":
        return sum(r.sagas.sagas for r in mine) / sum(r.sagas.wall for r in mine)
    return sum(r.chain.events for r in mine) / sum(r.chain.seconds for r in mine)


def per_round(rounds: list[Round], count: str) -> list[float]:
    """Each round's on/off ratio."""
    ratios = []
    for on in (r for r in rounds if r.side == ON):
        off = next(r for r in rounds if r.side == OFF and r.round == on.round)
        if count == "sagas":
            ratios.append(on.sagas.throughput / off.sagas.throughput)
        else:
            ratios.append(on.chain.rate / off.chain.rate)
    return ratios


def report(rounds: list[Round]) -> None:
    print(f"{'round':>5}  {'side':<5}{'sagas/s':>9}{'p50 ms':>9}{'events/s':>10}{'p50 ms':>9}")
    for r in rounds:
        saga_p50 = r.sagas.percentile_ms(0.5)
        print(
            f"{r.round:>5}  {r.side:<5}{r.sagas.throughput:>9.1f}{saga_p50:>9.1f}"
            f"{r.chain.rate:>10.1f}{r.chain.p50_ms:>9.1f}"
        )
    for label, count in (("saga throughput", "sagas"), ("chain events/s", "events")):
        on, off = overall(rounds, ON, count), overall(rounds, OFF, count)
        print(
            ratio_line(f"{label} on/off ({on:.1f} / {off:.1f})", on / off, per_round(rounds, count))
        )


def trace_into_memory() -> InMemorySpanExporter:
    """Spans go to memory, batched as an exporter to a collector would have them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(CorrelationSpans())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


async def bench(
    sagas: int, events: int, concurrency: int, warmup: int, rounds: int, tracing: bool
) -> int:
    spec = load_spec(SagaSpec, EXAMPLE)
    spans = trace_into_memory() if tracing else None
    async with bench_server() as (base, server):
        sides = {
            ON: await side_of(base, ON, None if tracing else MetricsEndpoint(free_port()), tracing),
            OFF: await side_of(base, OFF, None),
        }
        runs = {name: project_side(side.client, side.queue, spec) for name, side in sides.items()}
        async with sides[ON].worker(), sides[OFF].worker():
            for name in sides:
                await saga_measure(name, runs[name], warmup, warmup)
                await chain_round(sides[name], warmup * 10)
            results: list[Round] = []
            for round_ in range(1, rounds + 1):
                for name in rotated([ON, OFF], round_):
                    sagas_done = await saga_measure(name, runs[name], sagas, concurrency, round_)
                    chain = await chain_round(sides[name], events)
                    results.append(Round(round_, name, sagas_done, chain))
            endpoint = sides[ON].endpoint
            recorded = recorded_sagas(endpoint) if endpoint is not None else 0.0
    if spans is not None:
        print("Tracing on (interceptors, spans batched to memory) vs off: project sagas and chains")
    else:
        print("Metrics on (Prometheus exporter) vs off (no-op meter): project sagas and chains")
    print(f"server: {server}; CPUs: {os.cpu_count()}")
    print(
        f"per side and round: {sagas} sagas (concurrency {concurrency}), {events} chain events "
        f"({COMPARISON_SENDERS} senders); rounds: {rounds}, interleaved; warm-up: {warmup} sagas"
    )
    report(results)
    if spans is not None:
        trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]
        print(f"the `on` side's spans: {len(spans.get_finished_spans())}")
    else:
        print(f"the `on` endpoint counted {recorded:.0f} sagas ended")
    failures = [failure for result in results for failure in result.sagas.failures]
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sagas", type=int, default=20, help="timed sagas per side and round")
    parser.add_argument("--events", type=int, default=200, help="chain events per side and round")
    parser.add_argument("--concurrency", type=int, default=10, help="sagas in flight at most")
    parser.add_argument("--warmup", type=int, default=3, help="untimed sagas per side first")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per side")
    parser.add_argument("--tracing", action="store_true", help="compare tracing on and off")
    args = parser.parse_args()
    if min(args.sagas, args.events, args.concurrency, args.warmup, args.rounds) < 1:
        parser.error("every count must be at least 1")
    run = bench(args.sagas, args.events, args.concurrency, args.warmup, args.rounds, args.tracing)
    exit_without_teardown(lambda: asyncio.run(run))


if __name__ == "__main__":
    main()
