"""What an aggregator costs per event, measured without the machine's load: one run of each
side of `bench.aggregator_bench` (the project's `Aggregator`, the hand-written
`BaselineAggregator`), told by its history (events and payload bytes per handled event, workflow
tasks, commands) and by the CPU its workflow code takes when the history is replayed in this
process, many times (`bench.saga_replay.replay_cpu`: no server, no network, no waiting), and
the function calls of one replay (a count the machine's load does not change).

    .venv/bin/python -m bench.aggregator_replay [--events 300] [--replays 20] [--profile 25]

`--keep DIR` writes the two histories there (`project.json`, `baseline.json`), which
`--replay DIR` replays again without running anything; `--profile N` prints the N costliest
functions of the project's replays. Each side is replayed as its worker runs it live: the
project's with its workflow interceptor outside the sandbox, the baseline with none in the
SDK's sandbox; `--same-replayer` replays both the project's way (as this bench did
before 2026-11-27, which charged the baseline the project's interceptor).
"""

import argparse
import asyncio
import cProfile
import pstats
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Interceptor

from bench.aggregator_bench import BaselineAggregator, baseline, project
from bench.layouts import history_profile
from bench.saga_replay import ReplayCost, profiled, replay_cpu
from bench.server import bench_server
from coord.infra.process import exit_without_teardown

SIDES = ("project", "baseline")
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
NOT_COMMANDS = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
        EventType.EVENT_TYPE_TIMER_FIRED,
    }
)
"""Events no command of the workflow made: the rest are its commands' (timers started,
upserts, signals sent, the completion)."""


async def record(events: int, senders: int) -> dict[str, WorkflowHistory]:
    """One run per side, as the bench runs them, and its history."""
    histories: dict[str, WorkflowHistory] = {}
    async with bench_server() as (client, _):
        for side, run in zip(SIDES, (project, baseline), strict=True):
            result = await run(client, events, senders)
            profile = await history_profile(client, result.workflow_id)
            print(f"{side}: {profile.line()}")
            per_event = profile.payload_bytes / result.events
            print(f"{side}: {per_event:.0f} payload bytes per handled event")
            handle = client.get_workflow_handle(result.workflow_id)
            histories[side] = await handle.fetch_history()
    return histories


def told(side: str, history: WorkflowHistory, events: int) -> None:
    """History events, workflow tasks and commands per handled event (and per task)."""
    tasks = sum(1 for e in history.events if e.event_type == TASK_COMPLETED)
    commands = sum(1 for e in history.events if e.event_type not in NOT_COMMANDS)
    print(
        f"{side}: {len(history.events) / events:.3f} history events per event, "
        f"{tasks} workflow tasks ({tasks / events:.3f} per event), "
        f"{commands} commands ({commands / max(tasks, 1):.2f} per task)"
    )


def signals(history: WorkflowHistory) -> int:
    kind = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    return sum(1 for e in history.events if e.event_type == kind)


@dataclass(frozen=True)
class Replaying:
    """How a side's history is replayed: through which interceptors."""

    interceptors: Sequence[Interceptor] | None = None
    """None: the project's (`bench.saga_replay.replay_cpu`'s default)."""

    def cpu(
        self, history: WorkflowHistory, replays: int, profile: cProfile.Profile | None = None
    ) -> ReplayCost:
        return replay_cpu(
            history,
            replays,
            profile,
            baselines=[BaselineAggregator],
            interceptors=self.interceptors,
        )


AS_LIVE = {"project": Replaying(), "baseline": Replaying(())}
"""Each side as `bench.aggregator_bench` runs it: the baseline on a plain `Worker`."""
SAME = {"project": Replaying(), "baseline": Replaying()}


def calls_per_replay(history: WorkflowHistory, replaying: Replaying) -> int:
    """The function calls of one replay of the workflow code, by the profiler's count: the
    same however loaded the machine is (`replay_cpu` replays twice: once to warm up)."""
    profile = cProfile.Profile()
    replaying.cpu(history, 1, profile)
    return int(pstats.Stats(profile).total_calls) // 2  # type: ignore[attr-defined]


def kept(folder: Path) -> dict[str, WorkflowHistory]:
    return {
        side: WorkflowHistory.from_json(side, (folder / f"{side}.json").read_text())
        for side in SIDES
    }


def main() -> None:
    exit_without_teardown(measure)


def measure() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--senders", type=int, default=10)
    parser.add_argument("--replays", type=int, default=20, help="replays per history")
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest functions")
    parser.add_argument("--keep", type=Path, help="write the recorded histories to this folder")
    parser.add_argument("--replay", type=Path, help="replay the histories kept in this folder")
    parser.add_argument(
        "--same-replayer", action="store_true", help="replay the baseline the project's way"
    )
    args = parser.parse_args()
    replaying = SAME if args.same_replayer else AS_LIVE
    histories = (
        asyncio.run(record(args.events, args.senders)) if args.replay is None else kept(args.replay)
    )
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        for side, history in histories.items():
            (args.keep / f"{side}.json").write_text(history.to_json())
    cost = {}
    for side, history in histories.items():
        handled = signals(history)
        told(side, history, handled)
        cost[side] = replaying[side].cpu(history, args.replays).workflow
        calls = calls_per_replay(history, replaying[side])
        print(
            f"{side}: {1e6 * cost[side] / handled:.0f} µs of workflow-thread CPU per event, "
            f"{calls / handled:.0f} function calls per event"
        )
    print(f"project/baseline workflow CPU per replay: {cost['project'] / cost['baseline']:.2f}x")
    if args.profile:
        profiled(histories["project"], args.replays, args.profile)


if __name__ == "__main__":
    main()
