"""A worker SIGKILLed mid-step, mid-compensation and mid-agent: a new worker process finishes
the work, and the histories show every compensation and every agent run completed once."""

import asyncio
import json
import signal
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowHandle

from coord.models.chain.spec import ChainSpec, ChainStatus
from coord.models.events.envelope import EventEnvelope
from coord.models.saga.spec import SagaSpec, SagaStatus
from coord.models.wire.specs import read_document
from coord.starter import api
from coord.starter.exits import ExitCode
from coord.starter.progress import activity_names
from tests.agents import PYTHON
from tests.conftest import FEATURE_DEPLOYMENT, ROOT
from tests.helpers import eventually
from tests.workers import demo_agents_worker, worker_process

USER_STORY = ROOT / "examples" / "user-story-chain.yaml"


async def completed_activities(client: Client, handle: WorkflowHandle[Any, Any]) -> Counter[str]:
    """How many times each activity (by the summary the workflow gave it) completed."""
    names: dict[int, str] = {}
    completed: Counter[str] = Counter()
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            summary = client.data_converter.payload_converter.from_payload(
                event.user_metadata.summary, str
            )
            names[event.event_id] = summary
        elif event.HasField("activity_task_completed_event_attributes"):
            completed[names[event.activity_task_completed_event_attributes.scheduled_event_id]] += 1
    return completed


async def wait_running(
    client: Client, handle: WorkflowHandle[Any, Any], activity: str, timeout: float = 60
) -> None:
    """Until a worker has started the activity whose summary starts with `activity`."""

    async def running() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        started = {
            p.activity_id
            for p in pending
            if p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        }
        names = await activity_names(client, handle) if started else {}
        return any(names[i].startswith(activity) for i in started)

    async def poll() -> None:
        while not await running():
            await asyncio.sleep(0.1)

    await asyncio.wait_for(poll(), timeout)


def saga(**changes: Any) -> SagaSpec:
    """The saga with a unique id; `changes` merge into steps by name."""
    data = read_document(FEATURE_DEPLOYMENT)
    data["saga_id"] = f"kill-{uuid.uuid4().hex[:8]}"
    for step in data["steps"]:
        step.update(changes.get(step["name"], {}))
    data["input"] = {**data["input"], **changes.get("input", {})}
    return SagaSpec.model_validate(data)


async def test_a_worker_killed_mid_step_the_next_one_finishes_the_saga(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = saga(
        RunE2ETests={"heartbeat_timeout": "1s", "timeout": "30s"},
        input={"inject": {"slow": {"RunE2ETests": 3}}},
    )
    async with demo_agents_worker(client, task_queue, tmp_path, "remote") as first:
        handle = await api.start_saga(client, spec, queue=task_queue)
        await wait_running(client, handle, "RunE2ETests")
        await first.kill()
    async with demo_agents_worker(client, task_queue, tmp_path, "remote"):
        state = await asyncio.wait_for(api.saga_outcome(handle), 90)
    assert state.status == SagaStatus.COMPLETED
    completed = await completed_activities(client, handle)
    assert completed == Counter({step.name: 1 for step in spec.steps})


async def test_a_worker_stopped_mid_step_finishes_the_run_it_holds_and_it_runs_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A rolling upgrade's SIGTERM: the worker lets its running agent run finish (its shutdown
    grace) before it exits, so the next worker does not run it again; its log names the
    signal."""
    keys = tmp_path / "keys"
    spec = saga(
        RunE2ETests={"heartbeat_timeout": "1s", "timeout": "30s"},
        input={"inject": {"slow": {"RunE2ETests": 3}}, "keys": str(keys)},
    )
    async with demo_agents_worker(client, task_queue, tmp_path, "remote") as first:
        handle = await api.start_saga(client, spec, queue=task_queue)
        await wait_running(client, handle, "RunE2ETests")
        first.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(first.process.wait, 60)
    assert code == ExitCode.TERMINATED
    async with demo_agents_worker(client, task_queue, tmp_path, "remote"):
        state = await asyncio.wait_for(api.saga_outcome(handle), 90)
    assert state.status == SagaStatus.COMPLETED
    runs = [line.split()[0] for line in keys.read_text().splitlines()]
    assert runs.count("RunE2ETests") == 1, runs
    log = (tmp_path / "worker-remote.log").read_text()
    assert "worker stopping" in log and "SIGTERM" in log, log


async def test_a_worker_killed_mid_local_step_the_next_one_runs_it_again_with_its_key(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A local run dies with its worker: the next worker, replaying the saga, runs the step
    again, with the same key (at least once: an agent is idempotent by its key). Steps whose
    local runs ended in the same workflow task as the killed one had no marker recorded yet:
    they run again too, each with its own same key."""
    keys = tmp_path / "keys.txt"
    spec = saga(input={"keys": str(keys), "inject": {"slow": {"RunE2ETests": 3}}})
    async with demo_agents_worker(client, task_queue, tmp_path, "local") as first:
        handle = await api.start_saga(client, spec, queue=task_queue)
        await asyncio.wait_for(noted(keys, "RunE2ETests"), 60)
        await first.kill()
    async with demo_agents_worker(client, task_queue, tmp_path, "local"):
        state = await asyncio.wait_for(api.saga_outcome(handle), 90)
    assert state.status == SagaStatus.COMPLETED
    runs = [line.split() for line in keys.read_text().splitlines()]
    keys_of = {
        step.name: {key for agent, _, key in runs if agent == step.name} for step in spec.steps
    }
    assert all(len(step_keys) == 1 for step_keys in keys_of.values()), runs
    assert len([agent for agent, _, _ in runs if agent == "RunE2ETests"]) >= 2, runs


async def test_a_worker_killed_mid_batch_loses_only_the_steps_not_recorded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A saga's steps run ahead in one local activity stop after the step that takes the batch
    past a second: the next ones go in another. The first batch's outcome is recorded when the
    worker hands the saga's workflow task back (8 s into it) while the second batch runs, so a
    worker killed then loses the second batch only: the first step does not run again."""
    keys = tmp_path / "keys.txt"
    slow = {"BuildArtifact": 1.5, "RunE2ETests": 12}
    spec = saga(input={"keys": str(keys), "inject": {"slow": slow}})
    async with demo_agents_worker(client, task_queue, tmp_path, "local") as first:
        handle = await api.start_saga(client, spec, queue=task_queue)
        await asyncio.wait_for(noted(keys, "RunE2ETests"), 60)
        await asyncio.wait_for(markers_recorded(handle, 2), 60)  # placements, the first batch
        await first.kill()
    async with demo_agents_worker(client, task_queue, tmp_path, "local"):
        state = await asyncio.wait_for(api.saga_outcome(handle), 90)
    assert state.status == SagaStatus.COMPLETED
    runs = Counter(line.split()[0] for line in keys.read_text().splitlines())
    assert runs["BuildArtifact"] == 1, runs
    assert runs["RunE2ETests"] >= 2, runs


async def markers_recorded(handle: WorkflowHandle[Any, Any], count: int) -> None:
    """Until the run's history holds `count` markers."""
    marker = EventType.EVENT_TYPE_MARKER_RECORDED
    while sum([e.event_type == marker async for e in handle.fetch_history_events()]) < count:
        await asyncio.sleep(0.2)


async def noted(keys: Path, agent: str) -> None:
    """Until a run of `agent` has noted its key (it has started)."""
    while not keys.exists() or f"{agent} " not in keys.read_text():
        await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_a_worker_killed_mid_compensation_each_compensation_completes_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = saga(
        DeployToProduction={"retry": {"max_retries": 0}},
        DeployToStaging={"compensation_timeout": "4s"},
        input={"inject": {"fail": ["DeployToProduction"], "slow": {"RemoveFromStaging": 2}}},
    )
    async with demo_agents_worker(client, task_queue, tmp_path, "remote") as first:
        handle = await api.start_saga(client, spec, queue=task_queue)
        await wait_running(client, handle, "compensate: RemoveFromStaging")
        await first.kill()
    async with demo_agents_worker(client, task_queue, tmp_path, "remote"):
        state = await asyncio.wait_for(api.saga_outcome(handle), 90)
    assert state.status == SagaStatus.COMPENSATED
    assert [c.compensate for c in state.compensations] == [
        "RollbackProduction",
        "RemoveFromStaging",
    ]
    completed = await completed_activities(client, handle)
    assert completed["compensate: RollbackProduction"] == 1
    assert completed["compensate: RemoveFromStaging"] == 1


@pytest.mark.slow
async def test_a_worker_killed_mid_agent_every_event_is_handled_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    document = read_document(USER_STORY)
    for subscription in document["subscriptions"]:
        # Agents running beside the slow one die with the worker too: without a heartbeat
        # timeout the server would wait for their whole start-to-close timeout to retry them.
        subscription["heartbeat_timeout"] = "1s"
    spec = ChainSpec.model_validate(document)
    correlation_id = f"kill-{uuid.uuid4().hex[:8]}"
    approved = EventEnvelope.new(
        "UserStoryApproved",
        "/product-strategist",
        payload={"inject": {"slow": {"backend-architect": 3}}},
        correlation_id=correlation_id,
        topic="project.tasks",
    )
    log = tmp_path / "workers.log"
    async with worker_process(client, task_queue, log) as first:
        await api.start_chain(client, spec, correlation_id, queue=task_queue)
        await api.publish(client, approved)
        handle = api.chain_handle(client, correlation_id)
        await wait_running(client, handle, "backend-architect")
        await first.kill()
    async with worker_process(client, task_queue, log):
        state = await asyncio.wait_for(handle.result(), 90)
        timeline = await api.chain_timeline(client, correlation_id)
    assert state.status == ChainStatus.COMPLETED
    assert state.received == state.events_seen + state.duplicates + state.rejected_count
    assert state.dead_lettered == 0
    events = Counter(entry.event for entry in timeline)
    assert events["TestingCompleted"] == 1
    assert all(count == 1 for count in events.values()), events
    runs = Counter(
        {name: n for name, n in (await completed_activities(client, handle)).items() if "←" in name}
    )  # the agent runs, named `agent ← trigger` (not the log's segment writes)
    assert len(runs) == len(spec.subscriptions)
    assert all(count == 1 for count in runs.values()), runs


HANG = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(1000)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
async def test_a_killed_workers_shell_agent_ends_with_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Its run goes to another worker: an agent process left running would run it twice at
    once."""
    pid_file, agents = tmp_path / "agent.pid", tmp_path / "agents.json"
    hang = {"kind": "shell", "argv": [PYTHON, "-c", HANG, str(pid_file)], "timeout": "60s"}
    agents.write_text(json.dumps({"agents": {"hang": hang}}))
    spec = SagaSpec.model_validate(
        {"saga_id": f"orphan-{uuid.uuid4().hex[:8]}", "steps": [{"name": "Hang", "agent": "hang"}]}
    )
    log = tmp_path / "worker.log"
    async with worker_process(client, task_queue, log, "--agents", str(agents), demo=False) as w:
        handle = await api.start_saga(client, spec, queue=task_queue)

        async def started() -> bool:
            return pid_file.exists() and pid_file.read_text() != ""

        await eventually(started, 60)
        w.process.kill()  # the worker alone: the agent runs in a session of its own
        w.process.wait()
        await eventually(lambda: ended(int(pid_file.read_text())), 10)
    await handle.terminate()


async def ended(pid: int) -> bool:
    """Gone, or a zombie (its new parent may not reap it at once)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"
