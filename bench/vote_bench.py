"""A consensus vote run by the project (`Vote`, three python voters) against a hand-written
temporalio workflow doing the same, in interleaved rounds on one server.

    .venv/bin/python -m bench.vote_bench [--votes 20] [--concurrency 5] [--rounds 3]

Why the comparison is fair: both sides run in one process on one server, through one client,
each on its own worker and task queue. Both put the same proposal to three voters at once, one
activity each, whose work is trivial (approve, with a reason); both decide as soon as two of
three approve (the project's default threshold, 0.67) and cancel the run still out. Each vote's
latency is taken from the start request to its result; N votes run with at most C in flight.
What project/baseline prices is what the project adds: the spec, the agent-run path (its agent
queues, ledgers and breakers), the ballots and the typed record.
"""

import argparse
import asyncio
import os
import statistics
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from bench.baseline_vote import VOTERS, BaselineVote, ballot, baseline_voter
from bench.rounds import RunOne, per_round, ratio_line, rotated, timed_runs
from bench.server import bench_server
from coord.infra.process import exit_without_teardown
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.vote.spec import VoteSpec, VoteStatus
from coord.starter import api
from coord.worker import build_worker

PROPOSAL = {"release": "2.4.0", "tests_passed": True}
VOTE_DEADLINE = 60.0
"""Seconds one vote may take before it counts as not decided (instead of a hang)."""


def bench_registry() -> AgentRegistry:
    registry = AgentRegistry()
    for voter in VOTERS:

        def vote(
            name: str,
        ) -> Callable[[EventEnvelope, AgentContext], Awaitable[Mapping[str, Any]]]:
            async def run(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
                return ballot(name)

            return run

        registry.register(voter)(vote(voter))
    return registry


def project_side(client: Client, queue: str) -> RunOne:
    async def run_one(vote_id: str) -> str | None:
        spec = VoteSpec(vote_id=vote_id, proposal=PROPOSAL, voters=list(VOTERS))
        state = await api.vote_outcome(await api.start_vote(client, spec, queue=queue))
        return None if state.status == VoteStatus.DECIDED else f"{vote_id}: {state.status}"

    return run_one


def baseline_side(client: Client, queue: str) -> RunOne:
    async def run_one(vote_id: str) -> str | None:
        handle = await client.start_workflow(
            BaselineVote.run, PROPOSAL, id=vote_id, task_queue=queue
        )
        return None if await handle.result() else f"{vote_id}: not decided"

    return run_one


@dataclass(frozen=True)
class Measurement:
    side: str
    round: int
    votes: int
    wall: float
    latencies: list[float]
    failures: list[str]

    @property
    def rate(self) -> float:
        return self.votes / self.wall

    def p50_ms(self) -> float:
        return 1000 * statistics.median(self.latencies)


async def measure(
    side: str, run_one: RunOne, votes: int, concurrency: int, round_: int
) -> Measurement:
    timed = await timed_runs(side, run_one, votes, concurrency, VOTE_DEADLINE)
    return Measurement(side, round_, votes, timed.wall, timed.latencies, timed.failures)


def report(results: list[Measurement]) -> None:
    print(f"{'round':>5}  {'side':<10}{'votes':>7}{'votes/s':>10}{'p50 ms':>10}")
    for m in results:
        print(f"{m.round:>5}  {m.side:<10}{m.votes:>7}{m.rate:>10.1f}{m.p50_ms():>10.1f}")
    sides = list(dict.fromkeys(m.side for m in results))
    rates = {
        side: sum(m.votes for m in results if m.side == side)
        / sum(m.wall for m in results if m.side == side)
        for side in sides
    }
    p50s = {
        side: statistics.median(m.p50_ms() for m in results if m.side == side) for side in sides
    }
    print(
        "; ".join(f"{side}: {rates[side]:.1f} votes/s, p50 {p50s[side]:.1f} ms" for side in sides)
        + " (all rounds; p50: median of the rounds')"
    )
    ratios = per_round(results, "project", "baseline", lambda m: m.rate)
    print(ratio_line("project/baseline throughput", rates["project"] / rates["baseline"], ratios))


async def bench(votes: int, concurrency: int, warmup: int, rounds: int) -> int:
    run_id = uuid.uuid4().hex[:8]
    project_queue, baseline_queue = f"bench-vote-{run_id}", f"bench-vote-baseline-{run_id}"
    async with bench_server() as (client, server):
        sides = {
            "project": project_side(client, project_queue),
            "baseline": baseline_side(client, baseline_queue),
        }
        baseline_worker = Worker(
            client, task_queue=baseline_queue, workflows=[BaselineVote], activities=[baseline_voter]
        )
        async with build_worker(client, project_queue, bench_registry()), baseline_worker:
            warm = [await measure(s, run, warmup, warmup, 0) for s, run in sides.items()]
            results = [
                await measure(side, sides[side], votes, concurrency, round_)
                for round_ in range(1, rounds + 1)
                for side in rotated(list(sides), round_)
            ]
    print("Consensus vote (3 voters, 2 decide): project vs hand-written temporalio workflow")
    print(f"server: {server}; CPUs: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f}")
    print(f"votes per side and round: {votes}; concurrency: {concurrency}; rounds: {rounds}")
    report(results)
    failures = [failure for m in warm + results for failure in m.failures]
    for failure in failures[:5]:
        print(f"not decided: {failure}")
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--votes", type=int, default=20, help="timed votes per side and round")
    parser.add_argument("--concurrency", type=int, default=5, help="votes in flight at most")
    parser.add_argument("--warmup", type=int, default=3, help="untimed votes per side first")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per side")
    args = parser.parse_args()
    if min(args.votes, args.concurrency, args.warmup, args.rounds) < 1:
        parser.error("--votes, --concurrency, --warmup and --rounds must be at least 1")
    run = bench(args.votes, args.concurrency, args.warmup, args.rounds)
    exit_without_teardown(lambda: asyncio.run(run))


if __name__ == "__main__":
    main()
