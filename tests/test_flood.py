"""A flood into one chain, faster than its worker takes it, on a server whose limit of signals per
run is low: the chain continues-as-new in time, publishers that meet the limit wait and retry
against the new run, every event is accounted for and every query answered.
And the backlog a worker meets after losing a run under a flood: every signal since the run's
last completed task, thousands, in one activation, taken in well under the deadlock detector's
limit of CPU."""

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, TypeVar

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowContinuedAsNewError, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from coord.infra.payload_store import data_converter
from coord.models.chain.intake import EVENTS_PER_TASK
from coord.models.chain.spec import ChainSpec, ChainState
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.starter import api
from coord.starter.api.chains import SIGNALS_PER_RUN_ENV
from coord.worker import WORKFLOWS, build_worker
from coord.workflows._runtime.interceptor import SurplusArguments
from tests.conftest import start_dev_server
from tests.helpers import eventually

SIGNALS_PER_RUN = 400
EVENTS = 2_000
PUBLISHERS = 10
BACKLOG = 4_000
"""Signals a chain receives while no worker polls: its first activation then holds them all, as
a worker's does when the server failed its task under a flood (more than 100 signals arrived
while it ran) and it replays the run. The soak's hang had 7,988 in one activation: 7.5 s of
handlers, more than the SDK's 2 s deadlock limit, on every attempt, for good (and the worker
could not shut down)."""
DEADLOCK_LIMIT = 2.0
"""Seconds of wall clock the SDK's deadlock detector allows one activation."""
ACTIVATION_CPU = DEADLOCK_LIMIT / 2
"""CPU seconds the backlog's activation may take, at most: half the detector's limit, the other
half a margin for a worker that shares its core. The detector counts wall clock, which on a
loaded machine (a load of 13 on 2 cores) is mostly other processes' time, so the test counts
the activation's own CPU instead: about 0.45 s here for the backlog (0.1 ms a signal, most of it
the SDK's own); the soak's hang took about 1 ms a signal."""
QUERY_TIMEOUT = 60.0
"""Generous: the suite runs on a shared machine; what counts is that every query is answered."""
PUBLISH_TIMEOUT = 300.0
"""For BACKLOG publishes: seconds alone, minutes on a loaded machine, never unbounded."""
WORKER_TIMEOUT = 4 * QUERY_TIMEOUT
"""For the worker's part: its three bounded waits and its shutdown."""
TERMINATED_IN_TASK = WorkflowTaskFailedCause.Name(
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND
)
"""The task a run was taking when the test terminated it: failed by the termination."""
T = TypeVar("T")


@pytest.fixture(scope="module")
async def flood_env() -> AsyncIterator[WorkflowEnvironment]:
    """A server of its own, refusing a run's signals past `SIGNALS_PER_RUN`."""
    env = await start_dev_server(f"history.maximumSignalsPerExecution={SIGNALS_PER_RUN}")
    yield env
    await env.shutdown()


def flood_spec() -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "flood",
            "triggers": ["Ping"],
            "subscriptions": [
                {"agent": "flood_probe", "events": ["Ping"], "filter": "payload.n % 500 == 0"}
            ],
            "max_concurrency": 8,
            "alerts": None,
        }
    )


def flood_registry() -> AgentRegistry:
    registry = AgentRegistry()

    @registry.register("flood_probe")
    async def flood_probe(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {}

    return registry


async def runs(client: Client, workflow_id: str) -> int:
    return len([e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")])


@pytest.mark.soak
async def test_a_flood_faster_than_the_worker_loses_nothing_and_queries_stay_answered(
    flood_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SIGNALS_PER_RUN_ENV, str(SIGNALS_PER_RUN))
    client = flood_env.client
    queue, correlation_id = f"tq-{uuid.uuid4()}", f"flood-{uuid.uuid4().hex[:8]}"
    spec = flood_spec()
    numbers = iter(range(EVENTS))
    published: list[int] = []

    async def publisher() -> None:
        for n in numbers:
            ping = EventEnvelope.new(
                "Ping", "/flood", payload={"n": n}, correlation_id=correlation_id
            )
            await api.publish(client, ping, spec=spec, queue=queue)
            published.append(n)

    # No worker takes the first run's signals: the flood meets the server's limit at once.
    flood = asyncio.gather(*(publisher() for _ in range(PUBLISHERS)))
    while len(published) < SIGNALS_PER_RUN:
        await asyncio.sleep(0.05)
    answered: list[float] = []
    async with build_worker(client, queue, flood_registry()):

        async def query_meanwhile() -> None:
            while not flood.done():
                begin = time.monotonic()
                await asyncio.wait_for(api.chain_state(client, correlation_id), QUERY_TIMEOUT)
                answered.append(time.monotonic() - begin)
                await asyncio.sleep(0.2)

        await asyncio.gather(flood, query_meanwhile())
        await api.close_chain(client, correlation_id)
        state: ChainState = await asyncio.wait_for(
            api.chain_handle(client, correlation_id).result(), 60
        )
        parked = await api.dlq_entries(client, queue=queue)
    assert sorted(published) == list(range(EVENTS))
    assert state.received == state.events_seen + state.duplicates + state.rejected_count
    assert state.events_seen == EVENTS
    assert state.rejected_count == 0 and parked == []
    assert len(answered) > 5
    assert await runs(client, f"chain-{correlation_id}") >= EVENTS // SIGNALS_PER_RUN


async def test_a_close_sent_to_a_full_run_reaches_the_run_it_continues_as(
    flood_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A close meeting a run at the server's limit of signals (the flood test's once did:
    `exceeded workflow execution limit for signal events`) waits, as a publish does, and goes
    to the run the chain continues as."""
    monkeypatch.setenv(SIGNALS_PER_RUN_ENV, str(SIGNALS_PER_RUN))
    client = flood_env.client
    queue, correlation_id = f"tq-{uuid.uuid4()}", f"full-{uuid.uuid4().hex[:8]}"
    await api.start_chain(client, flood_spec(), correlation_id, queue=queue)
    await publish_all(client, correlation_id, SIGNALS_PER_RUN)  # no worker yet: the run is full
    closing = asyncio.create_task(api.close_chain(client, correlation_id))
    async with build_worker(client, queue, flood_registry()):
        await asyncio.wait_for(closing, 60)
        state: ChainState = await asyncio.wait_for(
            api.chain_handle(client, correlation_id).result(), 60
        )
    assert state.events_seen == SIGNALS_PER_RUN
    assert await runs(client, f"chain-{correlation_id}") == 2


async def publish_all(client: Client, correlation_id: str, count: int) -> None:
    numbers = iter(range(count))

    async def publisher() -> None:
        for n in numbers:
            ping = EventEnvelope.new(
                "Ping", "/flood", payload={"n": n}, correlation_id=correlation_id
            )
            await api.publish(client, ping)

    await asyncio.gather(*(publisher() for _ in range(PUBLISHERS)))


async def failed_tasks(client: Client, workflow_id: str) -> list[str]:
    """The causes and messages of every failed workflow task in every run of `workflow_id`."""
    failures = []
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        history = await client.get_workflow_handle(
            workflow_id, run_id=execution.run_id
        ).fetch_history()
        failures += [
            f"{WorkflowTaskFailedCause.Name(event.workflow_task_failed_event_attributes.cause)}: "
            f"{event.workflow_task_failed_event_attributes.failure.message}"
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
    return failures


@pytest.mark.usefixtures("no_deadlock_detector")
async def test_thousands_of_signals_in_one_activation_are_taken_without_a_deadlock(
    client: Client, task_queue: str
) -> None:
    """The run's first activation, all the backlog's signals, takes less CPU than the deadlock
    detector allows (measured on its replay, where no other work shares the thread), and a
    worker then takes the backlog. The worker runs without the detector (`no_deadlock_detector`):
    under load its wall clock would measure the machine, and the CPU is checked already.
    Every wait here has a bound that fails saying what did not happen in time (the suite's
    900 s timeout once killed this test's process without saying where it waited)."""
    correlation_id = f"backlog-{uuid.uuid4().hex[:8]}"
    first = await api.start_chain(client, flood_spec(), correlation_id, queue=task_queue)
    sending = publish_all(client, correlation_id, BACKLOG)
    await within(PUBLISH_TIMEOUT, sending, f"publishing the {BACKLOG} events")
    history = await first.fetch_history()
    cpu = await within(QUERY_TIMEOUT, activation_cpu(history), "replaying the run's first task")
    assert cpu < ACTIVATION_CPU, f"the backlog's activation took {cpu:.2f}s of CPU"
    seen: list[ChainState] = []  # the state that answered the condition
    serving = build_worker(client, task_queue, flood_registry())
    async with stops_within(WORKER_TIMEOUT, "the worker's part, its shutdown included"), serving:
        # Past its history budget, the run takes the backlog in one activation and continues
        # as new, carrying it; the next run takes it in bounded tasks.
        with pytest.raises(WorkflowContinuedAsNewError):
            ended = first.result(follow_runs=False)
            await within(QUERY_TIMEOUT, ended, "the first run continuing as new")

        async def took_a_task() -> bool:
            state = await api.chain_state(client, correlation_id)
            seen[:] = [state]
            return state.events_seen >= EVENTS_PER_TASK

        taking = eventually(took_a_task, timeout=QUERY_TIMEOUT, interval=0.2)
        await within(QUERY_TIMEOUT, taking, f"the next run taking {EVENTS_PER_TASK} events")
    await api.chain_handle(client, correlation_id).terminate("test done")
    failed = await within(QUERY_TIMEOUT, failed_tasks(client, first.id), "reading the histories")
    assert [f for f in failed if not f.startswith(TERMINATED_IN_TASK)] == []
    [state] = seen
    assert state.received == state.events_seen and state.rejected_count == 0


async def activation_cpu(history: WorkflowHistory) -> float:
    """The CPU seconds of replaying the run's history, its first task (the backlog's
    activation): inline on this thread (the replayer's debug mode), so the thread's CPU time
    is the activation's, whatever else the machine runs."""
    replayer = Replayer(
        workflows=list(WORKFLOWS),
        data_converter=data_converter(),
        interceptors=[SurplusArguments()],
        debug_mode=True,
    )
    begin = time.thread_time()
    await replayer.replay_workflow(history)
    return time.thread_time() - begin


@contextlib.asynccontextmanager
async def stops_within(seconds: float, what: str) -> AsyncIterator[None]:
    """A block (its context managers' exits included, such as a worker's shutdown) that fails
    naming `what` when it takes longer than `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise AssertionError(f"{what} took longer than {seconds:g}s") from None


async def within(seconds: float, waited: Awaitable[T], what: str) -> T:
    """`waited`'s result; AssertionError naming `what` when it takes longer than `seconds`."""
    try:
        return await asyncio.wait_for(waited, seconds)
    except TimeoutError:
        raise AssertionError(f"{what} took longer than {seconds:g}s") from None
