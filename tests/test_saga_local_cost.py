"""What a saga of local agents costs the worker's process, counted rather than timed: it runs
outside the workflow sandbox, which would import its module afresh for every saga; the SDK's
many calls for a payload converter (every run, activation, command and activity derives a data
converter) all get the process's one (`coord.infra.type_adapters`); and an agent run on a worker
without a metrics endpoint builds nothing for its metrics: it neither counts itself in flight
nor looks up its kind (`coord.activities.metrics.agent_run`)."""

import asyncio
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.converter import CompositePayloadConverter, WorkflowSerializationContext
from temporalio.worker import Worker

from coord.activities import metrics
from coord.infra.payload_store import data_converter
from coord.infra.type_adapters import SharedAdapterPayloadConverter
from coord.infra.workflow_runner import UnsandboxedRunner
from coord.models.mesh.agents import AgentRegistry, AgentRequest
from coord.models.saga.spec import SagaStatus
from coord.models.wire.contract import SAGA_WORKFLOW
from coord.starter import api
from coord.worker import WORKFLOWS, build_worker
from tests.conftest import feature_deployment


class Calls:
    """How often the wrapped function was called (with arguments that `counts`)."""

    def __init__(self) -> None:
        self.count = 0


async def _local_saga(client: Client, task_queue: str) -> None:
    async with build_worker(client, task_queue):
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED


def test_every_workflow_runs_outside_the_sandbox() -> None:
    """None of the worker's workflows is handed to the SDK's sandbox."""
    sandboxed = [cls for cls in WORKFLOWS if workflow._Definition.must_from_class(cls).sandboxed]
    assert not sandboxed


async def test_a_saga_runs_outside_the_sandbox(client: Client, task_queue: str) -> None:
    """The unsandboxed runner is told of every instance it creates: the saga's is one."""
    unsandboxed: list[workflow.Info] = []
    async with (
        Worker(
            client,
            task_queue=task_queue,
            workflows=list(WORKFLOWS),
            unsandboxed_workflow_runner=UnsandboxedRunner(unsandboxed.append),
        ),
        build_worker(client, task_queue, workflows=False),
    ):
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    assert [info.workflow_type for info in unsandboxed if info.workflow_id == handle.id] == [
        SAGA_WORKFLOW
    ]


def test_the_project_converter_is_one_instance_which_takes_no_context() -> None:
    """Sharing it is sound only while none of its encodings takes a serialization context:
    the SDK would then build a new one for a context and set its encodings on it."""
    converter = SharedAdapterPayloadConverter()
    assert SharedAdapterPayloadConverter() is converter
    context = WorkflowSerializationContext(namespace="default", workflow_id="w")
    assert converter.with_context(context) is converter
    derived = data_converter().with_context(context).payload_converter
    assert derived.to_payloads([{"a": 1}])[0].data == b'{"a":1}'


async def test_a_local_saga_builds_no_payload_converter(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = Calls()
    composite = CompositePayloadConverter.__init__

    def counting(self: CompositePayloadConverter, *converters: Any) -> None:
        if isinstance(self, SharedAdapterPayloadConverter):
            built.count += 1
        composite(self, *converters)

    SharedAdapterPayloadConverter()  # the process's one, made before the saga if not yet
    monkeypatch.setattr(CompositePayloadConverter, "__init__", counting)
    await _local_saga(client, task_queue)
    assert built.count == 0, f"{built.count} payload converters built for one saga"


async def test_a_local_run_without_a_metrics_endpoint_builds_nothing_for_its_metrics(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up, moved = Calls(), Calls()
    kind_of, in_flight = metrics.kind_of, metrics.IN_FLIGHT.moved

    def counting_kind(request: AgentRequest, registry: AgentRegistry) -> str:
        looked_up.count += 1
        return kind_of(request, registry)

    def counting_moves(agent: str, by: int) -> int:
        moved.count += 1
        return in_flight(agent, by)

    monkeypatch.setattr(metrics, "kind_of", counting_kind)
    monkeypatch.setattr(metrics.IN_FLIGHT, "moved", counting_moves)
    await _local_saga(client, task_queue)
    assert (looked_up.count, moved.count) == (0, 0)
