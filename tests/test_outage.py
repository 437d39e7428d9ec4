"""Server and worker outages cost the runs in flight nothing but runs again: a dev server
SIGTERMed, SIGKILLed or away for a minute, with sagas and chains running on it, and a worker
SIGKILLed twice under twenty sagas. Every step allows no retry (or one, for the worker kills), so
a single attempt the outage cost the agent would fail it. Runs that are activity tasks: half of
them heartbeat (the server times those out when it comes back, as their worker had said nothing
for longer), the other half do not (their reports reach the restarted server, and no agent runs
twice). Local runs (the fast path): their results reach the server with their workflow task,
which the outage cuts off, so the restarted server's next task runs them again, each step with
its one idempotency key. The outage tests start and kill a dev server of their own; the file
takes about five minutes."""

import asyncio
import signal
import uuid
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowHandle

from coord.models.chain.spec import ChainSpec, ChainState
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.retry import LOST_RUNS_ALLOWED
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.specs import read_document
from coord.starter import api
from coord.worker import build_worker
from tests.conftest import FEATURE_DEPLOYMENT
from tests.helpers import USER_STORY, approved, eventually
from tests.outages import OwnDevServer
from tests.workers import demo_agents_worker, worker_process

SLOW_STEPS = {
    "BuildArtifact": 3,
    "RunTests": 3,
    "DeployToStaging": 6,
    "RunE2ETests": 3,
    "DeployToProduction": 3,
}
SLOW_CHAIN = {
    "backend-architect": 4,
    "ux-designer": 4,
    "test-engineer": 2,
    "python-pro": 3,
    "database-specialist": 3,
    "frontend-specialist": 3,
}
HEARTBEATING = {"heartbeat_timeout": "2s"}
QUIET: dict[str, Any] = {}
ENDED_AFTER_RESTART = 120
"""Seconds the runs may take to end once the server is back; without the worker's reports sent
again, one that finished during the outage waits for its 5-minute time limit."""


def saga(
    step: dict[str, Any],
    retries: int = 0,
    slow: Mapping[str, float] = SLOW_STEPS,
    keys: Path | None = None,
) -> SagaSpec:
    """The saga, every step with `step`'s fields and `retries` retries, slow agents; `keys`:
    the file each run notes its agent, attempt and idempotency key in (`keyed_demo_agent`)."""
    data = read_document(FEATURE_DEPLOYMENT)
    data["saga_id"] = f"outage-{uuid.uuid4().hex[:8]}"
    for each in data["steps"]:
        each.update(step, retry={"max_retries": retries, "initial_delay": "200ms"})
    data["input"] = {**data["input"], "inject": {"slow": dict(slow)}}
    if keys is not None:
        data["input"]["keys"] = str(keys)
    return SagaSpec.model_validate(data)


def chain(subscription: dict[str, Any]) -> ChainSpec:
    """The user-story chain, every subscription with `subscription`'s fields and no retry."""
    data = read_document(USER_STORY)
    for each in data["subscriptions"]:
        each.update(subscription, retry={"max_retries": 0})
    return ChainSpec.model_validate(data)


async def in_flight(handle: WorkflowHandle[Any, Any], attempt: int = 1) -> bool:
    """A worker has started one of its agent runs (at least at `attempt`)."""
    pending = (await handle.describe()).raw_description.pending_activities
    return any(
        p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED and p.attempt >= attempt
        for p in pending
    )


async def all_in_flight(handles: list[WorkflowHandle[Any, Any]], attempt: int = 1) -> bool:
    return all(await asyncio.gather(*(in_flight(h, attempt) for h in handles)))


def noted_runs(keys: Path) -> list[tuple[str, str]]:
    """Each run a saga's agents noted (`keyed_demo_agent`), in order: its agent and key."""
    if not keys.exists():
        return []
    return [(agent, key) for agent, _, key in map(str.split, keys.read_text().splitlines())]


async def all_noted(keys: list[Path]) -> bool:
    """Each saga's first local run has begun (it noted its key)."""
    return all(noted_runs(each) for each in keys)


async def ended_within(timeout: float, *outcomes: Awaitable[SagaState | ChainState]) -> list[str]:
    """How each run ended (its status), or `running` when it had not within `timeout`."""
    waiting = [asyncio.ensure_future(outcome) for outcome in outcomes]
    await asyncio.wait(waiting, timeout=timeout)
    for still in waiting:
        still.cancel()
    return [_ended(each) for each in waiting]


def _ended(outcome: "asyncio.Future[SagaState | ChainState]") -> str:
    if not outcome.done() or outcome.cancelled():
        return "running"
    error = outcome.exception()
    return repr(error) if error is not None else str(outcome.result().status)


async def attempts_started(handle: WorkflowHandle[Any, Any]) -> list[int]:
    return [
        event.activity_task_started_event_attributes.attempt
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]


@pytest.mark.soak  # minutes of a server down, or a flood: `make soak`
@pytest.mark.parametrize(
    ("how", "away"),
    [(signal.SIGTERM, 15), (signal.SIGKILL, 15), (signal.SIGKILL, 60)],
    ids=["sigterm", "sigkill", "60s-outage"],
)
async def test_runs_in_flight_outlive_a_server_outage(
    tmp_path: Path, how: signal.Signals, away: float
) -> None:
    server = OwnDevServer(tmp_path / "server.db", tmp_path / "server.log")
    client = await server.start()
    queue = {execution: f"tq-{execution}-{uuid.uuid4()}" for execution in ("remote", "local")}
    sagas = [saga(HEARTBEATING) for _ in range(6)] + [saga(QUIET) for _ in range(6)]
    keys = [tmp_path / f"keys-{i}.txt" for i in range(4)]
    local_sagas = [saga(QUIET, keys=each) for each in keys]
    chains = {
        (f"outage-{uuid.uuid4().hex[:8]}", where): chain(kind)
        for kind, where in ((HEARTBEATING, "remote"), (QUIET, "remote"), (QUIET, "local"))
    }
    try:
        async with (
            demo_agents_worker(client, queue["remote"], tmp_path, "remote"),
            demo_agents_worker(client, queue["local"], tmp_path, "local"),
        ):
            handles: list[WorkflowHandle[Any, Any]] = [
                await api.start_saga(client, spec, queue=queue["remote"]) for spec in sagas
            ]
            for spec in local_sagas:
                await api.start_saga(client, spec, queue=queue["local"])
            for (correlation_id, where), chain_spec in chains.items():
                await api.start_chain(client, chain_spec, correlation_id, queue=queue[where])
                await api.publish(client, approved(correlation_id, inject={"slow": SLOW_CHAIN}))
                if where == "remote":
                    handles.append(api.chain_handle(client, correlation_id))
            await eventually(lambda: all_in_flight(handles), timeout=60, interval=0.2)
            await eventually(lambda: all_noted(keys), timeout=60, interval=0.2)
            server.stop(how)
            await asyncio.sleep(away)  # the outage itself
            client = await server.start()
            every = [*sagas, *local_sagas]
            saga_ends = [api.saga_outcome(api.saga_handle(client, s.saga_id)) for s in every]
            chain_ends = [api.chain_handle(client, c).result() for c, _ in chains]
            ended = await ended_within(ENDED_AFTER_RESTART, *saga_ends, *chain_ends)
        assert ended == ["completed"] * len(ended), " ".join(ended)
        saga_states = [await api.saga_outcome(api.saga_handle(client, s.saga_id)) for s in every]
        assert all(not s.compensations for s in saga_states)
        chain_states = [await api.chain_handle(client, c).result() for c, _ in chains]
        assert all(c.dead_lettered == 0 for c in chain_states)
        quiet = [api.saga_handle(client, s.saga_id) for s in sagas[6:]]
        for handle in quiet:  # their reports reached the server: no agent ran twice
            assert set(await attempts_started(handle)) == {1}, handle.id
        for noted in map(noted_runs, keys):  # a local run again has its step's one key
            for step in local_sagas[0].steps:
                assert len({key for agent, key in noted if agent == step.name}) == 1, noted
    finally:
        server.stop(signal.SIGKILL)


@pytest.mark.slow
async def test_twenty_sagas_outlive_a_worker_killed_twice(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Each kill loses the run every saga has in flight; the second kill comes once every saga
    runs its lost step's second attempt, the last its step's one retry allows when the server
    counts attempts. The first step is the slow one, the one both kills cut off: the steps
    after it run at once."""
    slow = {"BuildArtifact": 5}
    sagas = [saga(HEARTBEATING, retries=1, slow=slow) for _ in range(20)]
    log = tmp_path / "workers.log"
    async with worker_process(client, task_queue, log) as first:
        handles = [await api.start_saga(client, spec, queue=task_queue) for spec in sagas]
        await eventually(lambda: all_in_flight(handles), timeout=60, interval=0.2)
        await first.kill()
    async with worker_process(client, task_queue, log) as second:
        await eventually(lambda: all_in_flight(handles, attempt=2), timeout=60, interval=0.2)
        await second.kill()
    async with worker_process(client, task_queue, log):
        ended = await ended_within(180, *map(api.saga_outcome, handles))
    assert ended == ["completed"] * len(sagas), " ".join(ended)
    for handle in handles:
        assert max(await attempts_started(handle)) == 3, handle.id


async def test_a_run_lost_again_and_again_fails_timeout_after_six_losses(
    client: Client, task_queue: str
) -> None:
    """Attempts lost without a report spend none of the step's retries, but not without end: an
    agent that says nothing for longer than its heartbeat timeout (as a dead worker would) is
    given LOST_RUNS_ALLOWED more goes, then the worker fails the run `timeout`."""
    silent = AgentRegistry()

    @silent.register("Silent")
    async def _(event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
        await asyncio.sleep(3)
        return {}

    fast = {"max_retries": 3, "initial_delay": "100ms", "max_delay": "100ms"}
    step = {"name": "Silent", "heartbeat_timeout": "1s", "timeout": "10s", "retry": fast}
    spec = SagaSpec.model_validate({"saga_id": f"lost-{uuid.uuid4().hex[:8]}", "steps": [step]})
    async with build_worker(client, task_queue, silent):
        state = await api.saga_outcome(await api.start_saga(client, spec, queue=task_queue))
        handle = api.saga_handle(client, spec.saga_id)
        started = await attempts_started(handle)
    assert state.status == SagaStatus.COMPENSATED
    assert max(started) == LOST_RUNS_ALLOWED + 2
    assert "ended 6 times without a report from its worker" in (state.failure_reason or "")
