"""The worker's Prometheus endpoint (`coord worker --metrics-port`), scraped over HTTP after a known
scenario run by a `coord worker` process on the session's dev server: the user-story
chain with one agent run dead-lettered and replayed, the phase-1 aggregator, the Feature
Deployment saga compensated, the coordinator-mode plan through a review round, a vote with an
`llm` voter, and an event that does not decode. Every metric of the
catalogue is there with the values the scenario implies, beside the SDK's own."""

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client
from temporalio.runtime import MetricBuffer, MetricBufferDurationFormat, Runtime, TelemetryConfig
from temporalio.worker import Replayer

from coord.infra.payload_store import data_converter
from coord.models.dlq.letter import DlqSelection
from coord.models.events.envelope import EventEnvelope
from coord.models.ops.metrics import METRICS, exported_names
from coord.models.plan.spec import PlanSpec, PlanStatus
from coord.models.saga.spec import SagaStatus
from coord.models.vote.spec import VoteSpec, VoteStatus
from coord.models.wire.specs import load_spec, read_document
from coord.starter import api
from coord.starter.api.aggregators import publish_to_aggregator
from coord.starter.demo import plan_run
from coord.worker import WORKFLOWS, build_worker, default_registry
from tests.chat_server import chat_server, completion
from tests.conftest import ROOT, feature_deployment
from tests.dashboards import SDK_METRICS, expressions
from tests.helpers import (
    API,
    TEST_PLAN,
    WIREFRAME,
    approved,
    eventually,
    failing_at,
    phase1,
    user_story,
)
from tests.workers import COORD, run, server_env, stop_process_group, worker_process

pytestmark = pytest.mark.slow

EXAMPLES = ROOT / "examples"
KEY_ENV = "COORD_TEST_METRICS_LLM_KEY"
Series = dict[str, list[tuple[dict[str, str], float]]]
"""Series name -> (labels, value) of each sample."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    queue: str
    """The coordinator queue of the worker serving it."""

    def scrape(self) -> Series:
        with urllib.request.urlopen(self.url, timeout=10) as answer:
            text = answer.read().decode()
        return parse(text)


def parse(text: str) -> Series:
    """The exposition's series, by the names Prometheus shows. prometheus_client's parser names
    a counter's samples `<name>_total` as OpenMetrics would, whatever the exposition says (the
    SDK's counters have no such suffix): a counter's own name is its `# TYPE` line's."""
    declared = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    series: Series = {}
    for family, name in zip(text_string_to_metric_families(text), declared, strict=True):
        for sample in family.samples:
            shown = name if family.type == "counter" else sample.name
            series.setdefault(shown, []).append((sample.labels, sample.value))
    return series

    def value(self, name: str, **labels: str) -> float:
        """The sum of `name`'s samples with these labels (over the SDK's own: namespace, task
        queue, workflow or activity type)."""
        return total(self.scrape(), name, **labels)


def total(series: Series, name: str, **labels: str) -> float:
    return sum(
        value
        for sample_labels, value in series.get(name, [])
        if all(sample_labels.get(key) == wanted for key, wanted in labels.items())
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def agents_file(folder: Path, chat_url: str) -> Path:
    """Two of the example's shell voters, and an `llm` voter with a pool of its own."""
    voters = read_document(EXAMPLES / "vote-agents.yaml")["agents"]
    llm_voter = {
        "kind": "llm",
        "base_url": chat_url,
        "model": "test-model",
        "api_key_env": KEY_ENV,
        "prompt": "Approve this release? $payload",
        "max_concurrent": 2,
    }
    declared = {
        "worker": {"secrets": [KEY_ENV]},
        "agents": {
            "qa-voter": voters["qa-voter"],
            "security-voter": voters["security-voter"],
            "llm-voter": llm_voter,
        },
    }
    path = folder / "agents.yaml"
    path.write_text(yaml.safe_dump(declared))
    return path


async def chain_with_a_replayed_dead_letter(client: Client, queue: str) -> None:
    """The chain, ux-designer failing for good on the first try (parked), replayed with
    a fixed payload: the chain then runs to TestingCompleted. One event sent to the chain does
    not decode (refused, parked)."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    chain = await api.start_chain(client, user_story(), correlation_id, queue=queue)
    inject = {"fail": ["ux-designer"], "error_type": "invalid_payload"}
    await api.publish(client, approved(correlation_id, story="reset", inject=inject))
    await chain.signal("event", {"not": "an event"})
    selection = DlqSelection(correlation_id=correlation_id, failure_type="invalid_payload")

    async def parked() -> bool:
        return len(await api.dlq_entries(client, selection, queue=queue)) == 1

    await eventually(parked, timeout=60)
    [entry] = await api.dlq_entries(client, selection, queue=queue)
    await api.dlq_replay(client, entry.entry_id, {"story": "reset"})
    await asyncio.wait_for(chain.result(), 60)


async def aggregator_fed_directly(client: Client, queue: str) -> None:
    """The phase-1 aggregator, its three events addressed to it (no chain: nothing
    else arrives in a chain's last workflow task, see docs/metrics.md "Counted once")."""
    spec = phase1()
    for kind, source in (API, WIREFRAME, TEST_PLAN):
        envelope = EventEnvelope.new(kind, source, topic="project.reviews")
        workflow_id = await publish_to_aggregator(client, envelope, spec, queue=queue)
    await asyncio.wait_for(client.get_workflow_handle(workflow_id).result(), 60)


async def compensated_saga(client: Client, queue: str) -> None:
    """DeployToProduction fails every attempt: its first in the batch of steps run ahead, its
    second a local activity of its own, which the SDK counts as failed."""
    spec = failing_at("DeployToProduction", error_type="service_unavailable")
    state = await api.saga_outcome(await api.start_saga(client, spec, queue=queue))
    assert state.status == SagaStatus.COMPENSATED


async def plan_through_a_review_round(client: Client, queue: str) -> None:
    """The demo plan, its reviewer rejecting once, and code-analyzer (an activity task: the demo
    plan's workers are declared remote) failing its first attempt: the run's other agents are
    local activities, whose failures the SDK counts apart."""
    example = load_spec(PlanSpec, EXAMPLES / "plan-seed003.yaml")
    inject = {"reject": ["reviewer"], "flaky": {"code-analyzer": 1}}
    spec = plan_run(example, f"plan-{uuid.uuid4().hex[:8]}", inject)
    state = await api.plan_outcome(await api.start_plan(client, spec, queue=queue))
    assert state.status == PlanStatus.COMPLETED


async def vote_with_an_llm_voter(client: Client, queue: str) -> None:
    """qa approves, security rejects (a new dependency): the llm voter's approval decides."""
    document = read_document(EXAMPLES / "release-vote.yaml")
    document.update(
        vote_id=f"vote-{uuid.uuid4().hex[:8]}", voters=["qa-voter", "security-voter", "llm-voter"]
    )
    spec = VoteSpec.model_validate(document)
    state = await api.vote_outcome(await api.start_vote(client, spec, queue=queue))
    assert state.status == VoteStatus.DECIDED


@pytest.fixture(scope="module")
async def endpoint(
    dev_env: Any, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Endpoint]:
    client: Client = dev_env.client
    queue = f"tq-{uuid.uuid4()}"
    folder = tmp_path_factory.mktemp("metrics")
    port = free_port()
    os.environ[KEY_ENV] = "test-key"
    answer = completion('{"approve": true, "reason": "the notes are complete"}')
    with chat_server(by_model={"test-model": [answer]}) as chat:
        args = ("--agents", str(agents_file(folder, chat.url)), "--metrics-port", str(port))
        async with worker_process(client, queue, folder / "worker.log", *args):
            await asyncio.gather(
                chain_with_a_replayed_dead_letter(client, queue),
                aggregator_fed_directly(client, queue),
                compensated_saga(client, queue),
                plan_through_a_review_round(client, queue),
                vote_with_an_llm_voter(client, queue),
            )
            yield Endpoint(f"http://127.0.0.1:{port}/metrics", queue)
    del os.environ[KEY_ENV]


EXPECTED: tuple[tuple[str, Mapping[str, str], float], ...] = (
    # the chain: its trigger taken in, and again as the dead letter's replay (a new event)
    ("coord_events_published_total", {"topic": "project.tasks", "type": "UserStoryApproved"}, 2),
    ("coord_events_consumed_total", {"topic": "project.tasks", "type": "UserStoryApproved"}, 2),
    ("coord_events_published_total", {"type": "WireframeCompleted"}, 2),
    ("coord_events_consumed_total", {"type": "WireframeCompleted"}, 2),
    ("coord_events_published_total", {"topic": "project.reviews"}, 3),
    ("coord_events_consumed_total", {"topic": "project.reviews"}, 3),
    ("coord_event_latency_seconds_count", {"topic": "project.reviews"}, 3),
    ("coord_events_published_total", {"type": "TestingCompleted"}, 1),
    ("coord_events_rejected_total", {"topic": "none", "type": "invalid"}, 1),
    (
        "coord_events_dead_lettered_total",
        {"topic": "project.tasks", "type": "UserStoryApproved"},
        1,
    ),
    ("coord_dlq_parked_total", {"failure_type": "invalid_payload"}, 1),
    ("coord_dlq_parked_total", {"failure_type": "invalid_envelope"}, 1),
    ("coord_dlq_replayed_total", {"failure_type": "invalid_payload", "outcome": "delivered"}, 1),
    ("coord_agent_runs_total", {"agent": "ux-designer", "outcome": "invalid_payload"}, 1),
    ("coord_agent_runs_total", {"agent": "ux-designer", "outcome": "succeeded"}, 1),
    ("coord_agent_runs_total", {"agent": "backend-architect", "kind": "python"}, 1),
    ("coord_chain_runs_queued_total", {}, 8),
    ("coord_chain_runs_dispatched_total", {}, 8),
    ("coord_chain_runs_queued_total", {"agent": "ux-designer"}, 2),
    ("coord_chain_runs_dispatched_total", {"agent": "test-engineer"}, 2),
    ("coord_agent_events_published_total", {"agent": "ux-designer"}, 4),
    ("coord_agent_events_published_total", {}, 16),
    ("coord_aggregators_total", {"outcome": "completed"}, 1),
    # the saga: the step failing both its attempts, its two compensations
    ("coord_sagas_total", {"outcome": "compensated"}, 1),
    ("coord_saga_compensations_total", {"agent": "RollbackProduction"}, 1),
    ("coord_saga_compensations_total", {"agent": "RemoveFromStaging"}, 1),
    (
        "coord_agent_runs_total",
        {"agent": "DeployToProduction", "outcome": "service_unavailable"},
        2,
    ),
    ("coord_agent_run_duration_seconds_count", {"agent": "DeployToProduction"}, 2),
    # the plan, the vote and its llm voter
    ("coord_plans_total", {"outcome": "completed"}, 1),
    ("coord_plan_tasks_total", {"state": "succeeded"}, 6),
    ("coord_votes_total", {"outcome": "decided"}, 1),
    ("coord_agent_runs_total", {"agent": "llm-voter", "kind": "llm", "outcome": "succeeded"}, 1),
    (
        "coord_llm_tokens_total",
        {"agent": "llm-voter", "model": "test-model", "direction": "input"},
        12,
    ),
    ("coord_llm_tokens_total", {"agent": "llm-voter", "direction": "output"}, 5),
    # gauges once everything has ended
    ("coord_agent_runs_in_flight", {}, 0),
    ("coord_pool_in_use", {"agent": "llm-voter"}, 0),
    ("coord_breaker_state", {}, 0),
)


async def settled(endpoint: Endpoint, check: Callable[[Series], bool]) -> Series:
    """The endpoint once `check` holds: the last facts of a run (a gauge set as an activity
    returns) may land a moment after the client saw the run end."""
    series: Series = {}

    async def holds() -> bool:
        nonlocal series
        series = await asyncio.to_thread(endpoint.scrape)
        return check(series)

    with contextlib.suppress(TimeoutError):  # the assertions then show what differs
        await eventually(holds, timeout=30, interval=0.5)
    return series


async def test_the_scenario_s_values(endpoint: Endpoint) -> None:
    def expected(series: Series) -> bool:
        return all(total(series, name, **labels) == want for name, labels, want in EXPECTED)

    series = await settled(endpoint, expected)
    got = [(name, dict(labels), total(series, name, **labels)) for name, labels, _ in EXPECTED]
    assert got == [(name, dict(labels), want) for name, labels, want in EXPECTED]


async def test_every_metric_of_the_catalogue_is_at_the_endpoint(endpoint: Endpoint) -> None:
    series = await settled(endpoint, lambda series: exported_names() <= set(series))
    assert sorted(exported_names() - set(series)) == []


async def test_each_metric_has_the_catalogue_s_labels(endpoint: Endpoint) -> None:
    """The catalogue's labels, besides those the SDK adds (its service, namespace, task queue,
    workflow or activity type); a histogram's buckets add `le`."""
    series = endpoint.scrape()
    sdk_labels = {"service_name", "namespace", "task_queue", "workflow_type", "activity_type"}
    for spec in METRICS:
        for name in spec.exported():
            extra = {"le"} if name.endswith("_bucket") else set()
            seen = {frozenset(set(labels) - sdk_labels - extra) for labels, _ in series[name]}
            assert seen == {frozenset(spec.labels)}, name


async def test_the_sdk_metrics_the_dashboards_query_are_at_the_endpoint(
    endpoint: Endpoint,
) -> None:
    series = await settled(endpoint, lambda series: set(series) >= SDK_METRICS)
    assert sorted(SDK_METRICS - set(series)) == []


async def test_durations_are_in_seconds(endpoint: Endpoint) -> None:
    """The SDK's latencies too: a workflow's end-to-end latency is seconds, not milliseconds."""
    series = endpoint.scrape()
    runs = total(series, "temporal_workflow_endtoend_latency_count")
    seconds = total(series, "temporal_workflow_endtoend_latency_sum")
    assert runs > 0
    assert 0 < seconds / runs < 60


async def test_a_taken_port_is_refused_in_one_line_naming_the_option(
    dev_env: Any, task_queue: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
            "COORD_TASK_QUEUE": task_queue,
            "COORD_METRICS_PORT": str(port),
        }
        code, _, err = await run(COORD, "worker", env=env)
    assert code == 1
    assert err.strip().splitlines() == [
        f"error: --metrics-port {port}: cannot serve metrics at http://127.0.0.1:{port}/metrics: "
        "Failed starting Prometheus exporter: Address already in use (os error 98)"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics-port", "0"], "--metrics-port: 0 is not a port (1 to 65535)"),
        (
            ["--metrics-port", "9464", "--metrics-bind", "localhost"],
            "--metrics-bind: 'localhost' is not an IP address (127.0.0.1 for this host only, "
            "0.0.0.0 for every interface)",
        ),
        (
            ["--metrics-bind", "0.0.0.0"],
            "--metrics-bind: no port to serve metrics on (--metrics-port)",
        ),
    ],
)
async def test_bad_metrics_options_are_refused_before_connecting(
    args: list[str], message: str
) -> None:
    code, _, err = await run(COORD, "worker", *args, env={"TEMPORAL_ADDRESS": "127.0.0.1:9"})
    assert (code, err.strip()) == (1, f"error: {message}")


@pytest.fixture(scope="module")
async def prometheus(
    endpoint: Endpoint, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A real Prometheus server scraping the scenario's worker every second, once it holds two
    samples of its series."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus on PATH: `make test` installs Debian's package when run as root")
    folder = tmp_path_factory.mktemp("prometheus")
    target = endpoint.url.removeprefix("http://").removesuffix("/metrics")
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "coord-worker", "static_configs": [{"targets": [target]}]}],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{free_port()}"
    argv = [
        binary,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--web.listen-address={url.removeprefix('http://')}",
        f"--storage.tsdb.path={folder / 'data'}",
    ]
    with (folder / "prometheus.log").open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    try:

        async def sampled_twice() -> bool:
            assert process.poll() is None, (folder / "prometheus.log").read_text()
            try:
                answer = await asyncio.to_thread(
                    query, url, "count_over_time(coord_sagas_total[1m]) >= 2"
                )
            except OSError:
                return False
            return bool(answer["data"]["result"])

        await eventually(sampled_twice, timeout=60, interval=0.5)
        yield url
    finally:
        stop_process_group(process)


def query(prometheus: str, expression: str) -> dict[str, Any]:
    address = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(address, timeout=10) as answer:
        result: dict[str, Any] = json.loads(answer.read())
    return result


async def test_every_dashboard_query_runs_on_prometheus_over_the_worker_s_series(
    prometheus: str,
) -> None:
    """Each query of both Grafana dashboards, sent to a real Prometheus scraping the worker:
    it parses and evaluates, and finds the series it is about (the names and labels it uses
    are the worker's)."""
    empty = []
    for expression in expressions():
        answer = await asyncio.to_thread(query, prometheus, expression)
        assert answer["status"] == "success", (expression, answer)
        if not answer["data"]["result"]:
            empty.append(expression)
    assert empty == []


async def test_a_replay_records_nothing_again(dev_env: Any, task_queue: str) -> None:
    """A saga run live on a worker whose runtime buffers its metrics records its facts; its
    history replayed on that runtime (a worker restarting, or taking the run over) records
    none of them again."""
    buffer = MetricBuffer(10_000, MetricBufferDurationFormat.SECONDS)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    config = dev_env.client.service_client.config
    client = await Client.connect(
        config.target_host,
        namespace=dev_env.client.namespace,
        runtime=runtime,
        data_converter=dev_env.client.data_converter,
    )
    async with build_worker(client, task_queue, default_registry(demo_agents=True)):
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        assert (await api.saga_outcome(handle)).status == SagaStatus.COMPLETED

    def recorded() -> list[str]:
        return [
            u.metric.name for u in buffer.retrieve_updates() if u.metric.name.startswith("coord_")
        ]

    assert "coord_sagas_total" in recorded()
    history = await handle.fetch_history()
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=data_converter(), runtime=runtime)
    await replayer.replay_workflow(history)
    assert recorded() == []


async def test_coord_dashboard_reads_the_worker_s_endpoint(
    endpoint: Endpoint, dev_env: Any
) -> None:
    """`coord dashboard --once` on the worker's endpoint shows the scenario's figures: each
    worker's totals since it started."""
    series = endpoint.scrape()
    published = total(series, "coord_events_published_total")
    reviews = total(series, "coord_events_published_total", topic="project.reviews")
    env = {**server_env(dev_env, endpoint.queue), "COORD_METRICS_ENDPOINTS": endpoint.url}
    code, out, err = await run(COORD, "dashboard", "--once", env=env)
    assert code == 0, err
    lines = [line.strip(" │") for line in out.splitlines()]
    [shown] = [line for line in lines if line.startswith("Events Published:")]
    assert shown.endswith(f" {published:.0f}"), out
    assert any(line.startswith(f"project.reviews | {reviews:.0f} ") for line in lines), out
