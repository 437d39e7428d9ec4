"""What a saga's latency is spared. An eager start: a client whose own worker polls the saga's
queue hands it the first workflow task in the start's answer. The chain look-ahead: the
coordinator worker asks whether a new saga's chain runs as it creates the saga's instance, and
the saga's placements' look-up takes that answer instead of reading the server in the saga's
first workflow task. Bounded, and only for new sagas."""

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from coord import testing
from coord.activities.events.lookback import LOOKAHEAD_FRESH, ChainLookahead
from coord.infra.workflow_runner import UnsandboxedRunner
from coord.models.saga.spec import SagaStatus
from coord.models.wire.contract import AGGREGATOR_WORKFLOW
from coord.starter import api
from coord.worker import WORKFLOWS, build_worker
from tests.conftest import feature_deployment
from tests.helpers import demo_agents_remote, eventually, started_elsewhere, user_story

SIGNALED = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED


async def test_a_saga_starts_eagerly_on_its_client_s_own_worker(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        polled = await api.start_saga(client, feature_deployment(), queue=task_queue, eager=False)
        for started in (handle, polled):
            state = await asyncio.wait_for(api.saga_outcome(started), 60)
            assert state.status == SagaStatus.COMPLETED
    assert await _eagerly_started(handle), "its first task came back with the start's answer"
    assert not await _eagerly_started(polled), "eager=False: its worker polled for it"


async def test_a_client_without_a_worker_starts_a_saga_as_usual(
    client: Client, task_queue: str
) -> None:
    """Asked for by default, an eager start costs a client whose workers run elsewhere
    nothing: the run's first task is queued, and a worker of another client takes it."""
    elsewhere = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=client.data_converter,
    )
    async with build_worker(elsewhere, task_queue):
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
        assert state.status == SagaStatus.COMPLETED
    assert not await _eagerly_started(handle)


async def _eagerly_started(handle: WorkflowHandle[Any, Any]) -> bool:
    async for event in handle.fetch_history_events():
        return event.workflow_execution_started_event_attributes.eager_execution_accepted
    raise AssertionError("no history")


async def test_a_new_saga_s_look_up_takes_the_answer_asked_ahead(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue) as workers:
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    assert workers.lookahead is not None
    assert workers.lookahead.answered_ahead == 1, "asked as its instance was created"
    assert workers.lookahead.waiting == 0, "taken: nothing left waiting"


async def test_a_saga_of_served_agents_takes_the_answer_asked_ahead_and_sends(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its chain runs: the answer asked ahead says so, and each of its events is sent. Started
    as from another process: a start from the worker's own says it (`placed_here`)."""
    started_elsewhere(monkeypatch)
    spec = feature_deployment()
    async with build_worker(client, task_queue, demo_agents_remote()) as workers:
        chain = await api.start_chain(client, user_story(), spec.correlation_id, queue=task_queue)
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
        await chain.terminate("test over")
    assert state.status == SagaStatus.COMPLETED
    assert workers.lookahead is not None and workers.lookahead.answered_ahead == 1
    events = [event async for event in handle.fetch_history_events()]
    signalled = sum(1 for event in events if event.event_type == SIGNALED)
    assert signalled == len(state.events) == 5, "each of its events sent to the running chain"


async def test_the_answer_is_the_one_read_ahead_until_it_lapses(
    client: Client, task_queue: str
) -> None:
    """Read when asked ahead: a chain started afterwards is not seen (as with a chain started
    after the look-up); a lapsed answer is read again."""
    correlation_id = testing.unique("story")
    ahead, lapsing = ChainLookahead(client), ChainLookahead(client, fresh=timedelta(0))
    ahead.ask(correlation_id)
    lapsing.ask(correlation_id)
    assert await ahead.chain_runs(testing.unique("other")) is False, "not asked ahead: read"
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        try:
            assert await ahead.chain_runs(correlation_id) is False, "the answer read ahead"
            assert await lapsing.chain_runs(correlation_id) is True, "lapsed: read again"
            assert await ahead.chain_runs(correlation_id) is True, "taken once, then read"
        finally:
            await chain.terminate("test over")
    assert (ahead.answered_ahead, lapsing.answered_ahead) == (1, 0)


async def test_an_answer_not_taken_is_asked_again(client: Client, task_queue: str) -> None:
    """A question answered and never taken (a replay's, whose look-up is in its history) does
    not answer the next run of the correlation: a chain started in between is seen."""
    correlation_id = testing.unique("story")
    lookahead = ChainLookahead(client)
    lookahead.ask(correlation_id)
    await eventually(lambda: asyncio.sleep(0, not lookahead.asking(correlation_id)))
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        try:
            lookahead.ask(correlation_id)
            assert await lookahead.chain_runs(correlation_id) is True
        finally:
            await chain.terminate("test over")
    assert lookahead.answered_ahead == 1


async def test_only_new_sagas_are_asked_about_ahead(client: Client, task_queue: str) -> None:
    """The instances a worker creates, told to the look-ahead as they are: an older run's
    (a replay, after the worker's cache let it go) and other workflows' are not asked about."""
    infos: list[workflow.Info] = []
    spec = feature_deployment()
    async with (
        Worker(
            client,
            task_queue=task_queue,
            workflows=list(WORKFLOWS),
            unsandboxed_workflow_runner=UnsandboxedRunner(infos.append),
        ),
        build_worker(client, task_queue, workflows=False),
    ):
        handle = await api.start_saga(client, spec, queue=task_queue)
        await asyncio.wait_for(api.saga_outcome(handle), 60)
    (info,) = [told for told in infos if told.workflow_id == handle.id]
    lookahead = ChainLookahead(client)
    older = datetime.now(UTC) - LOOKAHEAD_FRESH - timedelta(seconds=1)
    lookahead.instance_created(replace(info, start_time=older))
    lookahead.instance_created(replace(info, workflow_type=AGGREGATOR_WORKFLOW))
    assert lookahead.waiting == 0
    lookahead.instance_created(replace(info, start_time=datetime.now(UTC)))
    assert lookahead.waiting == 1, "a new saga's chain is asked about"
    assert await lookahead.chain_runs(spec.correlation_id) is False
    assert lookahead.answered_ahead == 1


async def test_questions_asked_ahead_are_bounded(client: Client) -> None:
    """With `most` waiting, no more are asked ahead; one asked twice is asked once."""
    lookahead = ChainLookahead(client, most=3)
    names = [testing.unique("bounded") for _ in range(5)]
    for name in [*names, names[0]]:
        lookahead.ask(name)
    assert lookahead.waiting == 3
    assert [await lookahead.chain_runs(name) for name in names] == [False] * 5
    assert lookahead.answered_ahead == 3, "the first three, asked ahead; the others read then"
    assert lookahead.waiting == 0


def test_outside_an_event_loop_nothing_is_asked_ahead(client: Client) -> None:
    """Told of an instance where no loop runs (a replay driven by hand), the look-ahead asks
    nothing rather than failing the instance's creation."""
    lookahead = ChainLookahead(client)
    lookahead.ask(testing.unique("no-loop"))
    assert lookahead.waiting == 0
