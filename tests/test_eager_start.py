"""Eager workflow start: a run started by a client whose own worker polls its queue gets its
first workflow task in the start call's answer (the server records that it accepted), and a
remote caller's start is queued as before (a saga's start asks eagerly by default: a remote
caller's client has no worker to take it)."""

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    StartWorkflowInput,
    WorkflowHandle,
)

from coord.starter import api
from coord.testing import Coordination
from tests.conftest import feature_deployment
from tests.helpers import user_story

WITH_WORKER = pytest.mark.usefixtures("coord_worker")


async def started_eagerly(handle: WorkflowHandle[Any, Any]) -> bool:
    """What the server recorded in the run's first event: whether it handed the first
    workflow task to the starter's worker."""
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            return event.workflow_execution_started_event_attributes.eager_execution_accepted
    raise AssertionError(f"{handle.id} has no start event")


@WITH_WORKER
async def test_a_saga_the_fixtures_start_takes_its_first_task_eagerly(coord: Coordination) -> None:
    handle = await coord.start_saga(feature_deployment())
    assert await started_eagerly(handle)
    assert (await api.saga_outcome(handle)).status.value == "completed"


@WITH_WORKER
async def test_a_chain_the_fixtures_start_takes_its_first_task_eagerly(coord: Coordination) -> None:
    correlation_id = await coord.start_chain(user_story())
    assert await started_eagerly(coord.chains[correlation_id])


class StartsSeen(Interceptor):
    """A client interceptor that keeps what each start asked of the server."""

    def __init__(self) -> None:
        self.eager: list[bool] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Recording(next, self)


class _Recording(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, seen: StartsSeen) -> None:
        super().__init__(next)
        self._seen = seen

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        self._seen.eager.append(input.request_eager_start)
        return await super().start_workflow(input)


@WITH_WORKER
async def test_the_apis_saga_start_asks_for_an_eager_start(coord: Coordination) -> None:
    """`start_saga` asks for an eager start by default (what its client sends, seen by a client
    interceptor); the server grants it only to a client whose own connection has a worker on
    the queue (tests/test_saga_latency.py starts one from a connection without), and the saga
    runs either way."""
    seen = StartsSeen()
    caller = Client(
        coord.client.service_client,
        namespace=coord.client.namespace,
        data_converter=coord.client.data_converter,
        interceptors=[seen],
    )
    spec = feature_deployment(saga_id=f"asked-{coord.task_queue}")
    handle = await api.start_saga(caller, spec, queue=coord.task_queue)
    assert seen.eager == [True], "start_saga asks for an eager start"
    assert (await api.saga_outcome(handle)).status.value == "completed"
