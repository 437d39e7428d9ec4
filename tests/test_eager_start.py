"""Eager workflow start: a run started by a client whose own worker polls its queue gets its
first workflow task in the start call's answer (the server records that it accepted), and a
remote caller's start (the API's default) is queued as before."""

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
async def test_the_apis_default_start_is_queued(coord: Coordination) -> None:
    """A remote caller has no worker to hand the task to: the API asks for no eager start
    (what its client sends, seen by a client interceptor: this caller's client has no worker,
    so the server would record the start as queued whatever it asked)."""
    seen = StartsSeen()
    remote = Client(
        coord.client.service_client,
        namespace=coord.client.namespace,
        data_converter=coord.client.data_converter,
        interceptors=[seen],
    )
    spec = feature_deployment(saga_id=f"queued-{coord.task_queue}")
    handle = await api.start_saga(remote, spec, queue=coord.task_queue)
    assert seen.eager == [False], "the start asked for no eager start"
    assert not await started_eagerly(handle)
    assert (await api.saga_outcome(handle)).status.value == "completed"
