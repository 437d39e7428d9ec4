"""Agents on their own task queues: workers serving different agents, possibly on
other machines (here: other processes), a run no worker takes, and agent health as
`coord agents` reads it from the server."""

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from coord.infra.agent_health import agents_health, queue_agents
from coord.models.chain.spec import ChainSpec
from coord.models.dlq.letter import DlqSelection
from coord.models.mesh.health import AgentHealth, WorkerSeen
from coord.models.mesh.ledger import LedgerStart
from coord.models.saga.spec import SagaStatus
from coord.models.wire import contract
from coord.models.wire.contract import (
    DEFAULT_TASK_QUEUE,
    RUN_AGENT_ACTIVITY,
    FailureType,
    agent_of_queue,
    agent_task_queue,
)
from coord.starter import api
from coord.worker import build_worker
from tests.conftest import feature_deployment
from tests.helpers import event, parked, unserved_agents_found_at_once
from tests.workers import COORD, WorkerProcess, run, server_env

BUILD_SIDE = ["BuildArtifact", "RunTests", "RunE2ETests"]
DEPLOY_SIDE = ["DeployToStaging", "DeployToProduction", "RemoveFromStaging", "RollbackProduction"]


def test_agent_queue_names_are_per_agent_per_deployment_bounded_and_distinct() -> None:
    assert agent_task_queue("python-pro") == "agent-python-pro"
    assert agent_task_queue("python-pro", "staging") == "staging/agent-python-pro"
    assert agent_of_queue("staging/agent-python-pro", "staging") == "python-pro"
    assert agent_of_queue("agent-python-pro", "staging") is None
    odd = {agent_task_queue(name) for name in ("a b", "a_b", "a/b", "x" * 300, "x" * 301)}
    assert len(odd) == 5, "sanitised or cut names keep a digest of the original"
    assert all(len(queue) <= 255 and " " not in queue for queue in odd)
    assert agent_of_queue(agent_task_queue("DeployToStaging"), DEFAULT_TASK_QUEUE) == (
        "DeployToStaging"
    )


def test_every_declared_name_is_found_again_from_its_queue() -> None:
    """A name its queue spells with a digest is read back through the names declared."""
    names = ["code reviewer", "team/reviewer", "python-pro", "x" * 300, "rédacteur", "a~b"]
    back = queue_agents(names, "staging")
    assert {agent_task_queue(name, "staging"): name for name in names} == back
    assert len(back) == len(names)
    assert agent_of_queue(agent_task_queue("team/reviewer", "staging"), "staging") != (
        "team/reviewer"
    ), "the queue alone cannot say it"


async def runs_by_agent(handle: WorkflowHandle[object, object]) -> dict[str, tuple[str, str]]:
    """Each `run_agent` of the run: its summary -> (task queue, identity of the worker that
    started it), from the history."""
    scheduled: dict[int, tuple[str, str]] = {}
    started: dict[str, tuple[str, str]] = {}
    async for history_event in handle.fetch_history_events():
        if history_event.HasField("activity_task_scheduled_event_attributes"):
            scheduling = history_event.activity_task_scheduled_event_attributes
            if scheduling.activity_type.name == RUN_AGENT_ACTIVITY:
                summary = json.loads(history_event.user_metadata.summary.data)
                scheduled[history_event.event_id] = (summary, scheduling.task_queue.name)
        elif history_event.HasField("activity_task_started_event_attributes"):
            start = history_event.activity_task_started_event_attributes
            if start.scheduled_event_id in scheduled:  # not another activity (choose_agent)
                summary, queue = scheduled[start.scheduled_event_id]
                started[summary] = (queue, start.identity)
    return started


async def test_saga_steps_run_on_the_workers_serving_their_agents(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "workers.log"
    builder = await WorkerProcess.start(client, task_queue, log, "--only", ",".join(BUILD_SIDE))
    deployer = await WorkerProcess.start(
        client,
        task_queue,
        log,
        "--only",
        ",".join(DEPLOY_SIDE),
        "--no-workflows",
        polls=agent_task_queue("DeployToStaging", task_queue),
    )
    try:
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
        runs = await runs_by_agent(handle)
    finally:
        builder.stop()
        deployer.stop()
    assert state.status == SagaStatus.COMPLETED
    # The builder runs the saga: the agents it serves run as local activities of it (no task).
    assert not set(BUILD_SIDE) & set(runs)
    for agent in DEPLOY_SIDE[:2]:
        assert runs[agent] == (agent_task_queue(agent, task_queue), deployer.identity)


def ghost_chain() -> ChainSpec:
    """A chain whose one agent is declared but served by no worker."""
    return ChainSpec.model_validate(
        {
            "name": "haunted",
            "triggers": ["Ping"],
            "alerts": None,
            "subscriptions": [
                {"agent": "ghost", "events": "Ping", "schedule_to_start_timeout": "2s"}
            ],
        }
    )


async def coord_agents(
    env: WorkflowEnvironment, task_queue: str, *args: str
) -> tuple[int, str, str]:
    return await run(COORD, "agents", *args, env=server_env(env, task_queue))


async def test_an_agent_no_worker_serves_is_parked_unavailable_and_shown_unreachable(
    dev_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unserved_agents_found_at_once(monkeypatch)
    agents_file = tmp_path / "agents.yaml"
    agents_file.write_text(
        "agents:\n  ghost: {kind: python, "
        "callable: 'coord.activities.kinds.demo:register_demo_agents'}\n"
    )
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    selection = DlqSelection(correlation_id=correlation_id, status="parked")
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, ghost_chain(), correlation_id, queue=task_queue)
        await api.publish(client, event(correlation_id, "Ping"))
        [entry] = await parked(client, task_queue, 1, selection)
        await api.close_chain(client, correlation_id)
        chain = await asyncio.wait_for(handle.result(), 30)
        code, out, err = await coord_agents(dev_env, task_queue, "--agents", str(agents_file))
        json_code, json_out, _ = await coord_agents(
            dev_env, task_queue, "--agents", str(agents_file), "--json"
        )
    assert entry.failure_type == FailureType.AGENT_UNAVAILABLE
    assert chain.dead_lettered == 1
    assert entry.target_agent == "ghost"
    assert (code, err) == (0, "")
    [ghost_line] = [line for line in out.splitlines() if line.startswith("ghost ")]
    assert "unreachable" in ghost_line and "none" in ghost_line
    assert json_code == 0
    rows = {row["agent"]: AgentHealth.model_validate(row) for row in json.loads(json_out)}
    ghost = rows["ghost"]
    assert (ghost.status, ghost.kind, ghost.workers) == ("unreachable", "python", [])
    assert ghost.task_queue == agent_task_queue("ghost", task_queue)


async def test_agents_are_listed_when_no_worker_answers_for_their_ledgers(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A ledger answers from a worker; with none, its query waited out the server's timeout (30
    s) and `coord agents` failed. The rows are shown without breakers and pools, and a warning
    says why."""
    agents_file = tmp_path / "agents.yaml"
    agents_file.write_text(
        "agents:\n  ghost: {kind: python, "
        "callable: 'coord.activities.kinds.demo:register_demo_agents'}\n"
    )
    ghost_queue = agent_task_queue("ghost", task_queue)
    ledger = await client.start_workflow(
        contract.AGENT_LEDGER_WORKFLOW,
        LedgerStart(agent_queue=ghost_queue),
        id=contract.agent_ledger_workflow_id(ghost_queue),
        task_queue=contract.ledger_task_queue(task_queue),
    )
    began = time.monotonic()
    code, out, err = await coord_agents(dev_env, task_queue, "--agents", str(agents_file))
    took = time.monotonic() - began
    await ledger.terminate()
    assert (code, err) == (
        0,
        "warning: the agents' ledgers did not answer (no worker serves them?): breakers and "
        "recent runs not shown, pools as their workers report them\n",
    )
    [ghost_line] = [line for line in out.splitlines() if line.startswith("ghost ")]
    assert "unreachable" in ghost_line
    assert took < 20, f"{took:.1f} s: the ledgers' read is bounded"


async def health_of(client: Client, task_queue: str, agent: str) -> AgentHealth | None:
    """The agent's row, as found by discovery alone (nothing declared)."""
    rows = await agents_health(client, {}, home=task_queue)
    return next((row for row in rows if row.agent == agent), None)


async def until(check: Callable[[], Awaitable[bool]], timeout: float) -> float:
    """Seconds until `check` holds (polled every 0.25 s); fails after `timeout`."""
    began = time.monotonic()

    async def poll() -> None:
        while not await check():
            await asyncio.sleep(0.25)

    await asyncio.wait_for(poll(), timeout)
    return time.monotonic() - began


async def test_a_killed_worker_turns_its_agent_unreachable_and_a_new_worker_healthy(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "workers.log"
    queue = agent_task_queue("python-pro", task_queue)
    args = ("--only", "python-pro", "--no-workflows")

    async def status_is(status: str, identity: str | None = None) -> bool:
        row = await health_of(client, task_queue, "python-pro")
        alive = row is not None and any(
            worker.identity == identity for worker in row.workers if identity
        )
        return row is not None and row.status == status and (identity is None or alive)

    first = await WorkerProcess.start(client, task_queue, log, *args, polls=queue)
    try:
        await until(lambda: status_is("healthy", first.identity), 30)
        await first.kill()
        took = await until(lambda: status_is("unreachable"), 30)
    finally:
        first.stop()
    assert took <= 15, f"unreachable after {took:.1f}s"
    second = await WorkerProcess.start(client, task_queue, log, *args, polls=queue)
    try:
        await until(lambda: status_is("healthy", second.identity), 15)
    finally:
        second.stop()


def test_a_worker_is_alive_while_seen_within_the_heartbeat_timeout_and_not_stopping() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

    def ago(seconds: float) -> datetime:
        return now - timedelta(seconds=seconds)

    idle = WorkerSeen(identity="w", last_poll=ago(45), last_heartbeat=ago(2), state="running")
    assert idle.alive(now), "an idle worker's long poll is old; its heartbeat is not"
    assert WorkerSeen(identity="w", last_poll=ago(3)).alive(now), "polls alone count"
    assert not WorkerSeen(identity="w", last_poll=ago(11), last_heartbeat=ago(10.5)).alive(now)
    stopping = WorkerSeen(identity="w", last_poll=ago(1), last_heartbeat=ago(1), state="shutdown")
    assert not stopping.alive(now), "a worker that said it stopped is gone at once"
    healthy = AgentHealth.of("a", "agent-a", [stopping, idle], now)
    assert healthy.status == "healthy"
    assert AgentHealth.of("a", "agent-a", [], now).status == "unreachable"


async def test_a_worker_told_to_serve_an_agent_it_does_not_have_stops_with_one_line() -> None:
    code, out, err = await run(
        COORD,
        "worker",
        "--only",
        "python-pro,nobody",
        env={"TEMPORAL_ADDRESS": "127.0.0.1:1", "COORD_DEMO_AGENTS": "1"},
    )
    assert code != 0 and out == ""
    assert err.startswith("error: --only: unknown agent 'nobody'; known agents: BuildArtifact")
    assert len(err.splitlines()) == 1
