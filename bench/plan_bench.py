"""A random task graph through the project's `TaskGraph` and through a hand-written temporalio
workflow doing the same scheduling: tasks per second, and their ratio.

    .venv/bin/python -m bench.plan_bench [--tasks 200] [--cap 5] [--rounds 3] [--seed 3]

Why the comparison is fair: both sides run in one process against one server (TEMPORAL_ADDRESS
when set, else a throwaway in-memory dev server), through one client with the project's data
converter, each on its own worker and task queue with the SDK's default limits. Both run the
same graph (N tasks, fixed seed, each depending on up to three earlier ones) under the same cap,
one activity per task with the same timeout and retry policy, each task given the results of the
tasks it depends on, and every activity does the same trivial work (a small dict holding a hash
of its identity). The baseline is what a team would write with temporalio alone: one coroutine
per task that waits for its dependencies, then takes one of `cap` slots of an `asyncio.Semaphore`
for its activity, on the workflow's own queue. The project runs in both layouts a plan offers
(`dispatch`): `project`, the default, sends each agent's runs to that agent's own task queue
(served by the workers that declare it), and `single` (`dispatch: coordinator`) keeps them on the
plan's own queue, as the baseline does. A fourth side, `split`, is the hand-written workflow with
its activities on a queue of their own. So each layout is compared with the hand-written workflow
in the same layout (`single/baseline`, the goal's ratio, and `project/split`: what the project's
own code costs), and `project/baseline` and `split/baseline` show what the agent queues cost.
The rounds are interleaved (the order rotates), after one untimed warm-up plan per side, and
each plan is timed from its start request to its result. Each run's history gives the most
activities in flight at once (scheduled and not closed), so the report shows that every side
held the cap; the last runs of `single` and `baseline` are replayed from their histories to
measure their workflow code's CPU alone. What a same-layout ratio prices is what the project
adds: the spec check, the state machine and its record, priorities and fairness keys, progress
reading, search attributes, details and activity summaries. The bench's agent is a python agent,
which the project runs as a local activity (as it runs every short in-process agent its worker
serves), where the hand-written workflow runs an activity task: each side as its user gets it by
default. The peak of activities in flight counts activity tasks only, so it reads 0 for the
project's sides. History events per task are compared too (goal: at or below the baseline's).
"""

import argparse
import asyncio
import hashlib
import os
import random
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.client import Client
    from temporalio.worker import Replayer, Worker

    from bench.layouts import Phases, phases
    from bench.rounds import per_round, ratio_line, rotated
    from bench.server import add_server_config_option, bench_server, dynamic_config_args
    from coord.infra.process import exit_without_teardown
    from coord.models.events.envelope import EventEnvelope
    from coord.models.mesh.agents import AgentContext, AgentRegistry
    from coord.models.mesh.retry import RetryConfig
    from coord.models.plan.spec import DEFAULT_TASK_TIMEOUT, Dispatch, PlanSpec, PlanStatus
    from coord.models.wire.contract import plan_workflow_id
    from coord.starter import api
    from coord.worker import WORKFLOWS, build_worker

BENCH_AGENT = "bench_task"
MAX_DEPENDENCIES = 3
WARMUP_TASKS = 10
PLAN_DEADLINE = 600.0
"""Seconds one plan may take before the bench gives up on it (instead of hanging)."""
GOAL = 0.9
PROJECT, SINGLE, BASELINE, SPLIT = "project", "single", "baseline", "split"
"""The sides: the project's TaskGraph, each agent's runs on the agent's own queue (`dispatch:
agent_queues`, the default); the same with every agent run on the plan's own queue (`dispatch:
coordinator`); the hand-written workflow; the same with its activities on a task queue of their
own, as the project sends each agent's runs to `agent-<name>`."""
RATIOS = (
    (SINGLE, BASELINE, f"; one queue each, goal >= {GOAL}x"),
    (PROJECT, SPLIT, "; agent queues each"),
    (PROJECT, BASELINE, "; with the agent queues' cost"),
    (SPLIT, BASELINE, "; the agent queues' cost alone"),
)
HISTORY_RATIOS = ((SINGLE, BASELINE), (PROJECT, SPLIT))
"""History events per task, each layout against the hand-written workflow in the same layout."""
REPLAYS = 3


Graph = dict[str, list[str]]
"""Task id -> the ids it depends on, in declaration order (dependencies come first)."""


def random_dag(tasks: int, seed: int) -> Graph:
    """Each task depends on 0 to MAX_DEPENDENCIES tasks drawn from all earlier ones."""
    rng = random.Random(seed)
    graph: Graph = {}
    for index in range(tasks):
        earlier = list(graph)
        count = rng.randint(0, min(MAX_DEPENDENCIES, index))
        graph[f"t{index:03d}"] = sorted(rng.sample(earlier, count))
    return graph


def longest_path(graph: Graph) -> int:
    """Tasks on the graph's longest dependency chain (its critical path, in tasks)."""
    depth: dict[str, int] = {}
    for task, dependencies in graph.items():
        depth[task] = 1 + max((depth[d] for d in dependencies), default=0)
    return max(depth.values())


def trivial_work(identity: str) -> dict[str, Any]:
    """What every task does on both sides: a summary and a hash of the run's identity."""
    return {"summary": "done", "ref": hashlib.sha256(identity.encode()).hexdigest()[:8]}


# The baseline: what a team would write by hand with temporalio alone.

BASELINE_RETRY = RetryConfig().to_retry_policy()
"""The same retry policy as a plan task's default."""


class BaselineGraph(BaseModel):
    """Pydantic models, as the data converter expects (a dataclass would have it build a new
    TypeAdapter for every activity it decodes)."""

    tasks: Graph
    cap: int
    activity_queue: str | None = None
    """Where its activities go: the workflow's own queue (None), or a queue of their own."""


class BaselineTaskInput(BaseModel):
    task: str
    inputs: dict[str, Any] = {}


@activity.defn(name="baseline_task")
async def baseline_task(request: BaselineTaskInput) -> dict[str, Any]:
    info = activity.info()
    return trivial_work(f"{info.workflow_id}/{info.activity_id}")


@workflow.defn(name="BaselineTaskGraph")
class BaselineTaskGraph:
    """One coroutine per task: wait for its dependencies, take a slot, run, publish the result."""

    @workflow.run
    async def run(self, graph: BaselineGraph) -> dict[str, dict[str, Any]]:
        slots = asyncio.Semaphore(graph.cap)
        done = {task: asyncio.Event() for task in graph.tasks}
        results: dict[str, dict[str, Any]] = {}

        async def run_task(task: str, dependencies: list[str]) -> None:
            for dependency in dependencies:
                await done[dependency].wait()
            async with slots:
                results[task] = await workflow.execute_activity(
                    "baseline_task",
                    BaselineTaskInput(task=task, inputs={d: results[d] for d in dependencies}),
                    start_to_close_timeout=DEFAULT_TASK_TIMEOUT,
                    retry_policy=BASELINE_RETRY,
                    task_queue=graph.activity_queue,
                    result_type=dict,
                )
            done[task].set()

        await asyncio.gather(*(run_task(t, deps) for t, deps in graph.tasks.items()))
        return results


# The two sides.

RunPlan = Callable[[str, Graph], Awaitable[str | None]]
"""Runs one graph under the given id; None when every task succeeded, else what went wrong."""


def bench_registry() -> AgentRegistry:
    registry = AgentRegistry()

    @registry.register(BENCH_AGENT)
    async def bench_task(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return trivial_work(context.idempotency_key)

    return registry


def plan_spec(plan_id: str, graph: Graph, cap: int, dispatch: Dispatch) -> PlanSpec:
    tasks = [
        {"id": task, "agent": BENCH_AGENT, "depends_on": dependencies}
        for task, dependencies in graph.items()
    ]
    fields = {"plan_id": plan_id, "max_workers": cap, "dispatch": dispatch, "tasks": tasks}
    return PlanSpec.model_validate(fields)


def project_side(client: Client, queue: str, cap: int, dispatch: Dispatch) -> RunPlan:
    async def run_plan(plan_id: str, graph: Graph) -> str | None:
        # As `coord plan start` does: static summary and details, search attributes.
        spec = plan_spec(plan_id, graph, cap, dispatch)
        state = await api.plan_outcome(await api.start_plan(client, spec, queue=queue))
        if state.status == PlanStatus.COMPLETED:
            return None
        return f"{plan_id}: {state.status.value} ({state.summary})"

    return run_plan


def baseline_side(
    client: Client, queue: str, cap: int, activity_queue: str | None = None
) -> RunPlan:
    async def run_plan(plan_id: str, graph: Graph) -> str | None:
        baseline = BaselineGraph(tasks=graph, cap=cap, activity_queue=activity_queue)
        results = await client.execute_workflow(
            BaselineTaskGraph.run, baseline, id=plan_id, task_queue=queue
        )
        if len(results) == len(graph):
            return None
        return f"{plan_id}: {len(results)} of {len(graph)} tasks have a result"

    return run_plan


# Measurement.


@dataclass(frozen=True)
class Measurement:
    side: str
    round: int
    tasks: int
    seconds: float
    phases: Phases
    failure: str | None
    workflow_id: str

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds

    @property
    def peak_running(self) -> int:
        return self.phases.peak_running


@dataclass(frozen=True)
class Side:
    name: str
    run_plan: RunPlan
    client: Client
    workflow_id: Callable[[str], str]
    workflows: list[type]
    """What replays its runs."""


async def measure(side: Side, round_: int, graph: Graph) -> Measurement:
    plan_id = f"bench-{side.name}-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    try:
        async with asyncio.timeout(PLAN_DEADLINE):
            failure = await side.run_plan(plan_id, graph)
    except Exception as error:  # any failure of a run is the bench's finding, reported
        failure = f"{plan_id}: {type(error).__name__}: {error}"
    seconds = time.perf_counter() - started
    workflow_id = side.workflow_id(plan_id)
    found = await phases(side.client, workflow_id)
    return Measurement(side.name, round_, len(graph), seconds, found, failure, workflow_id)


async def replay_cpu(side: Side, workflow_id: str, times: int = REPLAYS) -> float:
    """CPU seconds this process spends replaying one run from its history: the workflow code's
    own work (and the SDK's), apart from the server, the network and the activities."""
    history = await side.client.get_workflow_handle(workflow_id).fetch_history()
    replayer = Replayer(workflows=side.workflows, data_converter=side.client.data_converter)
    started = time.process_time()
    for _ in range(times):
        await replayer.replay_workflow(history)
    return (time.process_time() - started) / times


async def interleaved(sides: list[Side], graph: Graph, rounds: int) -> list[Measurement]:
    """Round r runs every side once; the order rotates between rounds."""
    results = []
    for round_ in range(1, rounds + 1):
        for side in rotated(sides, round_):
            results.append(await measure(side, round_, graph))
    return results


def last_run(results: list[Measurement], side: str) -> str:
    return [m.workflow_id for m in results if m.side == side][-1]


def side_rate(results: list[Measurement], side: str) -> float:
    """Tasks per second over all of a side's rounds (total tasks over total seconds)."""
    mine = [m for m in results if m.side == side]
    return sum(m.tasks for m in mine) / sum(m.seconds for m in mine)


def side_history(results: list[Measurement], side: str) -> float:
    """History events per task over all of a side's rounds."""
    mine = [m for m in results if m.side == side]
    return sum(m.phases.events for m in mine) / sum(m.tasks for m in mine)


def report(header: list[str], results: list[Measurement]) -> None:
    for line in header:
        print(line)
    print(f"{'round':>5}  {'side':<9}{'seconds':>9}{'tasks/s':>9}{'peak running':>14}")
    for m in results:
        print(f"{m.round:>5}  {m.side:<9}{m.seconds:>9.2f}{m.rate:>9.1f}{m.peak_running:>14}")
    rates = {side: side_rate(results, side) for side in dict.fromkeys(m.side for m in results)}
    print("; ".join(f"{side}: {rate:.1f} tasks/s" for side, rate in rates.items()), "(all rounds)")
    for side, other, goal in RATIOS:
        ratios = per_round(results, side, other, lambda m: m.rate)
        print(ratio_line(f"{side}/{other}", rates[side] / rates[other], ratios, goal))
    for side, other in HISTORY_RATIOS:
        ratios = per_round(results, side, other, lambda m: m.phases.events / m.tasks)
        overall = side_history(results, side) / side_history(results, other)
        print(ratio_line(f"{side}/{other} history per task", overall, ratios, "; goal <= 1.0x"))
    print("where the time went, each side's last run (from its history):")
    for side in rates:
        print(f"  {side}: {[m for m in results if m.side == side][-1].phases.line()}")


def failures(results: list[Measurement], cap: int) -> list[str]:
    found = [m.failure for m in results if m.failure is not None]
    found += [
        f"{m.side} round {m.round}: {m.peak_running} activities ran at once (cap {cap})"
        for m in results
        if m.peak_running > cap
    ]
    return found


async def bench(tasks: int, cap: int, rounds: int, seed: int, server_config: list[str]) -> int:
    graph = random_dag(tasks, seed)
    run_id = uuid.uuid4().hex[:8]
    project_queue, baseline_queue = f"bench-plan-{run_id}", f"bench-baseline-{run_id}"
    single_queue, split_queue = f"bench-single-{run_id}", f"{baseline_queue}-activities"
    async with bench_server(dynamic_config_args(server_config)) as (client, server):
        project = project_side(client, project_queue, cap, Dispatch.AGENT_QUEUES)
        single = project_side(client, single_queue, cap, Dispatch.COORDINATOR)
        baseline = baseline_side(client, baseline_queue, cap)
        split = baseline_side(client, baseline_queue, cap, split_queue)
        sides = [
            Side(PROJECT, project, client, plan_workflow_id, list(WORKFLOWS)),
            Side(SINGLE, single, client, plan_workflow_id, list(WORKFLOWS)),
            Side(BASELINE, baseline, client, str, [BaselineTaskGraph]),
            Side(SPLIT, split, client, str, [BaselineTaskGraph]),
        ]
        baseline_worker = Worker(
            client,
            task_queue=baseline_queue,
            workflows=[BaselineTaskGraph],
            activities=[baseline_task],
        )
        split_worker = Worker(client, task_queue=split_queue, activities=[baseline_task])
        project_worker = build_worker(client, project_queue, bench_registry())
        single_worker = build_worker(client, single_queue, bench_registry())
        async with project_worker, single_worker, baseline_worker, split_worker:
            warm = [await measure(side, 0, random_dag(WARMUP_TASKS, seed)) for side in sides]
            results = await interleaved(sides, graph, rounds)
        replays = {s.name: await replay_cpu(s, last_run(results, s.name)) for s in sides[1:3]}
    edges = sum(len(dependencies) for dependencies in graph.values())
    report(
        [
            f"Task graph: project TaskGraph vs hand-written temporalio workflow; cap {cap}",
            f"{SINGLE}: the project with every agent run on the plan's own queue "
            "(`dispatch: coordinator`), as the hand-written workflow's",
            f"{SPLIT}: the hand-written workflow with its activities on a task queue of their "
            "own, as the project sends each agent's runs to its agent queue",
            f"graph: {tasks} tasks, {edges} dependencies (random DAG, seed {seed}, up to "
            f"{MAX_DEPENDENCIES} per task), longest path {longest_path(graph)} tasks",
            f"server: {server}{''.join(f'; {value}' for value in server_config)}; "
            f"CPUs: {os.cpu_count()}; rounds: {rounds}, interleaved "
            f"(the order rotates); warm-up: one {WARMUP_TASKS}-task plan per side",
        ],
        results,
    )
    print(
        f"workflow code per plan, its last run replayed {REPLAYS} times (CPU): "
        + ", ".join(f"{side} {1000 * seconds:.0f} ms" for side, seconds in replays.items())
    )
    found = failures(warm + results, cap)
    for problem in found[:5]:
        print(f"  not completed: {problem}", file=sys.stderr)
    return 1 if found else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=200, help="tasks in the graph")
    parser.add_argument("--cap", type=int, default=5, help="activities running at once, at most")
    parser.add_argument("--rounds", type=int, default=3, help="timed plans per side")
    parser.add_argument("--seed", type=int, default=3, help="the random graph's seed")
    add_server_config_option(parser)
    args = parser.parse_args()
    if min(args.tasks, args.cap, args.rounds) < 1:
        parser.error("--tasks, --cap and --rounds must be at least 1")
    run = bench(args.tasks, args.cap, args.rounds, args.seed, args.server_config)
    exit_without_teardown(lambda: asyncio.run(run))


if __name__ == "__main__":
    main()
