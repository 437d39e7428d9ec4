"""`coord dashboard` against real parts: two "workers" serving Prometheus exposition text over
HTTP (built with prometheus_client from the metric catalogue), the session's dev server with a
saga completed, one compensated and dead letters parked, the command run as a user runs it,
and its web page rendered by headless Chromium."""

import asyncio
import os
import re
import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.infra.dead_letters import park_dead_letter
from coord.models.ops.metrics import METRICS
from coord.models.saga.spec import SagaStatus
from coord.starter import api
from coord.starter.dashboard.metrics import EndpointsSource, PrometheusSource
from coord.starter.dashboard.temporal import TemporalReader
from coord.worker import build_worker, default_registry
from tests.conftest import feature_deployment
from tests.helpers import eventually, failing_at, letter
from tests.workers import COORD, run, server_env, stop_process_group

Metric = Counter | Gauge | Histogram


class MetricsWorker:
    """A real HTTP endpoint exposing the catalogue's metrics, as a worker's would."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.metrics: dict[str, Metric] = {}
        for spec in METRICS:
            kind = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}[spec.kind]
            self.metrics[spec.name] = kind(
                spec.name, spec.description, spec.labels, registry=self.registry
            )
        self.server, self.thread = start_http_server(0, "127.0.0.1", registry=self.registry)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def count(self, name: str, amount: float, **labels: str) -> None:
        metric = self.metrics[name]
        assert isinstance(metric, Counter)
        metric.labels(**labels).inc(amount)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def work_of_a(worker: MetricsWorker) -> None:
    tasks = {"topic": "project.tasks", "type": "TaskCreated"}
    reviews = {"topic": "project.reviews", "type": "ReviewRequested"}
    worker.count("coord_events_published_total", 7, **tasks)
    worker.count("coord_events_published_total", 3, **reviews)
    worker.count("coord_events_consumed_total", 5, **tasks)
    worker.count("coord_events_consumed_total", 3, **reviews)
    worker.count("coord_events_rejected_total", 1, **tasks)
    worker.count("coord_events_dead_lettered_total", 1, **tasks)
    architect = {"agent": "backend-architect", "kind": "python"}
    worker.count("coord_agent_events_published_total", 4, agent="backend-architect")
    worker.count("coord_agent_runs_total", 6, **architect, outcome="succeeded")
    in_flight = worker.metrics["coord_agent_runs_in_flight"]
    assert isinstance(in_flight, Gauge)
    in_flight.labels(agent="backend-architect").set(2)
    latency = worker.metrics["coord_event_latency_seconds"]
    assert isinstance(latency, Histogram)
    for _ in range(5):
        latency.labels(topic="project.tasks").observe(0.04)


def work_of_b(worker: MetricsWorker) -> None:
    worker.count("coord_events_published_total", 4, topic="project.tasks", type="TaskCreated")
    worker.count("coord_events_consumed_total", 4, topic="project.tasks", type="TaskCreated")
    engineer = {"agent": "test-engineer", "kind": "python"}
    worker.count("coord_agent_events_published_total", 2, agent="test-engineer")
    worker.count("coord_agent_runs_total", 2, **engineer, outcome="succeeded")
    worker.count("coord_agent_runs_total", 1, **engineer, outcome="timeout")
    in_flight = worker.metrics["coord_agent_runs_in_flight"]
    assert isinstance(in_flight, Gauge)
    in_flight.labels(agent="test-engineer").set(1)
    latency = worker.metrics["coord_event_latency_seconds"]
    assert isinstance(latency, Histogram)
    for _ in range(5):
        latency.labels(topic="project.tasks").observe(0.06)


def work(a: MetricsWorker, b: MetricsWorker) -> None:
    """Both workers' share of an hour: 14 published (11 to project.tasks, 3 to
    project.reviews), 12 consumed (9 and 3), 2 failed; backend-architect published 4, ran 6,
    runs 2 now; test-engineer 2, 3, 1; latency 40 ms five times and 60 ms five times."""
    work_of_a(a)
    work_of_b(b)


@pytest.fixture
def workers() -> Iterator[tuple[MetricsWorker, MetricsWorker]]:
    a, b = MetricsWorker(), MetricsWorker()
    yield a, b
    a.stop()
    b.stop()


def assert_summed(figures: Any) -> None:
    """The two workers' work, summed."""
    assert figures.by("published") == {"project.tasks": 11, "project.reviews": 3}
    assert figures.by("consumed") == {"project.tasks": 9, "project.reviews": 3}
    assert figures.total("rejected") + figures.total("dead_lettered") == 2
    assert figures.by("agent_published") == {"backend-architect": 4, "test-engineer": 2}
    assert figures.by("agent_runs") == {"backend-architect": 6, "test-engineer": 3}
    assert figures.by("agent_in_flight") == {"backend-architect": 2, "test-engineer": 1}
    assert figures.total("latency_sum") / figures.total("latency_count") == pytest.approx(0.05)


async def test_endpoints_are_summed_as_their_increase_since_the_first_scrape(
    workers: tuple[MetricsWorker, MetricsWorker],
) -> None:
    a, b = workers
    work(a, b)  # before the dashboard looked: not in its window
    async with httpx.AsyncClient() as http:
        source = EndpointsSource([a.url, b.url], http)
        first, sources = await source.read()
        assert first is not None and all(s.ok for s in sources)
        assert first.total("published") == 0 and "first scrape" in first.window
        work(a, b)
        later, _ = await source.read()
    assert later is not None
    assert_summed(later)
    assert later.total("published_rate") > 0


async def test_one_reading_counts_each_workers_totals_and_a_silent_endpoint_is_named(
    workers: tuple[MetricsWorker, MetricsWorker],
) -> None:
    a, b = workers
    work(a, b)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{unused.getsockname()[1]}/metrics"
    async with httpx.AsyncClient() as http:
        figures, sources = await EndpointsSource([a.url, b.url, gone], http, from_zero=True).read()
    assert figures is not None and "since each worker started" in figures.window
    assert_summed(figures)
    assert [s.ok for s in sources] == [True, True, False]
    assert sources[2].name == f"metrics {gone}"


class Deployment:
    """A task queue whose sagas ended (one completed, one compensated) and whose queue holds
    parked dead letters, the oldest first in `entries`."""

    def __init__(self, queue: str, entries: list[str]) -> None:
        self.queue = queue
        self.entries = entries


@pytest.fixture(scope="module")
async def deployment(dev_env: WorkflowEnvironment) -> Deployment:
    client = dev_env.client
    queue = f"tq-{uuid.uuid4()}"
    async with build_worker(client, queue):
        for spec in (feature_deployment(), failing_at("DeployToProduction")):
            await asyncio.wait_for(
                api.saga_outcome(await api.start_saga(client, spec, queue=queue)), 60
            )
    entries = []
    for n in range(4):  # one after the other: their start times order them
        entries.append(
            await park_dead_letter(client, letter(f"target-{n}", event_type=f"E{n}"), queue)
        )
    return Deployment(queue, entries)


async def figures_shown(client: Client, reader: TemporalReader) -> Any:
    """The reader's figures once visibility (eventually consistent) shows the deployment."""
    seen: list[Any] = []

    async def shown() -> bool:
        seen.append(await reader.read())
        sagas = seen[-1].sagas
        return bool(sagas["completed"] == sagas["compensated"] == 1 and seen[-1].parked == 4)

    await eventually(shown, timeout=60, interval=0.5)
    return seen[-1]


async def test_temporal_figures_count_sagas_by_outcome_and_find_the_oldest_dead_letters(
    client: Client, deployment: Deployment
) -> None:
    reader = TemporalReader(client, default_registry(), deployment.queue)
    figures = await figures_shown(client, reader)
    assert {k: v for k, v in figures.sagas.items() if v} == {
        SagaStatus.COMPLETED: 1,
        SagaStatus.COMPENSATED: 1,
    }
    assert set(figures.in_flight.values()) == {0}
    assert [e.entry_id for e in figures.oldest] == deployment.entries
    assert figures.oldest[0].target == "target-0"
    states = {b.agent: b.state for b in figures.breakers}
    assert states["backend-architect"] == "closed"


async def test_the_oldest_are_found_by_counting_when_the_queue_is_longer_than_a_page(
    client: Client, deployment: Deployment
) -> None:
    reader = TemporalReader(
        client, default_registry(), deployment.queue, oldest_shown=2, oldest_page=3
    )
    figures = await figures_shown(client, reader)
    assert [e.entry_id for e in figures.oldest] == deployment.entries[:2]


THROUGHPUT = (
    ("Events Published", 14),
    ("Events Consumed", 12),
    ("Events Failed", 2),
    ("Events in DLQ", 4),
)


def expected_lines() -> list[str]:
    """What the terminal shows of the two workers' work and the deployment."""
    return [
        "Events Published: ████████████████████ 14",
        "Events Consumed:  █████████████████░░░ 12",
        "Events Failed:    ███░░░░░░░░░░░░░░░░░ 2",
        "Events in DLQ:    ██████░░░░░░░░░░░░░░ 4",
        "project.reviews | 3         | 3        | 0",
        "project.tasks   | 11        | 9        | 2",
        "backend-architect | 4         | 6        | 2",
        "test-engineer     | 2         | 3        | 1",
        "Event Bus: 🟢 Healthy",
        "Average Latency: 50ms",
        "Consumer Lag: Low (2 events)",
    ]


async def test_dashboard_once_prints_the_four_sections_with_the_summed_figures(
    dev_env: WorkflowEnvironment,
    client: Client,
    deployment: Deployment,
    workers: tuple[MetricsWorker, MetricsWorker],
) -> None:
    a, b = workers
    work(a, b)
    await figures_shown(client, TemporalReader(client, default_registry(), deployment.queue))
    env = {**server_env(dev_env, deployment.queue), "COORD_METRICS_ENDPOINTS": f"{a.url},{b.url}"}
    code, out, err = await run(COORD, "dashboard", "--once", env=env)
    assert code == 0, err
    for title in ("Throughput (since each worker started", "By Topic", "Agent Activity", "Health"):
        assert title in out, out
    lines = [line.strip(" │") for line in out.splitlines()]
    for expected in expected_lines():
        assert expected in lines, f"{expected!r} not in:\n{out}"
    assert "Dead-letter queue: 4 parked, the oldest" in out
    assert deployment.entries[0] in out
    assert "completed    | 1" in out and "compensated  | 1" in out


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
async def web_dashboard(
    dev_env: WorkflowEnvironment,
    deployment: Deployment,
    workers: tuple[MetricsWorker, MetricsWorker],
    tmp_path: Path,
) -> AsyncIterator[str]:
    """`coord dashboard --web` in its own process, once it serves its first frame."""
    a, b = workers
    port = free_port()
    env = {**os.environ, **server_env(dev_env, deployment.queue)}
    argv = [COORD, "dashboard", "--web", "--port", str(port), "--interval", "0.5"]
    argv += ["--metrics", a.url, "--metrics", b.url]
    with (tmp_path / "dashboard.log").open("ab") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:

            async def serving() -> bool:
                assert process.poll() is None, (tmp_path / "dashboard.log").read_text()
                try:
                    return (await http.get(f"{url}/api/dashboard")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(serving, timeout=60, interval=0.2)
        yield url
    finally:
        stop_process_group(process)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium on PATH: `make test` installs Debian's package when run as root")
    return found


def browse(url: str, *args: str) -> str:
    """Headless Chromium on the page, given time to fetch its data and draw."""
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    argv += ["--virtual-time-budget=8000", "--window-size=1400,1900", *args, url]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=True)
    return done.stdout.decode()


@pytest.mark.slow
async def test_web_page_shows_the_four_sections_with_the_figures_since_it_started(
    web_dashboard: str,
    client: Client,
    deployment: Deployment,
    workers: tuple[MetricsWorker, MetricsWorker],
    tmp_path: Path,
) -> None:
    a, b = workers
    work(a, b)  # after the dashboard's first scrape: its window shows it whole
    await figures_shown(client, TemporalReader(client, default_registry(), deployment.queue))
    async with httpx.AsyncClient() as http:

        async def counted() -> bool:
            frame = (await http.get(f"{web_dashboard}/api/dashboard")).json()["frame"]
            return bool(
                frame["throughput"] == {"published": 14, "consumed": 12, "failed": 2, "in_dlq": 4}
            )

        await eventually(counted, timeout=30, interval=0.2)
    dom = await asyncio.to_thread(browse, web_dashboard, "--dump-dom")
    assert 'data-state="loaded"' in dom, dom
    for title in ("Throughput", "By Topic", "Agent Activity", "Health"):
        assert f"<h2>{title}" in dom
    for label, number in THROUGHPUT:
        assert re.search(
            f'<dt>{label}</dt><dd><div class="bar">.*?</dd><dd class="n">{number}<', dom
        )
    numbers = '<td>project.tasks</td><td class="n">11</td><td class="n">9</td><td class="n">2</td>'
    assert numbers in dom
    assert (
        '<td>backend-architect</td><td class="n">4</td><td class="n">6</td><td class="n">2</td>'
    ) in dom
    assert '<dd class="bus healthy"><span class="light"></span>Healthy</dd>' in dom
    assert "<dd>50ms</dd>" in dom
    assert deployment.entries[0] in dom
    assert dom.count("<canvas") == 3, "the three charts are drawn"
    screenshot = tmp_path / "dashboard.png"
    await asyncio.to_thread(browse, web_dashboard, f"--screenshot={screenshot}")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.skip("no prometheus on PATH: `make test` installs Debian's package when run as root")
    return found


@pytest.fixture
async def prometheus(
    workers: tuple[MetricsWorker, MetricsWorker], tmp_path: Path
) -> AsyncIterator[str]:
    """A real Prometheus server scraping both workers every second."""
    targets = [worker.url.removeprefix("http://").removesuffix("/metrics") for worker in workers]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\n"
        f"scrape_configs: [{{job_name: coord, static_configs: [{{targets: {targets}}}]}}]\n"
    )
    port = free_port()
    argv = [
        prometheus_binary(),
        f"--config.file={config}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    argv.append(f"--storage.tsdb.path={tmp_path / 'data'}")
    with (tmp_path / "prometheus.log").open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:

            async def scraped_twice() -> bool:
                assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
                try:
                    answer = await http.get(
                        f"{url}/api/v1/query", params={"query": "count_over_time(up[1m]) >= 2"}
                    )
                except httpx.TransportError:
                    return False
                return answer.status_code == 200 and len(answer.json()["data"]["result"]) == 2

            await eventually(scraped_twice, timeout=60, interval=0.2)
        yield url
    finally:
        stop_process_group(process)


async def sampled_twice(http: httpx.AsyncClient, prometheus: str) -> bool:
    """Prometheus holds two samples at least of each worker's published series."""
    query = "count_over_time(coord_events_published_total[1m]) >= 2"
    answer = await http.get(f"{prometheus}/api/v1/query", params={"query": query})
    return len(answer.json()["data"]["result"]) == 3


@pytest.mark.slow
async def test_a_prometheus_server_answers_the_last_hour_summed_over_the_workers(
    prometheus: str, workers: tuple[MetricsWorker, MetricsWorker]
) -> None:
    """Prometheus extrapolates `increase()` to its window's edges, each worker's series by its
    own samples: the counters and the latency (a ratio of two increases) are near the workers'
    sums, nearer as samples accumulate; the gauges are exact."""
    a, b = workers
    work(a, b)  # the series appear: Prometheus counts from their first sample
    expected = {"project.tasks": 11, "project.reviews": 3}
    seen: list[Any] = []
    async with httpx.AsyncClient() as http:
        await eventually(lambda: sampled_twice(http, prometheus), timeout=60, interval=0.2)
        work(a, b)  # an increase it sees
        source = PrometheusSource(prometheus, http)

        async def near() -> bool:
            figures, _ = await source.read()
            seen.append(figures)
            published = figures.by("published") if figures else {}
            return all(abs(published.get(t, 0) - n) < n * 0.1 for t, n in expected.items())

        await eventually(near, timeout=60, interval=0.5)
    figures = seen[-1]
    assert figures.window == "last hour"
    assert figures.by("published")["project.tasks"] == pytest.approx(11, rel=0.15)
    assert figures.by("consumed")["project.tasks"] == pytest.approx(9, rel=0.15)
    assert figures.by("agent_in_flight") == {"backend-architect": 2, "test-engineer": 1}
    latency = figures.total("latency_sum") / figures.total("latency_count")
    assert latency == pytest.approx(0.05, rel=0.02)
    code, out, err = await run(
        COORD,
        "dashboard",
        "--once",
        "--prometheus",
        prometheus,
        env={"TEMPORAL_ADDRESS": "127.0.0.1:1"},
    )
    assert code == 6, err  # no Temporal server here: the frame says so, and its exit code
    assert "## Throughput (last hour)" in out
    assert f"prometheus {prometheus}: ok" in out


async def test_web_on_a_taken_port_is_refused_in_one_line_naming_the_option(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """As `coord worker --metrics-port` on a taken port: the option named, exit 1, no bug."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = server_env(dev_env, task_queue)
        code, _, err = await run(COORD, "dashboard", "--web", "--port", str(port), env=env)
    assert (code, err.strip().splitlines()) == (
        1,
        [
            f"error: --port {port}: cannot serve the dashboard at http://127.0.0.1:{port}/: "
            f"error while attempting to bind on address ('127.0.0.1', {port}): "
            "address already in use"
        ],
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prometheus", "notaurl"], "--prometheus: 'notaurl' is not an http(s) URL"),
        (["--metrics", "localhost:7871"], "--metrics: 'localhost:7871' is not an http(s) URL"),
    ],
)
async def test_a_source_that_is_not_a_url_is_refused_before_reading(
    args: list[str], message: str
) -> None:
    env = {"TEMPORAL_ADDRESS": "127.0.0.1:9", "COORD_PROMETHEUS_URL": ""}
    code, out, err = await run(COORD, "dashboard", "--once", *args, env=env)
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {message} (") and len(err.strip().splitlines()) == 1, err
