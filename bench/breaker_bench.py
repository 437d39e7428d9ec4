"""What the circuit breaker costs a healthy agent: agent runs through a closed breaker against the
same runs with the breaker disabled.

    .venv/bin/python -m bench.breaker_bench [--runs 400] [--drivers 10] [--in-flight 4] [--rounds 3]

Two agents, the same trivial async function, one declared with the default breaker and one
with `breaker: {enabled: false}`, both served by one `build_worker` (the coordinator queue, which
also hosts the agent's `AgentLedger`, and one queue per agent) on one server (TEMPORAL_ADDRESS
when set, else a throwaway in-memory dev server). Each side's runs go through the real
`run_agent` activity on the agent's own task queue, started by `--drivers` small workflows with
`--in-flight` runs each at a time; a side's throughput is its runs over the wall time from the
first start to the last result. Sides alternate in interleaved rounds (the order rotates), after
a warm-up. The report also counts the ledger's history events (updates from workers): a
healthy agent costs a batch every 2 s per worker, not a message per run.

The goal: at 50 agent runs/s through a closed breaker, at most 5% less throughput.
"""

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from bench.rounds import per_round, ratio_line, rotated
    from bench.server import bench_server
    from coord.activities.mesh.breakers import QUIET_STATS
    from coord.infra.process import exit_without_teardown
    from coord.models.events.envelope import EventEnvelope
    from coord.models.mesh.agents import AgentContext, AgentRegistry, AgentRequest, AgentResult
    from coord.models.mesh.config import PythonAgent
    from coord.models.mesh.ledger import BreakerConfig
    from coord.models.wire.contract import (
        RUN_AGENT_ACTIVITY,
        agent_ledger_workflow_id,
        agent_task_queue,
    )
    from coord.worker import build_worker

SIDE_DEADLINE = 120.0
"""Seconds one side's runs of a round may take (instead of a hang)."""
CLOSED, DISABLED = "closed breaker", "breaker disabled"
AGENTS = {CLOSED: "bench-breaker-on", DISABLED: "bench-breaker-off"}


@dataclass
class DriverInput:
    agent: str
    agent_queue: str
    runs: int
    in_flight: int


@workflow.defn(name="BreakerBenchDriver", sandboxed=False)
class BreakerBenchDriver:
    """Runs `runs` agent runs, `in_flight` at a time, on the agent's queue."""

    @workflow.run
    async def run(self, task: DriverInput) -> int:
        slots = asyncio.Semaphore(task.in_flight)

        async def one(index: int) -> None:
            async with slots:
                request = AgentRequest(
                    agent=task.agent, event=EventEnvelope.new("BenchRun", f"/bench/{index}")
                )
                await workflow.execute_activity(
                    RUN_AGENT_ACTIVITY,
                    request,
                    result_type=AgentResult,
                    task_queue=task.agent_queue,
                    start_to_close_timeout=timedelta(seconds=30),
                )

        await asyncio.gather(*(one(i) for i in range(task.runs)))
        return task.runs


async def trivial(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return {"ok": True}


def registry() -> AgentRegistry:
    agents = AgentRegistry()
    for side, name in AGENTS.items():
        declaration = PythonAgent(
            kind="python",
            callable="bench.breaker_bench:trivial",
            breaker=BreakerConfig(enabled=side == CLOSED),
        )
        agents.register(name, "python", declaration)(trivial)
    return agents


@dataclass
class Measurement:
    side: str
    round: int
    runs: int
    wall: float

    @property
    def throughput(self) -> float:
        return self.runs / self.wall


@dataclass
class Setup:
    client: Client
    home: str
    """The coordinator queue: it names the agents' queues."""
    drivers: int
    in_flight: int

    @property
    def driver_queue(self) -> str:
        return f"{self.home}-drivers"


async def measure(setup: Setup, side: str, runs: int, round_: int) -> Measurement:
    agent = AGENTS[side]
    task = DriverInput(
        agent, agent_task_queue(agent, setup.home), runs // setup.drivers, setup.in_flight
    )
    client, queue, drivers = setup.client, setup.driver_queue, setup.drivers
    started = time.monotonic()
    handles = [
        await client.start_workflow(
            BreakerBenchDriver.run, task, id=f"bench-breaker-{uuid.uuid4().hex}", task_queue=queue
        )
        for _ in range(drivers)
    ]
    results = asyncio.gather(*(handle.result() for handle in handles))
    done = sum(await asyncio.wait_for(results, SIDE_DEADLINE))
    return Measurement(side, round_, done, time.monotonic() - started)


async def ledger_events(client: Client, agent_queue: str) -> int:
    """The history events of the agent's ledger, over all its runs (it continues as new):
    visibility has the closed runs' lengths, the running one is described."""
    workflow_id = agent_ledger_workflow_id(agent_queue)
    closed = f"WorkflowId = '{workflow_id}' AND ExecutionStatus != 'Running'"
    total = sum([execution.history_length async for execution in client.list_workflows(closed)])
    running = await client.get_workflow_handle(workflow_id).describe()
    return total + running.raw_description.workflow_execution_info.history_length


def report(header: list[str], results: list[Measurement], ledger_events: int, warmup: int) -> None:
    for line in header:
        print(line)
    for m in results:
        print(f"round {m.round} {m.side}: {m.runs} runs in {m.wall:.2f}s, {m.throughput:.1f}/s")
    rates = {
        side: sum(m.runs for m in results if m.side == side)
        / sum(m.wall for m in results if m.side == side)
        for side in AGENTS
    }
    print("; ".join(f"{side}: {rate:.1f} runs/s" for side, rate in rates.items()))
    ratios = per_round(results, CLOSED, DISABLED, lambda m: m.throughput)
    print(ratio_line("closed/disabled throughput", rates[CLOSED] / rates[DISABLED], ratios))
    runs = sum(m.runs for m in results if m.side == CLOSED) + warmup
    print(
        f"the ledger's history: {ledger_events} events in all, for {runs} runs through the "
        "closed breaker (warm-up included)"
    )


async def bench(runs: int, drivers: int, in_flight: int, warmup: int, rounds: int) -> int:
    queue = f"bench-breaker-{uuid.uuid4().hex[:8]}"
    async with bench_server() as (client, server):
        setup = Setup(client, queue, drivers, in_flight)
        worker = build_worker(client, queue, registry())
        driver = Worker(client, task_queue=setup.driver_queue, workflows=[BreakerBenchDriver])
        async with worker, driver:
            for side in AGENTS:
                await measure(setup, side, warmup, 0)
            results = [
                await measure(setup, side, runs, round_)
                for round_ in range(1, rounds + 1)
                for side in rotated(list(AGENTS), round_)
            ]
            await asyncio.sleep(QUIET_STATS + 1)  # the last batch (a quiet breaker's: no failures)
            events = await ledger_events(client, agent_task_queue(AGENTS[CLOSED], queue))
    report(
        [
            "Agent runs through a closed circuit breaker vs the breaker disabled",
            f"server: {server}; CPUs: {os.cpu_count()} (a shared machine: other work runs too)",
            f"runs per side and round: {runs} ({drivers} driver workflows, {in_flight} in flight "
            f"each); rounds: {rounds}, interleaved; warm-up: {warmup} per side",
        ],
        results,
        events,
        warmup,
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=400, help="timed runs per side and round")
    parser.add_argument("--drivers", type=int, default=10, help="driver workflows per side")
    parser.add_argument("--in-flight", type=int, default=4, help="runs in flight per driver")
    parser.add_argument("--warmup", type=int, default=100, help="untimed runs per side first")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per side")
    args = parser.parse_args()
    if min(args.runs, args.drivers, args.in_flight, args.warmup, args.rounds) < 1:
        parser.error("every count must be at least 1")
    if args.runs < args.drivers:
        parser.error("--runs must be at least --drivers")
    run = bench(args.runs, args.drivers, args.in_flight, args.warmup, args.rounds)
    exit_without_teardown(lambda: asyncio.run(run))


if __name__ == "__main__":
    main()
