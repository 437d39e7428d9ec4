"""One trace per correlation: the user-story chain traced into memory (in a process of
its own, `tests/tracing_probe.py`) against the real dev server, and an `llm` agent's run with the
GenAI semantic conventions."""

import asyncio
import json
import logging
import sys
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.activities.kinds.demo import register_demo_agents
from coord.infra.logs import get_logger
from coord.infra.run_context import BATCHED_RUN_SPAN
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.wire.contract import aggregator_workflow_id
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import eventually
from tests.workers import COORD, run, server_env

ROOT = Path(__file__).resolve().parent.parent


async def traced(client: Client, task_queue: str, correlation_id: str) -> dict[str, Any]:
    probe = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.tracing_probe",
        client.service_client.config.target_host,
        task_queue,
        correlation_id,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(probe.communicate(), 180)
    assert probe.returncode == 0, err.decode()[-3000:]
    document: dict[str, Any] = json.loads(out)
    return document


@pytest.fixture(scope="module")
async def probe(dev_env: WorkflowEnvironment) -> tuple[str, dict[str, Any]]:
    correlation_id = f"traced-{uuid.uuid4().hex[:8]}"
    return correlation_id, await traced(dev_env.client, f"tq-{uuid.uuid4()}", correlation_id)


async def test_the_seed_chain_is_one_trace_whose_spans_mirror_its_causation_tree(
    probe: tuple[str, dict[str, Any]],
) -> None:
    correlation_id, document = probe
    timeline, spans = document["timeline"], document["spans"]
    ours = [s for s in spans if s["attributes"].get("coord.correlation_id") == correlation_id]
    assert {s["trace_id"] for s in ours} and len({s["trace_id"] for s in ours}) == 1
    (trace_id,) = {s["trace_id"] for s in ours}
    # every span of the correlation's workflows and runs is in its trace, and says whose it is
    in_trace = [s for s in spans if s["trace_id"] == trace_id]
    assert all(s["attributes"].get("coord.correlation_id") == correlation_id for s in in_trace)
    names = {s["name"].split(":")[0] for s in in_trace}
    assert {"RunWorkflow", "HandleSignal", "StartActivity", "RunActivity"} <= names
    assert names & {"StartWorkflow", "SignalWithStartWorkflow"}
    # the publish carries the first event; each agent run carries the event that caused it
    first = timeline[0]
    publish = [s for s in in_trace if s["attributes"].get("coord.event_id") == first["event_id"]]
    assert any("StartWorkflow" in s["name"] or "SignalWorkflow" in s["name"] for s in publish)
    runs_by_event: dict[str, set[str]] = defaultdict(set)
    for span in in_trace:
        if span["name"] in {"RunActivity:run_agent", BATCHED_RUN_SPAN}:
            attributes = span["attributes"]
            runs_by_event[attributes["coord.event_id"]].add(attributes["coord.agent"])
            assert attributes["coord.event_type"] and attributes["coord.correlation_id"]
    started = [e for e in timeline if e["event"].endswith("Started")]
    assert started
    for entry in started:
        assert entry["agent"].lstrip("/") in runs_by_event[entry["causation_id"]], entry
    # the spans are one tree: every parent named is a span of the trace, but for the
    # correlation's own root
    ids = {s["span_id"] for s in in_trace}
    roots = {s["parent_id"] for s in in_trace if s["parent_id"] not in ids}
    assert len(roots) == 1


async def test_the_workers_own_reads_are_not_traced(probe: tuple[str, dict[str, Any]]) -> None:
    """The agent monitor reads each ledger every few seconds, whatever runs: traced, an idle
    worker sent a steady stream of spans of no correlation."""
    _, document = probe
    assert [s["name"] for s in document["spans"] if s["name"].endswith(":ledger")] == []
    assert any(s["name"] == "QueryWorkflow:timeline" for s in document["spans"])


async def test_the_agent_monitor_is_not_traced(probe: tuple[str, dict[str, Any]]) -> None:
    """Its reading every few seconds, whatever runs, was one endless trace of no correlation
    under `StartWorkflow:AgentMonitor`."""
    _, document = probe
    names = [s["name"] for s in document["spans"]]
    assert [n for n in names if "AgentMonitor" in n or "agent_health" in n] == []
    assert "RunWorkflow:ReactiveChain" in names


async def test_an_llm_run_is_a_genai_span_with_its_tokens(
    probe: tuple[str, dict[str, Any]],
) -> None:
    correlation_id, document = probe
    spans = document["spans"]
    (chat,) = [s for s in spans if s["name"] == "chat test-model"]
    assert chat["attributes"] | {"gen_ai.response.model": "-"} == chat["attributes"] | {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "test-model",
        "gen_ai.conversation.id": f"{correlation_id}-llm",
        "coord.correlation_id": f"{correlation_id}-llm",
        "gen_ai.usage.input_tokens": 17,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.model": "-",
    }


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, dict):
            self.lines.append(record.msg)


async def test_an_agents_log_lines_carry_its_runs_ids(client: Client, task_queue: str) -> None:
    """What an agent logs while it runs names the run's correlation, causation and event ids,
    its workflow and the agent (JSON fields of the worker's log)."""
    agents = register_demo_agents(AgentRegistry())
    log = get_logger("test.agent")

    @agents.register("chatty")
    async def chatty(event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
        log.warning("working on it")
        return {}

    spec = ChainSpec.model_validate(
        {
            "name": "chatty",
            "triggers": ["Ping"],
            "subscriptions": [{"agent": "chatty", "events": ["Ping"]}],
        }
    )
    captured = Captured()
    logging.getLogger("test.agent").addHandler(captured)
    correlation_id = f"logged-{uuid.uuid4().hex[:8]}"
    ping = EventEnvelope.new("Ping", "/test", correlation_id=correlation_id)
    try:
        async with build_worker(client, task_queue, agents):
            await api.publish(client, ping, spec=spec, queue=task_queue)
            await eventually(lambda: _logged(captured))
    finally:
        logging.getLogger("test.agent").removeHandler(captured)
    (line,) = [line for line in captured.lines if line.get("event") == "working on it"]
    assert line | {"workflow_id": "-"} == line | {
        "correlation_id": correlation_id,
        "event_id": ping.event.id,
        "agent": "chatty",
        "workflow_id": "-",
    }
    assert line["workflow_id"].startswith("chain-")


async def _logged(captured: Captured) -> bool:
    return bool(captured.lines)


@asynccontextmanager
async def otlp_collector() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An OTLP/HTTP endpoint that keeps every span sent to it (name, trace id, attributes)."""
    spans: list[dict[str, Any]] = []

    async def traces(request: web.Request) -> web.Response:
        sent = ExportTraceServiceRequest.FromString(await request.read())
        for resource in sent.resource_spans:
            for scope in resource.scope_spans:
                spans.extend(
                    {
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "attributes": {a.key: a.value.string_value for a in span.attributes},
                    }
                    for span in scope.spans
                )
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", spans
    finally:
        await runner.cleanup()


async def test_the_clis_reads_and_attach_are_spans_of_the_correlation(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """`coord events C --follow` polled in a new trace each second, and `coord aggregate
    start`'s attach to the chain was a trace of its own: neither said whose it was."""
    correlation_id = f"cli-traced-{uuid.uuid4().hex[:8]}"
    spec = ChainSpec.model_validate(
        {
            "name": "idle",
            "triggers": ["Ping", "Pong"],
            "subscriptions": [{"agent": "RunTests", "events": ["Pong"]}],
        }
    )
    ping = EventEnvelope.new("Ping", "/test", correlation_id=correlation_id)
    async with otlp_collector() as (endpoint, spans):
        env = {**server_env(dev_env, task_queue), "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        async with build_worker(client, task_queue, register_demo_agents(AgentRegistry())):
            await api.publish(client, ping, spec=spec, queue=task_queue)
            aggregator = ("aggregate", "start", str(ROOT / "examples/phase1-aggregator.yaml"))
            code, _, err = await run(
                COORD, *aggregator, "--correlation-id", correlation_id, env=env
            )
            assert code == 0, err
            follow = asyncio.create_task(run(COORD, "events", correlation_id, "--follow", env=env))
            await asyncio.sleep(3)  # two polls at least
            # --follow lasts while anything of the correlation runs: the chain and the aggregator.
            await api.chain_handle(client, correlation_id).terminate("followed")
            listener = aggregator_workflow_id("phase1-complete", correlation_id)
            await client.get_workflow_handle(listener).terminate("followed")
            code, _, err = await follow
            assert code == 0, err
    names = [span["name"] for span in spans]
    assert "SignalWorkflow:attach" in names and names.count("QueryWorkflow:timeline") >= 3
    assert {span["attributes"].get("coord.correlation_id") for span in spans} == {correlation_id}
    assert len({span["trace_id"] for span in spans}) == 1
