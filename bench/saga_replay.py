"""What the saga's workflow code costs per run, measured without the machine's load: one saga
with local agents and one hand-written saga with local activities are run (after a warm-up),
and their histories replayed in this process, many times, as a worker runs them (the
project's saga outside the workflow sandbox, the hand-written one in the SDK's). CPU time per
replay (`time.process_time`, and the workflow thread's alone) is the cost of the workflow code:
no server, no network, no activity, no waiting.

    .venv/bin/python -m bench.saga_replay [--replays 50] [--live 30] [--profile 25] [--keep DIR]

`--live N` also runs N sagas per side, one at a time, and gives the CPU this process (client
and workers, not the server) spent per saga: the activity side too; and (on Linux) how it
split between the process's threads: the event loop's (the client, the activities, the SDK's
handling of each activation and completion and their payloads), the other Python threads'
(the workflow code, in the workflow task executor) and Core's (Rust). `--profile N` prints the
N costliest functions of the project's replays. `--keep DIR` writes the two histories there
(`local.json`, `base-local.json`), which `--replay DIR` replays again without running
anything. Besides the CPU, each history is told by what it recorded (events by type, payload
bytes) and by its workflow tasks.
"""

import argparse
import asyncio
import cProfile
import os
import pstats
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Interceptor, Replayer, Worker

from bench.baseline_saga import BaselineLocalSaga
from bench.baseline_steps import BASELINE_STEPS
from bench.layouts import history_profile
from bench.server import bench_server
from coord.infra.payload_store import data_converter
from coord.models.saga.spec import SagaSpec
from coord.models.wire.contract import saga_workflow_id
from coord.models.wire.specs import load_spec
from coord.starter.api import saga_outcome, start_saga
from coord.worker import WORKFLOWS, build_worker, default_registry
from coord.workflows._runtime.interceptor import SurplusArguments

T = TypeVar("T")

WARM_UP = 3
"""Sagas run per side before the one recorded (imports, sandbox caches, the server's)."""


async def _project(client: Client, queue: str, spec: SagaSpec) -> str:
    saga_id = f"replay-{uuid.uuid4().hex[:8]}"
    unique = spec.model_copy(update={"saga_id": saga_id, "correlation_id": saga_id})
    await saga_outcome(await start_saga(client, unique, queue=queue))
    return saga_workflow_id(saga_id)


async def _baseline(client: Client, queue: str, spec: SagaSpec) -> str:
    workflow_id = f"base-local-{uuid.uuid4().hex[:8]}"
    await client.execute_workflow(
        BaselineLocalSaga.run, spec.input, id=workflow_id, task_queue=queue
    )
    return workflow_id


async def record(client: Client, live: int) -> dict[str, WorkflowHistory]:
    """One history per side, each the last of WARM_UP + 1 sagas; then `live` sagas per side,
    one at a time, and the CPU this process (the client and the workers: the server runs apart)
    spent per saga, which the machine's load hardly changes."""
    example = Path(__file__).resolve().parent.parent / "examples" / "feature-deployment.yaml"
    spec = load_spec(SagaSpec, example)
    run_id = uuid.uuid4().hex[:8]
    project_queue, baseline_queue = f"replay-local-{run_id}", f"replay-base-{run_id}"
    histories: dict[str, WorkflowHistory] = {}
    async with (
        build_worker(client, project_queue, default_registry()),
        Worker(
            client,
            task_queue=baseline_queue,
            workflows=[BaselineLocalSaga],
            activities=list(BASELINE_STEPS.values()),
        ),
    ):
        for side, run_one, queue in (
            ("local", _project, project_queue),
            ("base-local", _baseline, baseline_queue),
        ):
            for _ in range(WARM_UP + 1):
                workflow_id = await run_one(client, queue, spec)
            histories[side] = await client.get_workflow_handle(workflow_id).fetch_history()
            print(f"{side}: {(await history_profile(client, workflow_id)).line()}")
            if live:
                started, threads = time.process_time(), thread_cpu()
                for _ in range(live):
                    await run_one(client, queue, spec)
                spent = (time.process_time() - started) / live
                print(f"{side}: {1000 * spent:.2f} ms CPU per saga in this process ({live} sagas)")
                print(f"{side}: {split_line(threads, thread_cpu(), live)}")
    return histories


THREADS = {
    "main": "event loop",
    "python": "other Python threads",
    "tokio-rt-worker": "Core",
    "workflow-proces": "Core",
}
"""The process's threads by name (`comm`; the main thread by its id), as the split reads them."""


def thread_cpu() -> dict[str, float] | None:
    """CPU seconds of this process's threads so far, summed by THREADS (others left out); None
    where /proc cannot tell (not Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds: dict[str, float] = dict.fromkeys(THREADS.values(), 0.0)
    try:
        for task in Path(f"/proc/{os.getpid()}/task").iterdir():
            name = "main" if int(task.name) == os.getpid() else (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            if name in THREADS:  # utime, stime: the 14th and 15th fields
                seconds[THREADS[name]] += (int(fields[11]) + int(fields[12])) / tick
    except OSError:
        return None
    return seconds


def split_line(before: dict[str, float] | None, after: dict[str, float] | None, sagas: int) -> str:
    """The CPU milliseconds per saga each kind of thread spent between two readings (a thread
    that ended meanwhile is missed)."""
    if before is None or after is None:
        return "no split by thread (no /proc)"
    parts = [f"{part} {1000 * (after[part] - before[part]) / sagas:.2f}" for part in after]
    return "ms CPU per saga by thread: " + ", ".join(parts)


class WorkflowThread(ThreadPoolExecutor):
    """The workflow task executor, one thread, whose work is timed (`seconds`: the thread's CPU
    time in the workflow code and its sandbox, none of Core's threads or the event loop's) and,
    given a profile, profiled (the workflow code runs out of sight of the main thread's)."""

    def __init__(self, profile: cProfile.Profile | None = None) -> None:
        super().__init__(max_workers=1)
        self.profile = profile
        self.seconds = 0.0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> "Future[T]":
        return super().submit(self._timed, fn, *args, **kwargs)

    def _timed(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        started = time.thread_time()
        try:
            if self.profile is None:
                return fn(*args, **kwargs)
            return self.profile.runcall(fn, *args, **kwargs)
        finally:
            self.seconds += time.thread_time() - started


@dataclass(frozen=True)
class ReplayCost:
    """CPU seconds per replay: the process's in all, and the workflow thread's alone."""

    process: float
    workflow: float


def replay_cpu(
    history: WorkflowHistory,
    replays: int,
    profile: cProfile.Profile | None = None,
    baselines: Sequence[type] = (BaselineLocalSaga,),
    interceptors: Sequence[Interceptor] | None = None,
) -> ReplayCost:
    """The CPU per replay of `history`, over `replays` replays in one Replayer (its setup
    counted once) as a worker runs it (the project's workflows outside the sandbox, the
    hand-written ones in the SDK's), after as many to warm up; the workflow code profiled
    into `profile`. `baselines`: the hand-written workflows registered besides the project's;
    `interceptors`: the worker's (by default the project's workflow interceptor)."""
    thread = WorkflowThread(profile)
    replayer = Replayer(
        workflows=[*WORKFLOWS, *baselines],
        data_converter=data_converter(),
        interceptors=[SurplusArguments()] if interceptors is None else interceptors,
        workflow_task_executor=thread,
    )
    copies = [WorkflowHistory(f"{history.workflow_id}-{n}", history.events) for n in range(replays)]

    async def each() -> AsyncIterator[WorkflowHistory]:
        for copy in copies:
            yield copy

    async def replay_all() -> None:
        results = await replayer.replay_workflows(each(), raise_on_replay_failure=True)
        assert not results.replay_failures

    asyncio.run(replay_all())  # warm: the sandbox's module cache, the type adapters
    thread.seconds = 0.0
    started = time.process_time()
    asyncio.run(replay_all())
    return ReplayCost((time.process_time() - started) / replays, thread.seconds / replays)


def profiled(history: WorkflowHistory, replays: int, top: int) -> None:
    """The costliest functions of the workflow code's replays, by their own time and with
    what they call."""
    profile = cProfile.Profile()
    replay_cpu(history, replays, profile)
    stats = pstats.Stats(profile).strip_dirs().sort_stats("cumulative")
    stats.print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


async def recorded(live: int) -> dict[str, WorkflowHistory]:
    async with bench_server() as (client, _):
        return await record(client, live)


def kept(folder: Path) -> dict[str, WorkflowHistory]:
    return {
        side: WorkflowHistory.from_json(side, (folder / f"{side}.json").read_text())
        for side in ("local", "base-local")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replays", type=int, default=50, help="replays per history")
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest functions")
    parser.add_argument("--keep", type=Path, help="write the recorded histories to this folder")
    parser.add_argument("--replay", type=Path, help="replay the histories kept in this folder")
    parser.add_argument("--live", type=int, default=0, help="sagas per side timed live (CPU)")
    args = parser.parse_args()
    histories = asyncio.run(recorded(args.live)) if args.replay is None else kept(args.replay)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        for side, history in histories.items():
            (args.keep / f"{side}.json").write_text(history.to_json())
    cpu = {side: replay_cpu(history, args.replays) for side, history in histories.items()}
    for side, cost in cpu.items():
        tasks = sum(
            1
            for e in histories[side].events
            if e.HasField("workflow_task_completed_event_attributes")
        )
        print(
            f"{side}: {1000 * cost.process:.2f} ms CPU per replay, "
            f"{1000 * cost.workflow:.2f} ms of it in the workflow thread ({tasks} workflow tasks)"
        )
    local, base = cpu["local"], cpu["base-local"]
    print(
        f"local/base-local CPU per replay: {local.process / base.process:.2f}x; "
        f"in the workflow thread: {local.workflow / base.workflow:.2f}x"
    )
    if args.profile:
        profiled(histories["local"], args.replays, args.profile)


if __name__ == "__main__":
    main()
