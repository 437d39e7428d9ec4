"""Publish-to-accepted latency into one chain: a plain publish (a signal) against an acknowledged
one (`publish_acked`, the chain's `publish` update), in interleaved rounds on one server.

    .venv/bin/python -m bench.ack_bench [--events 30] [--rounds 3]

What each side measures, one event at a time into one running chain (an event type no
subscription matches, so only the intake's work counts): for the acknowledged publish, from the
call to the answer in the publisher's hands; for the signal, from the call to the moment the
chain recorded the event: the completion of the workflow task that took it in, read from the
chain's history (the server runs on this machine's clock). The signal's publisher learns nothing
at that moment: the acknowledged side buys that knowledge, and ack/signal prices it. Each round
runs both sides, in an order that rotates (bench.rounds); the next event goes once the previous
one is recorded.
"""

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.rounds import per_round, ratio_line, rotated
from bench.server import bench_server
from coord.infra.process import exit_without_teardown
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.wire.specs import load_spec
from coord.starter import api
from coord.worker import build_worker

SIGNAL, ACK = "signal", "ack"
EVENT_DEADLINE = 30.0
"""Seconds one event may take to be recorded before the bench gives up (instead of hanging)."""
POLL = 0.002


@dataclass(frozen=True)
class Measurement:
    side: str
    round: int
    latencies: list[float]

    def p50_ms(self) -> float:
        return 1000 * statistics.median(self.latencies)


Publish = Callable[[EventEnvelope], Awaitable[float]]
"""Publishes one event; returns its publish-to-accepted seconds (ack), or when it was sent
(signal: the latency is read from the history afterwards)."""


def note(correlation_id: str) -> EventEnvelope:
    return EventEnvelope.new("BenchNote", "/bench", correlation_id=correlation_id)


def acked_side(client: Client) -> Publish:
    async def publish(envelope: EventEnvelope) -> float:
        started = time.perf_counter()
        answer = await api.publish_acked(client, envelope)
        if answer.verdict != "accepted":
            raise RuntimeError(f"{envelope.event.id}: {answer.describe()}")
        return time.perf_counter() - started

    return publish


def signal_side(client: Client, correlation_id: str) -> Publish:
    """The signal's side: sent, then (pacing only) waited for until the chain has recorded it;
    its latency is read afterwards from the history (`recorded_after`)."""

    async def publish(envelope: EventEnvelope) -> float:
        sent = time.time()
        await api.publish(client, envelope)
        await wait_recorded(client, correlation_id, envelope.event.id)
        return sent

    return publish


async def wait_recorded(client: Client, correlation_id: str, event_id: str) -> None:
    async with asyncio.timeout(EVENT_DEADLINE):
        while True:
            timeline = await api.chain_timeline(client, correlation_id)
            if any(entry.event_id == event_id for entry in reversed(timeline)):
                return
            await asyncio.sleep(POLL)


async def recorded_after(
    client: Client, correlation_id: str, sent: dict[str, float]
) -> list[float]:
    """Each signalled event's seconds from its send to the completion of the workflow task that
    took it in (the server's timestamps; the server runs on this machine's clock)."""
    handle = api.chain_handle(client, correlation_id)
    waiting: list[str] = []
    latencies: list[float] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            payload = event.workflow_execution_signaled_event_attributes.input.payloads[0]
            event_id = json.loads(payload.data)["event"]["id"]
            if event_id in sent:
                waiting.append(event_id)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and waiting:
            done = event.event_time.ToDatetime(UTC).timestamp()
            latencies += [done - sent[event_id] for event_id in waiting]
            waiting.clear()
    return latencies


async def measure(
    client: Client, side: str, publish: Publish, correlation_id: str, events: int, round_: int
) -> Measurement:
    if side == ACK:
        return Measurement(
            side, round_, [await publish(note(correlation_id)) for _ in range(events)]
        )
    sent: dict[str, float] = {}
    for _ in range(events):
        envelope = note(correlation_id)
        sent[envelope.event.id] = await publish(envelope)
    return Measurement(side, round_, await recorded_after(client, correlation_id, sent))


async def bench(events: int, rounds: int) -> int:
    example = Path(__file__).resolve().parent.parent / "examples" / "user-story-chain.yaml"
    spec = load_spec(ChainSpec, example)
    queue, correlation_id = f"bench-ack-{uuid.uuid4().hex[:8]}", f"bench-ack-{uuid.uuid4().hex[:8]}"
    async with bench_server() as (client, server), build_worker(client, queue):
        await api.start_chain(client, spec, correlation_id, queue=queue, eager=True)
        sides = {SIGNAL: signal_side(client, correlation_id), ACK: acked_side(client)}
        for side, publish in sides.items():  # warm-up: the chain is in the worker's cache
            await measure(client, side, publish, correlation_id, 3, 0)
        results = [
            await measure(client, side, sides[side], correlation_id, events, round_)
            for round_ in range(1, rounds + 1)
            for side in rotated(list(sides), round_)
        ]
        await api.close_chain(client, correlation_id)
    print("Publish-to-accepted into one chain: plain publish (signal) vs acknowledged (update)")
    print(f"server: {server}; CPUs: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f}")
    print(f"events per side and round: {events}, one at a time; rounds: {rounds}, interleaved")
    print(f"{'round':>5}  {'side':<8}{'p50 ms':>9}{'p95 ms':>9}")
    for m in results:
        p95 = 1000 * sorted(m.latencies)[max(0, int(0.95 * len(m.latencies)) - 1)]
        print(f"{m.round:>5}  {m.side:<8}{m.p50_ms():>9.1f}{p95:>9.1f}")
    p50 = {
        side: statistics.median(x for m in results if m.side == side for x in m.latencies)
        for side in sides
    }
    print(
        "; ".join(f"{side}: p50 {1000 * value:.1f} ms" for side, value in p50.items()),
        "(all rounds)",
    )
    ratios = per_round(results, ACK, SIGNAL, lambda m: m.p50_ms())
    print(ratio_line(f"{ACK}/{SIGNAL} publish-to-accepted p50", p50[ACK] / p50[SIGNAL], ratios))
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=30, help="events per side and round")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per side")
    args = parser.parse_args()
    if min(args.events, args.rounds) < 1:
        parser.error("--events and --rounds must be at least 1")
    exit_without_teardown(lambda: asyncio.run(bench(args.events, args.rounds)))


if __name__ == "__main__":
    main()
