"""Eager workflow start: a run started by a client whose own worker polls its queue gets its
first workflow task in the start call's answer (the server records that it accepted), and a
remote caller's start (the API's default) is queued as before."""

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

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


@WITH_WORKER
async def test_the_apis_default_start_is_queued(coord: Coordination) -> None:
    """A remote caller has no worker to hand the task to: the API asks for no eager start."""
    spec = feature_deployment(saga_id=f"queued-{coord.task_queue}")
    handle = await api.start_saga(coord.client, spec, queue=coord.task_queue)
    assert not await started_eagerly(handle)
    assert (await api.saga_outcome(handle)).status.value == "completed"
