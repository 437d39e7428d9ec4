"""Run with tracing into memory, in a process of its own (a tracer provider is set once per
process): the user-story chain on a worker against the given server (and a ledger's query of
it, and the agent monitor's first reading, which the workers' own reads leave untraced), then
one `llm` agent run against a local chat server. Prints one JSON document: the chain's timeline
and every span that ended.

    python -m tests.tracing_probe ADDRESS QUEUE CORRELATION_ID"""

import asyncio
import contextlib
import json
import os
import sys
import uuid
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.testing import ActivityEnvironment

from coord.activities.mesh.run_agent import AgentActivities
from coord.infra.payload_store import data_converter
from coord.infra.tracing import CorrelationSpans, client_interceptors
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentRequest
from coord.models.wire.contract import LEDGER_QUERY, agent_monitor_workflow_id
from coord.starter import api
from coord.worker import build_worker, start_agent_monitor
from tests.agents import registry
from tests.chat_server import chat_server, completion
from tests.helpers import approved, user_story

KEY_ENV = "TRACING_PROBE_KEY"


def as_json(span: ReadableSpan) -> dict[str, Any]:
    context, parent = span.get_span_context(), span.parent
    return {
        "name": span.name,
        "trace_id": format(context.trace_id, "032x") if context else None,
        "span_id": format(context.span_id, "016x") if context else None,
        "parent_id": format(parent.span_id, "016x") if parent else None,
        "attributes": dict(span.attributes or {}),
    }


async def chain(address: str, queue: str, correlation_id: str) -> list[dict[str, Any]]:
    client = await Client.connect(
        address, interceptors=client_interceptors(), data_converter=data_converter()
    )
    async with build_worker(client, queue):
        await start_agent_monitor(client, queue)
        await api.publish(client, approved(correlation_id), spec=user_story(), queue=queue)
        handle = api.chain_handle(client, correlation_id)
        await asyncio.wait_for(handle.result(), 60)
        timeline = await api.chain_timeline(client, correlation_id)
        with contextlib.suppress(WorkflowQueryFailedError):  # a chain answers no ledger query
            await handle.query(LEDGER_QUERY)  # by the name the agent monitor reads ledgers by
        await monitor_read(client.get_workflow_handle(agent_monitor_workflow_id(queue)))
    return [entry.model_dump(mode="json") for entry in timeline]


async def monitor_read(monitor: WorkflowHandle[Any, Any]) -> None:
    """Once the monitor has read the agents' health (then it is stopped: its queue's worker
    goes with the probe)."""
    async with asyncio.timeout(60):
        while not [
            event
            async for event in monitor.fetch_history_events()
            if event.HasField("activity_task_completed_event_attributes")
        ]:
            await asyncio.sleep(0.2)
    await monitor.terminate("tracing probe done")


async def llm_run(correlation_id: str) -> None:
    os.environ[KEY_ENV] = "sk-probe-" + uuid.uuid4().hex
    answer = completion('{"passed": true}')
    assert isinstance(answer.body, dict)
    answer.body["usage"] = {"prompt_tokens": 17, "completion_tokens": 5, "total_tokens": 22}
    with chat_server(answer) as chat:
        agents = registry(
            {"secrets": [KEY_ENV]},
            reviewer={
                "kind": "llm",
                "base_url": chat.url,
                "model": "test-model",
                "api_key_env": KEY_ENV,
                "prompt": "Review $task.",
            },
        )
        event = EventEnvelope.new(
            "ReviewRequested", "/probe", payload={"task": "api"}, correlation_id=correlation_id
        )
        run = AgentRequest.model_validate({"agent": "reviewer", "event": event})
        await ActivityEnvironment().run(AgentActivities(agents).run_agent, run)


async def main(address: str, queue: str, correlation_id: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(CorrelationSpans())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    timeline = await chain(address, queue, correlation_id)
    await llm_run(f"{correlation_id}-llm")
    spans = [as_json(span) for span in exporter.get_finished_spans()]
    print(json.dumps({"timeline": timeline, "spans": spans}, default=str))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
