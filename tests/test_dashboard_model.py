"""The dashboard's arithmetic (models/ops/dashboard.py) and its reading of Prometheus answers,
without a server."""

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from coord.models.ops.dashboard import (
    QUERIES,
    Breaker,
    EventFigures,
    IncreaseTracker,
    PatternFigures,
    Source,
    agent_rows,
    bisect_instant,
    counter_increase,
    lag_level,
    snapshot,
    sum_by,
    topic_rows,
    unknown_metrics,
)
from coord.models.wire.specs import SpecError
from coord.starter.dashboard.collect import metrics_source
from coord.starter.dashboard.metrics import (
    EndpointsSource,
    PrometheusSource,
    parse_exposition,
    promql,
    vector_by,
)

TASKS = (("topic", "project.tasks"),)
AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_every_figure_reads_a_metric_the_worker_exports() -> None:
    assert unknown_metrics() == set()


def test_a_counter_lower_than_before_restarted_from_zero() -> None:
    assert counter_increase(10, 14) == 4
    assert counter_increase(10, 3) == 3


def test_increase_since_the_first_scrape_across_a_restart_and_a_new_series() -> None:
    tracker = IncreaseTracker()
    tracker.observe("a", {("published", TASKS): 100})
    assert tracker.increases() == {("a", "published", TASKS): 0}
    tracker.observe("a", {("published", TASKS): 107})
    tracker.observe("a", {("published", TASKS): 2})  # the worker restarted
    reviews = (("topic", "project.reviews"),)
    tracker.observe("a", {("published", TASKS): 5, ("published", reviews): 4})
    assert tracker.increases() == {
        ("a", "published", TASKS): 7 + 2 + 3,
        ("a", "published", reviews): 4,
    }


def test_from_zero_counts_a_first_reading_whole() -> None:
    tracker = IncreaseTracker(from_zero=True)
    tracker.observe("a", {("published", TASKS): 100})
    assert tracker.increases() == {("a", "published", TASKS): 100}


def test_series_are_summed_across_endpoints_and_other_labels_by_one_label() -> None:
    series = {
        ("a", "runs", (("agent", "x"), ("outcome", "succeeded"))): 3.0,
        ("a", "runs", (("agent", "x"), ("outcome", "timeout"))): 1.0,
        ("b", "runs", (("agent", "x"), ("outcome", "succeeded"))): 2.0,
        ("b", "runs", (("agent", "y"), ("outcome", "succeeded"))): 5.0,
        ("b", "other", (("agent", "y"),)): 50.0,
    }
    assert sum_by(series, "runs", "agent") == {"x": 6.0, "y": 5.0}


def figures(**values: dict[str, float]) -> EventFigures:
    return EventFigures(window="last hour", values=values)


def test_lag_is_published_minus_consumed_per_topic_never_below_zero() -> None:
    rows = topic_rows(
        figures(
            published={"project.tasks": 450, "project.reviews": 120, "": 3},
            consumed={"project.tasks": 448, "project.reviews": 130},
        )
    )
    assert [(r.topic, r.published, r.consumed, r.lag) for r in rows] == [
        ("-", 3, 0, 3),
        ("project.reviews", 120, 130, 0),
        ("project.tasks", 450, 448, 2),
    ]


def test_agent_activity_joins_published_runs_and_runs_in_flight() -> None:
    rows = agent_rows(
        figures(agent_published={"a": 4}, agent_runs={"a": 6, "b": 3}, agent_in_flight={"b": 1})
    )
    assert [(r.agent, r.published, r.consumed, r.processing) for r in rows] == [
        ("a", 4, 6, 0),
        ("b", 0, 3, 1),
    ]


def test_consumer_lag_levels() -> None:
    assert lag_level(5, 10) == "Low"  # a few events
    assert lag_level(20, 1000) == "Low"  # 2%
    assert lag_level(100, 1000) == "Medium"
    assert lag_level(101, 1000) == "High"


def test_bus_health_from_the_sources_breakers_and_lag() -> None:
    calm = figures(
        published={"t": 100},
        consumed={"t": 100},
        latency_sum={"t": 0.5},
        latency_count={"t": 10},
    )
    patterns = PatternFigures(breakers=[Breaker(agent="a", state="closed", status="healthy")])
    ok = [Source(name="temporal", ok=True)]
    healthy = snapshot(AT, calm, patterns, ok)
    assert (healthy.health.bus, healthy.health.latency_ms, healthy.health.lag) == ("healthy", 50, 0)

    tripped = PatternFigures(breakers=[Breaker(agent="a", state="open", status="healthy")])
    assert snapshot(AT, calm, tripped, ok).health.reasons == ["breaker open: a"]
    lagging = figures(published={"t": 100}, consumed={"t": 50})
    assert snapshot(AT, lagging, patterns, ok).health.bus == "degraded"
    gone = [Source(name="temporal", ok=False, error="cannot reach it")]
    assert snapshot(AT, calm, None, gone).health.bus == "down"


def test_bisection_halves_towards_a_count_between_wanted_and_most() -> None:
    lo, hi = AT, AT + timedelta(hours=2)
    assert bisect_instant(lo, hi, 2, wanted=5, most=200) == (AT + timedelta(hours=1), hi)
    assert bisect_instant(lo, hi, 500, wanted=5, most=200) == (lo, AT + timedelta(hours=1))
    assert bisect_instant(lo, hi, 50, wanted=5, most=200) is None


def test_promql_sums_every_worker_by_the_figures_label() -> None:
    assert promql(QUERIES["published"]) == (
        "sum by (topic) (increase(coord_events_published_total[1h]))"
    )
    assert promql(QUERIES["agent_in_flight"]) == "sum by (agent) (coord_agent_runs_in_flight)"
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"topic": "t"}, "value": [1, "3.5"]},
                {"metric": {}, "value": [1, "NaN"]},
            ],
        },
    }
    assert vector_by(answer, "topic") == {"t": 3.5, "": 0.0}


def test_exposition_text_is_read_for_the_dashboards_series_only() -> None:
    registry = CollectorRegistry()
    Counter("coord_events_published", "", ["topic", "type"], registry=registry).labels(
        "t", "X"
    ).inc(3)
    Gauge("coord_agent_runs_in_flight", "", ["agent"], registry=registry).labels("a").set(2)
    Counter("unrelated", "", registry=registry).inc()
    counters, gauges = parse_exposition(generate_latest(registry).decode())
    assert counters == {("coord_events_published_total", (("topic", "t"), ("type", "X"))): 3}
    assert gauges == {("coord_agent_runs_in_flight", (("agent", "a"),)): 2}


@pytest.mark.parametrize(
    ("prometheus", "endpoints", "env", "message"),
    [
        ("notaurl", [], {}, "--prometheus: 'notaurl' is not an http(s) URL (http://HOST:9090)"),
        (
            None,
            ["http://127.0.0.1:7871/metrics", "localhost:7871"],
            {},
            "--metrics: 'localhost:7871' is not an http(s) URL (http://HOST:PORT/metrics)",
        ),
        (
            None,
            [],
            {"COORD_PROMETHEUS_URL": "prometheus:9090"},
            "$COORD_PROMETHEUS_URL: 'prometheus:9090' is not an http(s) URL (http://HOST:9090)",
        ),
        (
            None,
            [],
            {"COORD_METRICS_ENDPOINTS": "http://a:1/metrics,b:2"},
            "$COORD_METRICS_ENDPOINTS: 'b:2' is not an http(s) URL (http://HOST:PORT/metrics)",
        ),
    ],
)
async def test_a_source_that_is_not_a_url_is_refused_naming_where_it_came_from(
    prometheus: str | None,
    endpoints: list[str],
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("COORD_PROMETHEUS_URL", "COORD_METRICS_ENDPOINTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    async with httpx.AsyncClient() as http:
        with pytest.raises(SpecError) as refused:
            metrics_source(prometheus, endpoints, http, once=True)
    assert str(refused.value) == message


async def test_http_and_https_urls_are_sources() -> None:
    async with httpx.AsyncClient() as http:
        source = metrics_source(
            None, ["http://127.0.0.1:7871/metrics,https://w:1/m"], http, once=True
        )
        assert isinstance(source, EndpointsSource)
        assert source.urls == ["http://127.0.0.1:7871/metrics", "https://w:1/m"]
        assert isinstance(
            metrics_source("https://prom:9090", [], http, once=True), PrometheusSource
        )
