"""Runs their agent cannot take, on the real dev server: a full pool and an open breaker delay a
run without spending its attempts, a run whose agent has no worker falls back, a capability-
routed run whose agent's worker is killed is routed again, and every retry's delay is the
jittered one the workflow seeded."""

import asyncio
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowHandle

from coord.activities.kinds import load_agents
from coord.infra.ledgers import LedgerClient
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry, AgentRequest
from coord.models.mesh.ledger import BreakerConfig, RunStats
from coord.models.mesh.runs import retry_delay
from coord.models.plan.spec import PlanSpec, PlanState, TaskState
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.contract import FailureType, agent_task_queue
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import eventually
from tests.workers import WorkerProcess


@dataclass
class Calls:
    """What the agents below saw."""

    running: int = 0
    peak: int = 0
    attempts: list[int] = field(default_factory=list)
    started: list[datetime] = field(default_factory=list)
    scheduled: list[datetime] = field(default_factory=list)


CALLS = Calls()


async def slow(envelope: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """Takes a second and a half, counting the runs at once."""
    CALLS.running += 1
    CALLS.peak = max(CALLS.peak, CALLS.running)
    CALLS.attempts.append(context.attempt)
    try:
        await asyncio.sleep(1.5)
    finally:
        CALLS.running -= 1
    return {"attempt": context.attempt}


async def twice_broken(envelope: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """Fails its first two attempts; records when the server scheduled and started each."""
    info = activity.info()
    CALLS.started.append(info.started_time)
    CALLS.scheduled.append(info.current_attempt_scheduled_time)
    CALLS.attempts.append(context.attempt)
    if context.attempt <= 2:
        raise RuntimeError(f"broken on attempt {context.attempt}")
    return {}


def declared(tmp_path: Path, **agents: dict[str, Any]) -> AgentRegistry:
    """The agents given (python callables of this module), declared as in an agents file."""
    global CALLS
    CALLS = Calls()
    agents_file = tmp_path / f"agents-{uuid.uuid4().hex[:6]}.yaml"
    config = {
        name: {"kind": "python", "callable": f"{__name__}:{fields.pop('fn')}", **fields}
        for name, fields in agents.items()
    }
    agents_file.write_text(json.dumps({"agents": config}))
    return load_agents(agents_file, AgentRegistry())


def saga(*steps: dict[str, Any]) -> SagaSpec:
    return SagaSpec.model_validate({"saga_id": f"s-{uuid.uuid4().hex[:8]}", "steps": list(steps)})


async def run_saga(client: Client, task_queue: str, spec: SagaSpec) -> SagaState:
    handle = await api.start_saga(client, spec, queue=task_queue)
    return await asyncio.wait_for(api.saga_outcome(handle), 120)


async def test_a_pooled_agent_queues_plan_tasks_instead_of_failing_them(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Three parallel tasks, `max_concurrent: 1` across the agent's two workers, no retries, a
    wait for a permit longer than the pool's patience: each waits its turn, none spends an
    attempt, all succeed."""
    registry = declared(tmp_path, pooled={"fn": "slow", "max_concurrent": 1})
    no_retry = {"max_retries": 0}
    tasks = [{"id": f"t{n}", "agent": "pooled", "timeout": "3s", "retry": no_retry} for n in "abc"]
    spec = PlanSpec.model_validate({"plan_id": f"p-{uuid.uuid4().hex[:8]}", "tasks": tasks})
    other = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=client.data_converter,
    )
    async with (
        build_worker(client, task_queue, registry),
        build_worker(other, task_queue, registry, workflows=False),
    ):
        handle = await api.start_plan(client, spec, queue=task_queue)
        state: PlanState = await asyncio.wait_for(api.plan_outcome(handle), 120)
    records = {task.id: task for task in state.tasks}
    succeeded = {f"t{n}": TaskState.SUCCEEDED for n in "abc"}
    assert {task: record.state for task, record in records.items()} == succeeded
    assert CALLS.peak == 1 and CALLS.attempts == [1, 1, 1]
    waited = [d for r in records.values() for d in r.detours]
    assert waited and {(d.reason, d.action) for d in waited} == {("pool_full", "waited")}
    assert all(r.attempts == 1 for r in records.values())


async def test_an_open_breaker_delays_a_step_without_spending_its_attempts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The breaker is opened for 3 s by two timeouts in a row its ledger was told of; a step with no
    retries sent meanwhile waits for it, then runs once and completes."""
    registry = declared(
        tmp_path, guarded={"fn": "slow", "breaker": {"failures": 2, "recovery": "3s"}}
    )
    config = BreakerConfig.model_validate({"failures": 2, "recovery": "3s"})
    queue = agent_task_queue("guarded", task_queue)
    ledger = LedgerClient(client, queue, task_queue, config, worker="test")
    spec = saga({"name": "deploy", "agent": "guarded", "retry": {"max_retries": 0}})
    async with build_worker(client, task_queue, registry):  # serves the ledger's workflow too
        timeouts = {FailureType.TIMEOUT.value: 2}
        await ledger.stats(RunStats(failed=2, counted=2, streak=2, reasons=timeouts))
        assert (await ledger.read()).breaker == "open"
        state = await run_saga(client, task_queue, spec)
    assert state.status == SagaStatus.COMPLETED, state.failure_reason
    assert CALLS.attempts == [1]
    (detour,) = state.detours
    assert (detour.run, detour.agent, detour.reason, detour.action) == (
        "deploy",
        "guarded",
        "circuit_open",
        "waited",
    )
    assert detour.waited_s is not None and detour.waited_s >= 1


async def test_a_step_whose_agent_has_no_worker_falls_back(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    registry = declared(tmp_path, backup={"fn": "slow"})
    spec = saga(
        {
            "name": "deploy",
            "agent": "primary",
            "schedule_to_start_timeout": "2s",
            "fallback": "backup",
            "on_success": "Deployed",
        }
    )
    async with build_worker(client, task_queue, registry):
        state = await run_saga(client, task_queue, spec)
    assert state.status == SagaStatus.COMPLETED, state.failure_reason
    (detour,) = state.detours
    assert (detour.agent, detour.reason, detour.action, detour.to_agent) == (
        "primary",
        FailureType.AGENT_UNAVAILABLE,
        "fell_back",
        "backup",
    )
    assert [(e.event, e.agent) for e in state.events] == [("Deployed", "/backup")]


SQL_AGENTS = """
agents:
  db-1: {kind: shell, argv: [sh, -c, 'sleep 4; echo {}'], capabilities: [sql]}
  db-2: {kind: shell, argv: [sh, -c, 'sleep 4; echo {}'], capabilities: [sql]}
"""


async def started_run(handle: WorkflowHandle[Any, Any]) -> bool:
    pending = (await handle.describe()).raw_description.pending_activities
    started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    return any(a.activity_type.name == "run_agent" and a.state == started for a in pending)


async def test_a_routed_step_whose_agent_worker_is_killed_moves_to_the_other_capable_agent(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agents_file = tmp_path / "agents.yaml"
    agents_file.write_text(SQL_AGENTS)
    log = tmp_path / "workers.log"
    workers = {
        name: await WorkerProcess.start(
            client,
            task_queue,
            log,
            "--agents",
            str(agents_file),
            "--no-workflows",
            "--only",
            name,
            polls=agent_task_queue(name, task_queue),
        )
        for name in ("db-1", "db-2")
    }
    spec = saga(
        {
            "name": "query",
            "capability": "sql",
            "heartbeat_timeout": "2s",
            "schedule_to_start_timeout": "3s",
            "retry": {"max_retries": 1, "initial_delay": "100ms"},
        }
    )
    try:
        catalogue = load_agents(agents_file, AgentRegistry())  # known to route, served elsewhere
        async with build_worker(client, task_queue, catalogue, only=[]):
            handle = await api.start_saga(client, spec, queue=task_queue)
            await eventually(lambda: started_run(handle), timeout=60)
            first = (await handle.query("state", result_type=SagaState)).assignments["query"]
            await workers[first.agent].kill()
            state = await asyncio.wait_for(api.saga_outcome(handle), 120)
    finally:
        for worker in workers.values():
            worker.stop()
    assert state.status == SagaStatus.COMPLETED, state.failure_reason
    other = "db-2" if first.agent == "db-1" else "db-1"
    assert state.assignments["query"].agent == other
    (detour,) = state.detours
    assert (detour.agent, detour.action, detour.to_agent) == (first.agent, "rerouted", other)
    assert detour.reason in {FailureType.AGENT_UNAVAILABLE, FailureType.TIMEOUT}


async def test_retries_wait_the_jittered_delay_the_workflow_seeded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    # An activity task's request is in the history (a local activity's is not).
    registry = declared(tmp_path, broken={"fn": "twice_broken", "execution": "remote"})
    retry = {"max_retries": 3, "initial_delay": "1s", "max_delay": "4s"}
    spec = saga({"name": "deploy", "agent": "broken", "retry": retry})
    async with build_worker(client, task_queue, registry):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED and CALLS.attempts == [1, 2, 3]
    request = await first_request(handle)
    assert request.jitter is not None and request.jitter.kind == "full"
    for attempt in (1, 2):
        gap = (CALLS.scheduled[attempt] - CALLS.started[attempt - 1]).total_seconds()
        delay = jittered(request, attempt)
        assert delay <= gap < delay + 1.0, (attempt, gap, delay)


def jittered(request: AgentRequest, attempt: int) -> float:
    """The delay the worker gave the retry after `attempt` (1 s initial, doubling, 4 s cap)."""
    assert request.jitter is not None
    initial, maximum = timedelta(seconds=1), timedelta(seconds=4)
    delay = retry_delay(attempt, request.jitter, initial=initial, coefficient=2.0, maximum=maximum)
    return delay.total_seconds()


async def first_request(handle: WorkflowHandle[Any, Any]) -> AgentRequest:
    """The `run_agent` request as the history holds it (the jitter's seed with it)."""
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            payloads = event.activity_task_scheduled_event_attributes.input.payloads
            (request,) = await handle._client.data_converter.decode(payloads, [AgentRequest])
            assert isinstance(request, AgentRequest)
            return request
    raise AssertionError("no run_agent scheduled")
