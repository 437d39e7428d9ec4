"""Replay: the workflow code must still produce the commands recorded in earlier histories,
so a change that would break running workflows fails here first."""

import asyncio
import gc
import types
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from coord.infra.payload_store import data_converter
from coord.starter import api
from coord.worker import WORKFLOWS, build_worker
from coord.workflows._runtime.interceptor import SurplusArguments
from tests.conftest import HISTORIES, feature_deployment

RECORDED = sorted(HISTORIES.glob("*/*.json"))


def replayer() -> Replayer:
    """As the project's workers run workflows: through their interceptor (which calls the
    signal handlers)."""
    return Replayer(
        workflows=list(WORKFLOWS),
        data_converter=data_converter(),
        interceptors=[SurplusArguments()],
    )


@pytest.mark.parametrize("path", RECORDED, ids=[f"{p.parent.name}/{p.stem[:40]}" for p in RECORDED])
async def test_recorded_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    await replayer().replay_workflow(history)


def test_histories_are_recorded_for_every_workflow_type() -> None:
    assert {path.parent.name for path in RECORDED} >= {workflow.__name__ for workflow in WORKFLOWS}


async def test_fresh_histories_replay(client: Client, task_queue: str) -> None:
    specs = [feature_deployment(), feature_deployment(input={"inject": {"fail": ["RunE2ETests"]}})]
    for spec in specs:
        spec.steps[3].retry.max_retries = 0
    async with build_worker(client, task_queue):
        handles = [await api.start_saga(client, spec, queue=task_queue) for spec in specs]
        await asyncio.wait_for(asyncio.gather(*(api.saga_outcome(h) for h in handles)), 60)
    for handle in handles:
        await replayer().replay_workflow(await handle.fetch_history())


def live_runs_of(qualname: str) -> int:
    gc.collect()
    functions = (o for o in gc.get_objects() if isinstance(o, types.FunctionType))
    return sum(1 for function in functions if function.__qualname__ == qualname)


async def test_a_worker_keeps_nothing_of_a_run_that_ended() -> None:
    """A worker-wide cache keyed by one of a run's functions would keep that run alive for the
    worker's lifetime (without bound). Ten runs through the worker's interceptor leave at most one
    more `Saga.run` alive than before."""
    path = HISTORIES / "Saga" / "saga-agent-served-on-the-workflow-queue.json"
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replaying, before = replayer(), live_runs_of("Saga.run")
    for _ in range(10):
        await replaying.replay_workflow(history)
    assert live_runs_of("Saga.run") - before <= 1
