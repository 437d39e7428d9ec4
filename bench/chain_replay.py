"""What a chain's workflow code costs per event it takes in, measured without the machine's
load: a flood of events (all signalled before a worker runs, so a few workflow tasks take them
in, `EVENTS_PER_TASK` each) into a chain shaped like `bench.chain_bench`'s (every event runs the
probe agent) with a filtered subscription besides (the soak's filter), replayed in this process
many times (`bench.saga_replay.replay_cpu`: no server, no network, no waiting), and the function
calls of one replay (a count the machine's load does not change).

    .venv/bin/python -m bench.chain_replay [--events 100] [--replays 10] [--profile 25]

`--keep FILE` writes the recorded history there, which `--replay FILE` replays again without
running anything (`tests/histories/ReactiveChain/chain-flood-of-a-hundred.json` is one).
"""

import argparse
import asyncio
import cProfile
import pstats
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from bench.chain_bench import (
    MAX_CONCURRENCY,
    PROBE_AGENT,
    SOAK_AGENT,
    SOAK_FILTER,
    StartRecorder,
    bench_registry,
    envelope,
    wait_until,
)
from bench.saga_replay import profiled, replay_cpu
from bench.server import bench_server
from coord.infra.process import exit_without_teardown
from coord.models.chain.spec import ChainSpec
from coord.starter import api
from coord.worker import build_worker

SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED


def flood_spec(name: str) -> ChainSpec:
    """The bench's chain (every `Ping` runs the probe) and a filtered subscription besides."""
    subscriptions: list[dict[str, Any]] = [
        {"agent": PROBE_AGENT, "events": ["Ping"]},
        {"agent": SOAK_AGENT, "events": ["Ping"], "filter": SOAK_FILTER},
    ]
    return ChainSpec.model_validate(
        {
            "name": name,
            "triggers": ["Ping"],
            "subscriptions": subscriptions,
            "max_concurrency": MAX_CONCURRENCY,
            "alerts": None,
        }
    )


async def flood(client: Client, events: int) -> WorkflowHistory:
    """`events` signalled before the worker runs, all taken in and run, then the close."""
    probe = StartRecorder()
    queue, correlation_id = f"chain-replay-{uuid.uuid4().hex[:8]}", "chain-flood"
    correlation_id = f"{correlation_id}-{uuid.uuid4().hex[:8]}"
    handle = await api.start_chain(client, flood_spec("flood"), correlation_id, queue=queue)
    for n in range(events):
        await handle.signal("event", envelope(n, correlation_id).model_dump(mode="json"))
    async with build_worker(client, queue, bench_registry(probe)):
        await wait_until(lambda: len(probe.started) >= events, 300, "the probe's runs")
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(handle.result(), timeout=300)
    return await handle.fetch_history()


async def recorded(events: int) -> WorkflowHistory:
    async with bench_server() as (client, _):
        return await flood(client, events)


def signals(history: WorkflowHistory) -> int:
    return sum(1 for event in history.events if event.event_type == SIGNALED)


def calls_per_replay(history: WorkflowHistory) -> int:
    """The function calls of one replay (`replay_cpu` replays twice: once to warm up)."""
    profile = cProfile.Profile()
    replay_cpu(history, 1, profile)
    return int(pstats.Stats(profile).total_calls) // 2  # type: ignore[attr-defined]


def main() -> None:
    exit_without_teardown(measure)


def measure() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--replays", type=int, default=10, help="replays of the history")
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest functions")
    parser.add_argument("--keep", type=Path, help="write the recorded history to this file")
    parser.add_argument("--replay", type=Path, help="replay the history kept in this file")
    args = parser.parse_args()
    if args.replay is None:
        history = asyncio.run(recorded(args.events))
    else:
        history = WorkflowHistory.from_json("flood", args.replay.read_text())
    if args.keep is not None:
        args.keep.write_text(history.to_json())
    handled = signals(history)
    cost = replay_cpu(history, args.replays)
    calls = calls_per_replay(history)
    print(
        f"chain: {handled} signals, {len(history.events)} history events; "
        f"{1e6 * cost.workflow / handled:.0f} µs of workflow-thread CPU per event "
        f"({1e6 * cost.process / handled:.0f} µs of the process's), "
        f"{calls / handled:.0f} function calls per event"
    )
    if args.profile:
        profiled(history, args.replays, args.profile)


if __name__ == "__main__":
    main()
