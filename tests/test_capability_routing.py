"""Routing by capability on the real dev server: runs that name capabilities instead of an agent
go to the agent the coordinator picks (`choose_agent`), which is recorded with the bids."""

import asyncio
import contextlib
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio import workflow
from temporalio.api.enums.v1 import WorkerStatus
from temporalio.api.worker.v1 import WorkerHeartbeat, WorkerSlotsInfo
from temporalio.api.workflowservice.v1 import RecordWorkerHeartbeatRequest
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from coord.activities.mesh.run_agent import AgentActivities
from coord.infra.agent_health import candidates_health
from coord.infra.ledgers import LedgerClient
from coord.models.chain.spec import ChainSpec
from coord.models.dlq.letter import DlqSelection
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.assignment import Assignment, CapabilityRoute
from coord.models.mesh.config import AgentDeclarationBase
from coord.models.mesh.ledger import BreakerConfig, RunStats
from coord.models.plan.spec import PlanSpec, TaskState
from coord.models.saga.spec import SagaSpec, SagaStatus
from coord.models.wire.contract import CHOOSE_AGENT_ACTIVITY, FailureType, agent_task_queue
from coord.starter import api
from coord.worker import build_worker, worker_runtime
from tests.helpers import event, eventually, parked
from tests.test_mesh_queues import runs_by_agent
from tests.workers import COORD, run, server_env


@pytest.fixture
async def mesh_client(dev_env: WorkflowEnvironment) -> AsyncIterator[Client]:
    """A client whose workers report themselves (worker heartbeats every 3 s, as `coord worker`
    does), so an idle or busy agent stays healthy whatever its polls."""
    plain = dev_env.client
    yield await Client.connect(
        plain.service_client.config.target_host,
        namespace=plain.namespace,
        data_converter=plain.data_converter,
        runtime=worker_runtime(),
    )


def answering(name: str) -> Any:
    async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {"answered_by": name}

    return agent


def registry_of(capabilities: Mapping[str, list[str]]) -> AgentRegistry:
    registry = AgentRegistry()
    for name, offered in capabilities.items():
        registry.register(name, declaration=AgentDeclarationBase(capabilities=offered))(
            answering(name)
        )
    return registry


def routed_chain() -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "routed",
            "triggers": ["Query", "Render"],
            "alerts": None,
            "subscriptions": [
                {"capabilities": ["sql", "postgres"], "events": "Query"},
                {"capability": "gpu", "events": "Render"},
            ],
        }
    )


async def test_a_chain_subscription_naming_capabilities_runs_on_the_agent_offering_them(
    mesh_client: Client, task_queue: str
) -> None:
    client = mesh_client
    registry = registry_of({"pg": ["sql", "postgres"], "mysql": ["sql", "mysql"], "web": ["http"]})
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    selection = DlqSelection(correlation_id=correlation_id, status="parked")
    async with build_worker(client, task_queue, registry):
        handle = await api.start_chain(client, routed_chain(), correlation_id, queue=task_queue)
        await api.publish(client, event(correlation_id, "Query"))
        await api.publish(client, event(correlation_id, "Render"))
        [entry] = await parked(client, task_queue, 1, selection)

        async def ran() -> bool:
            state = await api.chain_state(client, correlation_id)
            return state.events_seen >= 2 and not state.running and not state.queued

        await eventually(ran)
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 30)
        runs = await runs_by_agent(handle)
    [picked] = state.assignments
    assert (picked.subscription, picked.assignment.agent) == ("sql+postgres", "pg")
    assert [bid.agent for bid in picked.assignment.bids] == ["pg"], "mysql offers half: no"
    assert picked.assignment.bids[0].capability_match == 1.0
    [(queue, _)] = runs.values()
    assert queue == agent_task_queue("pg", task_queue)
    assert entry.failure_type == FailureType.NO_CAPABLE_AGENT
    assert entry.target_agent == "gpu"
    assert "no declared agent offers more than 70% of gpu" in entry.message


def holding_saga(index: int) -> SagaSpec:
    """A saga whose one step runs db-1, which holds every run until released."""
    return SagaSpec.model_validate(
        {
            "saga_id": f"hold-{index}-{uuid.uuid4().hex[:8]}",
            "steps": [{"name": "hold", "agent": "db-1", "schedule_to_start_timeout": "5m"}],
        }
    )


def loaded_worker(client: Client, task_queue: str, registry: AgentRegistry) -> Worker:
    """db-1's one worker, one run at a time: the runs after the first wait in its queue."""
    return Worker(
        client,
        task_queue=agent_task_queue("db-1", task_queue),
        activities=[AgentActivities(registry.only(["db-1"])).run_agent],
        max_concurrent_activities=1,
    )


async def test_the_auction_and_least_loaded_pick_from_controlled_load_and_history(
    mesh_client: Client, task_queue: str
) -> None:
    """db-1 has a backlog (one worker, busy, four runs waiting), db-2 a poor record (1 of 4
    runs succeeded, as its ledger says), db-3 neither: the auction picks db-3 (db-1 would tie
    on bids without its load, db-2 too without its record); least_loaded, which weighs load
    only, picks db-2 (tied with db-3, which the router picked last)."""
    client = mesh_client
    released = asyncio.Event()

    async def holding(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        await released.wait()
        return {}

    registry = registry_of({"db-2": ["sql"], "db-3": ["sql"]})
    registry.register("db-1", declaration=AgentDeclarationBase(capabilities=["sql"]))(holding)

    async def db_1_backlog() -> bool:
        rows = await candidates_health(client, ["db-1", "db-2", "db-3"], home=task_queue)
        return rows[0].backlog >= 3 and all(row.status == "healthy" for row in rows)

    auction = SagaSpec.model_validate(
        {
            "saga_id": f"auction-{uuid.uuid4().hex[:8]}",
            "steps": [{"name": "query", "capability": "sql", "assignment": "auction"}],
        }
    )
    least_loaded = PlanSpec.model_validate(
        {"plan_id": f"ll-{uuid.uuid4().hex[:8]}", "tasks": [{"id": "report", "capability": "sql"}]}
    )
    async with build_worker(client, task_queue, registry, only=["db-2", "db-3"]):
        for agent, stats in (
            ("db-2", RunStats(succeeded=1, failed=3)),
            ("db-3", RunStats(succeeded=4)),
        ):
            ledger = LedgerClient(
                client, agent_task_queue(agent, task_queue), task_queue, BreakerConfig(), "test"
            )
            await ledger.stats(stats)
        async with loaded_worker(client, task_queue, registry):
            holds = [
                await api.start_saga(client, holding_saga(i), queue=task_queue) for i in range(5)
            ]
            await eventually(db_1_backlog, timeout=60)
            saga = await api.start_saga(client, auction, queue=task_queue)
            sold = await asyncio.wait_for(api.saga_outcome(saga), 60)
            plan = await api.start_plan(client, least_loaded, queue=task_queue)
            planned = await asyncio.wait_for(api.plan_outcome(plan), 60)
            released.set()
            await asyncio.wait_for(asyncio.gather(*(h.result() for h in holds)), 60)
        runs = await runs_by_agent(saga)
    assert sold.status == SagaStatus.COMPLETED
    picked = sold.assignments["query"]
    bids = {bid.agent: bid for bid in picked.bids}
    assert picked.agent == "db-3"
    assert [bid.agent for bid in picked.bids] == ["db-3", "db-2", "db-1"]
    assert (bids["db-3"].bid, bids["db-2"].bid) == (1.0, 0.85)
    assert bids["db-2"].past_performance == 0.25
    assert bids["db-1"].backlog >= 3 and bids["db-1"].load >= 0.75
    assert bids["db-1"].bid <= 0.775
    assert runs["query"][0] == agent_task_queue("db-3", task_queue)
    [task] = planned.tasks
    assert (task.state, task.agent) == (TaskState.SUCCEEDED, "db-2")
    assert task.assignment is not None and task.assignment.strategy == "least_loaded"
    assert [bid.agent for bid in task.assignment.bids][:2] == ["db-2", "db-3"]


AGENTS_FILE = """\
agents:
  pg:
    kind: shell
    argv: [cat]
    capabilities: [sql, postgres]
  web:
    kind: shell
    argv: [cat]
"""


async def test_coord_agents_shows_what_each_agent_offers(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    agents_file = tmp_path / "agents.yaml"
    agents_file.write_text(AGENTS_FILE)
    env = server_env(dev_env, task_queue)
    code, out, err = await run(COORD, "agents", "--agents", str(agents_file), "--json", env=env)
    assert (code, err) == (0, "")
    offered = {row["agent"]: row["capabilities"] for row in json.loads(out)}
    assert (offered["pg"], offered["web"]) == (["sql", "postgres"], [])
    code, out, _ = await run(COORD, "agents", "--agents", str(agents_file), env=env)
    [pg_line] = [line for line in out.splitlines() if line.startswith("pg ")]
    assert code == 0 and "sql, postgres" in pg_line


async def served(client: Client, task_queue: str, agents: list[str]) -> bool:
    """Whether every one of `agents` has a live worker, as the router reads them."""
    rows = await candidates_health(client, agents, home=task_queue)
    return all(row.status == "healthy" for row in rows)


async def saga_pick(client: Client, saga_id: str, step: str) -> Assignment:
    """The agent picked for the saga's step, once it has one (whether its run ends or not)."""

    async def picked() -> bool:
        return step in (await api.saga_state(client, saga_id)).assignments

    await eventually(picked, timeout=30)
    return (await api.saga_state(client, saga_id)).assignments[step]


async def plan_pick(client: Client, plan_id: str, task_id: str) -> Assignment:
    """The agent picked for the plan's task, once it has one (whether its run ends or not)."""

    async def assigned() -> Assignment | None:
        [task] = [t for t in (await api.plan_state(client, plan_id)).tasks if t.id == task_id]
        return task.assignment

    async def picked() -> bool:
        return await assigned() is not None

    await eventually(picked, timeout=30)
    assignment = await assigned()
    assert assignment is not None
    return assignment


def wave(strategy: str, tasks: int) -> PlanSpec:
    """A plan whose tasks all ask for `sql` and start together (one wave)."""
    return PlanSpec.model_validate(
        {
            "plan_id": f"wave-{strategy}-{uuid.uuid4().hex[:8]}",
            "max_workers": tasks,
            "tasks": [
                {"id": f"q{i}", "capability": "sql", "assignment": strategy} for i in range(tasks)
            ],
        }
    )


@pytest.mark.parametrize("strategy", ["least_loaded", "auction"])
async def test_a_wave_of_runs_asking_one_capability_spreads_over_the_idle_agents(
    mesh_client: Client, task_queue: str, strategy: str
) -> None:
    """Six tasks of one wave among three idle agents: two each. Picked one by one, each read
    the same idle agents and all went to the same one."""
    client = mesh_client
    agents = ["db-1", "db-2", "db-3"]
    registry = registry_of({agent: ["sql"] for agent in agents})
    async with build_worker(client, task_queue, registry):
        await eventually(lambda: served(client, task_queue, agents), timeout=30)
        plan = await api.start_plan(client, wave(strategy, 6), queue=task_queue)
        outcome = await asyncio.wait_for(api.plan_outcome(plan), 60)
        history = await plan.fetch_history()
    assert all(task.state == TaskState.SUCCEEDED for task in outcome.tasks)
    assert Counter(task.agent for task in outcome.tasks) == dict.fromkeys(agents, 2)
    chosen = [e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]
    types = [e.activity_task_scheduled_event_attributes.activity_type.name for e in chosen]
    assert types.count("choose_agents") == 1, "the wave's picks are made together"


async def test_a_run_in_progress_counts_as_load(mesh_client: Client, task_queue: str) -> None:
    """db-1 is running a run and has none waiting, db-2 is idle: both strategies pick db-2
    (least_loaded weighed backlog alone, a tie that went to db-1 by name; the auction weighed
    the run only as 1% less of db-1's free slots)."""
    client = mesh_client
    released = asyncio.Event()

    async def holding(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        await released.wait()
        return {}

    registry = registry_of({"db-2": ["sql"]})
    registry.register("db-1", declaration=AgentDeclarationBase(capabilities=["sql"]))(holding)

    async def db_1_busy() -> bool:
        rows = await candidates_health(client, ["db-1", "db-2"], home=task_queue)
        busy = rows[0].pool is not None and rows[0].pool.in_use == 1 and rows[0].backlog == 0
        return busy and all(row.status == "healthy" for row in rows)

    auction = SagaSpec.model_validate(
        {
            "saga_id": f"auction-{uuid.uuid4().hex[:8]}",
            "steps": [{"name": "query", "capability": "sql", "assignment": "auction"}],
        }
    )
    async with build_worker(client, task_queue, registry):
        hold = await api.start_saga(client, holding_saga(0), queue=task_queue)
        await eventually(db_1_busy, timeout=60)
        saga = await api.start_saga(client, auction, queue=task_queue)
        picked = await saga_pick(client, auction.saga_id, "query")
        assert picked.agent == "db-2", picked.describe()
        sold = await asyncio.wait_for(api.saga_outcome(saga), 60)
        spec = wave("least_loaded", 1)
        plan = await api.start_plan(client, spec, queue=task_queue)
        planned_pick = await plan_pick(client, spec.plan_id, "q0")
        assert planned_pick.agent == "db-2", planned_pick.describe()
        planned = await asyncio.wait_for(api.plan_outcome(plan), 60)
        released.set()
        await asyncio.wait_for(hold.result(), 60)
    busy = {bid.agent: bid for bid in sold.assignments["query"].bids}["db-1"]
    assert (busy.running, busy.backlog, busy.load) == (1, 0, 0.5)
    [task] = planned.tasks
    assert task.agent == "db-2"
    assert task.assignment is not None
    assert [bid.work_per_poller for bid in task.assignment.bids] == [0.0, 1.0]


async def open_db_1_with_the_best_record(client: Client, task_queue: str) -> None:
    """db-1: 100 runs succeeded, then 5 failures in a row that open its breaker for 10 minutes;
    db-3 and db-4: 1 of 2 runs succeeded (the ledgers run on the coordinator queue's worker)."""
    config = BreakerConfig(consecutive=5, recovery=timedelta(minutes=10))
    down = RunStats(failed=5, counted=5, reasons={"connection": 5}, streak=5)
    records = {
        "db-1": [RunStats(succeeded=100), down],
        "db-3": [RunStats(succeeded=1, failed=1)],
        "db-4": [RunStats(succeeded=1, failed=1)],
    }
    for agent, reports in records.items():
        ledger = LedgerClient(client, agent_task_queue(agent, task_queue), task_queue, config, "t")
        for stats in reports:
            state = await ledger.stats(stats)
        assert (state.breaker == "open") == (agent == "db-1")


@workflow.defn(name="RouteOnce", sandboxed=False)
class RouteOnce:
    """Asks the coordinator of queue `home` to pick for `route`, as a workflow routing a run
    again would (with the agents it rules out)."""

    @workflow.run
    async def run(self, home: str, route: CapabilityRoute) -> Assignment:
        assignment: Assignment = await workflow.execute_activity(
            CHOOSE_AGENT_ACTIVITY,
            route,
            result_type=Assignment,
            task_queue=home,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        return assignment


async def test_routing_avoids_an_open_breaker_and_an_agent_without_workers_and_excludes(
    mesh_client: Client, task_queue: str
) -> None:
    """db-1 has the best record but its breaker is open, db-2 has no worker, db-3 and db-4 are
    served with a middling record: both strategies pick db-3 or db-4 (db-1 won the auction on
    its record and least_loaded by name). A route excluding the one picked gets the other."""
    client = mesh_client
    agents = ["db-1", "db-2", "db-3", "db-4"]
    registry = registry_of({agent: ["sql"] for agent in agents})
    auction = SagaSpec.model_validate(
        {
            "saga_id": f"auction-{uuid.uuid4().hex[:8]}",
            "steps": [{"name": "query", "capability": "sql", "assignment": "auction"}],
        }
    )
    routing_queue = f"{task_queue}-routing"
    async with (
        build_worker(client, task_queue, registry, only=["db-1", "db-3", "db-4"]),
        Worker(client, task_queue=routing_queue, workflows=[RouteOnce]),
    ):
        await open_db_1_with_the_best_record(client, task_queue)
        await eventually(lambda: served(client, task_queue, ["db-1", "db-3", "db-4"]), 30)
        saga = await api.start_saga(client, auction, queue=task_queue)
        picked = await saga_pick(client, auction.saga_id, "query")
        assert picked.agent in {"db-3", "db-4"}, picked.describe()
        sold = await asyncio.wait_for(api.saga_outcome(saga), 60)
        first = picked.agent
        plan = await api.start_plan(client, wave("least_loaded", 1), queue=task_queue)
        [task] = (await asyncio.wait_for(api.plan_outcome(plan), 60)).tasks
        assert task.agent in {"db-3", "db-4"}
        again = await client.execute_workflow(
            RouteOnce.run,
            args=[task_queue, CapabilityRoute(capabilities=["sql"], exclude=[first])],
            id=f"route-{uuid.uuid4().hex[:8]}",
            task_queue=routing_queue,
            execution_timeout=timedelta(seconds=60),
        )
    assert sold.status == SagaStatus.COMPLETED
    bids = {bid.agent: bid for bid in sold.assignments["query"].bids}
    assert (bids["db-1"].breaker, bids["db-1"].available) == ("open", False)
    assert (bids["db-2"].healthy, bids["db-2"].available) == (False, False)
    assert bids["db-1"].bid > bids[first].bid, "its record alone would have won"
    assert again.agent == ({"db-3", "db-4"} - {first}).pop()
    assert first not in [bid.agent for bid in again.bids]


async def starting_worker(client: Client, queue: str) -> None:
    """The only worker of `queue`, as the server sees one that has just started: a heartbeat
    a second (the server's clock, past any load) whose activity slots say none used and none
    available, as a worker's first heartbeat often does. Runs until cancelled."""
    identity = f"starting-{uuid.uuid4().hex[:8]}@test"
    while True:
        now = Timestamp()
        now.FromDatetime(datetime.now(UTC))
        heartbeat = WorkerHeartbeat(
            worker_instance_key=identity,
            worker_identity=identity,
            task_queue=queue,
            status=WorkerStatus.WORKER_STATUS_RUNNING,
            start_time=now,
            heartbeat_time=now,
            activity_task_slots_info=WorkerSlotsInfo(slot_supplier_kind="Fixed"),
        )
        request = RecordWorkerHeartbeatRequest(
            namespace=client.namespace, identity=identity, worker_heartbeat=[heartbeat]
        )
        await client.workflow_service.record_worker_heartbeat(request)
        await asyncio.sleep(1)


async def test_a_worker_that_has_not_reported_its_slots_yet_bids_as_an_idle_one(
    mesh_client: Client, task_queue: str
) -> None:
    """db-2's worker has just started (its heartbeat reports no slots yet), db-1's has reported
    its free slots: the auction weighs db-2's pool as unknown, like db-1's free one, so both
    bid the same. Read as a pool of no slots, db-2 bid 0.1 less, and a wave picked right after
    its workers started went mostly to the agents that had reported (4/1/1 instead of 2/2/2)."""
    client = mesh_client
    registry = registry_of({"db-1": ["sql"], "db-2": ["sql"]})
    routing_queue = f"{task_queue}-routing"

    async def db_1_reported_its_slots() -> bool:
        rows = await candidates_health(client, ["db-1", "db-2"], home=task_queue)
        return rows[0].pool is not None and all(row.status == "healthy" for row in rows)

    async with (
        build_worker(client, task_queue, registry, only=["db-1"]),
        Worker(client, task_queue=routing_queue, workflows=[RouteOnce]),
    ):
        starting = asyncio.create_task(
            starting_worker(client, agent_task_queue("db-2", task_queue))
        )
        try:
            await eventually(db_1_reported_its_slots, timeout=60)
            picked = await client.execute_workflow(
                RouteOnce.run,
                args=[task_queue, CapabilityRoute(capabilities=["sql"], strategy="auction")],
                id=f"route-{uuid.uuid4().hex[:8]}",
                task_queue=routing_queue,
                execution_timeout=timedelta(seconds=60),
            )
        finally:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
    bids = {bid.agent: bid for bid in picked.bids}
    assert bids["db-2"].available, picked.describe()
    assert bids["db-2"].resource_availability == 1.0, picked.describe()
    assert bids["db-2"].bid == bids["db-1"].bid, picked.describe()
