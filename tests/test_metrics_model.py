"""The metric catalogue and the endpoint's options, without a server: names Prometheus accepts,
series names as exported, labels exactly the catalogue's and bounded, which counter a dead
letter's event counts in, and the endpoint's options refused in one line naming the option."""

import re
from pathlib import Path
from typing import Any

import pytest
from temporalio.runtime import MetricBuffer, MetricBufferDurationFormat, Runtime, TelemetryConfig

from coord.infra.metrics import BIND_ENV, DEFAULT_BIND, PORT_ENV, MetricsEndpoint
from coord.models.ops import metrics as catalogue
from coord.models.ops.metrics import (
    METRICS,
    OTHER,
    LabelValues,
    MetricSpec,
    exported_names,
    parked_event,
)
from coord.models.wire.contract import FailureType
from coord.models.wire.specs import SpecError

PROMETHEUS_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
SDK_LABELS = {"service_name", "namespace", "task_queue", "workflow_type", "activity_type", "le"}


def test_names_are_unique_prometheus_names_of_the_product() -> None:
    names = [spec.name for spec in METRICS]
    assert len(set(names)) == len(names)
    assert all(PROMETHEUS_NAME.match(name) and name.startswith("coord_") for name in names)


def test_counters_end_in_total_and_nothing_else_does() -> None:
    """The exporter adds no suffix: a counter's name carries it, as Prometheus names counters."""
    for spec in METRICS:
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name


def test_histograms_are_in_seconds_with_buckets_and_export_three_series() -> None:
    histograms = [spec for spec in METRICS if spec.kind == "histogram"]
    assert histograms
    for spec in histograms:
        assert (spec.unit, spec.name.endswith("_seconds")) == ("s", True)
        assert list(spec.buckets) == sorted(spec.buckets)
        assert spec.exported() == tuple(
            f"{spec.name}_{part}" for part in ("bucket", "sum", "count")
        )
    assert exported_names() >= {"coord_event_latency_seconds_bucket", "coord_sagas_total"}


def test_labels_are_bounded_sets_never_ids_nor_the_sdk_s_own() -> None:
    for spec in METRICS:
        assert spec.labels, spec.name
        assert not {label for label in spec.labels if label.endswith("id")}, spec.name
        assert not set(spec.labels) & SDK_LABELS, spec.name


class Recorded:
    """A real SDK runtime whose meter records into a buffer (no endpoint, no server)."""

    def __init__(self) -> None:
        self._buffer = MetricBuffer(10_000, MetricBufferDurationFormat.SECONDS)
        telemetry = TelemetryConfig(metrics=self._buffer, attach_service_name=False)
        self.meter = Runtime(telemetry=telemetry).metric_meter

    def updates(self) -> list[tuple[str, float, dict[str, Any]]]:
        return [
            (update.metric.name, update.value, dict(update.attributes))
            for update in self._buffer.retrieve_updates()
        ]


RECORDED = Recorded()


def test_a_metric_takes_exactly_its_labels() -> None:
    catalogue.SAGAS.record(RECORDED.meter, 1, {"outcome": "completed"})
    assert RECORDED.updates() == [("coord_sagas_total", 1, {"outcome": "completed"})]
    with pytest.raises(ValueError, match=r"coord_sagas_total takes labels \('outcome',\)"):
        catalogue.SAGAS.record(RECORDED.meter, 1, {"outcome": "completed", "saga_id": "s-1"})


def test_a_histogram_never_observes_below_zero() -> None:
    """An event stamped by a clock ahead of the worker's arrives `before` its time."""
    catalogue.EVENT_LATENCY.record(RECORDED.meter, -0.3, {"topic": "t"})
    assert RECORDED.updates() == [("coord_event_latency_seconds", 0.0, {"topic": "t"})]


def test_label_values_beyond_the_bound_are_other_and_long_ones_are_cut() -> None:
    values = LabelValues(limit=2)
    assert [values.bounded("m", "type", t) for t in ("A", "B", "C", "A")] == ["A", "B", OTHER, "A"]
    assert values.bounded("m", "topic", "C") == "C"  # each label has its own bound
    assert len(values.bounded("n", "type", "x" * 1000)) == catalogue.MAX_LABEL_CHARS
    assert values.bounded("n", "topic", "") == "none"


def test_made_up_event_types_cannot_grow_the_endpoint_without_end() -> None:
    spec = MetricSpec("coord_test_bound_total", "counter", ("type",), "")
    for n in range(catalogue.MAX_LABEL_VALUES + 50):
        spec.record(RECORDED.meter, 1, {"type": f"Made-up-{n}"})
    types = {attributes["type"] for _, _, attributes in RECORDED.updates()}
    assert len(types) == catalogue.MAX_LABEL_VALUES + 1
    assert OTHER in types


@pytest.mark.parametrize(
    ("failure_type", "has_event", "target_agent", "counted"),
    [
        (FailureType.INVALID_PAYLOAD, True, "ux-designer", catalogue.EVENTS_DEAD_LETTERED),
        (FailureType.CHAIN_ENDED, True, "python-pro", catalogue.EVENTS_DEAD_LETTERED),
        (FailureType.PUBLISH_NOT_ALLOWED, True, None, catalogue.EVENTS_REJECTED),
        (FailureType.TARGET_ENDED, True, None, catalogue.EVENTS_REJECTED),
        (FailureType.INVALID_ENVELOPE, False, None, catalogue.EVENTS_REJECTED),
        (FailureType.INVALID_ATTACH, False, None, None),
    ],
)
def test_a_dead_letter_s_event_counts_as_refused_or_dead_lettered(
    failure_type: str, has_event: bool, target_agent: str | None, counted: MetricSpec | None
) -> None:
    assert parked_event(failure_type, has_event=has_event, target_agent=target_agent) == counted


def test_the_endpoint_is_off_without_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COORD_METRICS_PORT", raising=False)
    monkeypatch.setenv("COORD_METRICS_BIND", "0.0.0.0")
    assert MetricsEndpoint.of(None) is None


def test_the_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORD_METRICS_PORT", "9464")
    monkeypatch.setenv("COORD_METRICS_BIND", "0.0.0.0")
    endpoint = MetricsEndpoint.of(None)
    assert endpoint == MetricsEndpoint(9464, "0.0.0.0")
    assert MetricsEndpoint.of(9000, "::1") == MetricsEndpoint(9000, "::1")
    assert MetricsEndpoint(9000, "::1").url == "http://[::1]:9000/metrics"


def test_the_endpoint_defaults_to_this_host_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COORD_METRICS_BIND", raising=False)
    assert MetricsEndpoint.of(9464) == MetricsEndpoint(9464, "127.0.0.1")


def test_the_exporter_serves_seconds_and_the_catalogue_s_names_and_buckets() -> None:
    config = MetricsEndpoint(9464).prometheus()
    assert (config.bind_address, config.durations_as_seconds) == ("127.0.0.1:9464", True)
    assert not config.counters_total_suffix and not config.unit_suffix
    assert config.histogram_bucket_overrides == {
        spec.name: list(spec.buckets) for spec in METRICS if spec.kind == "histogram"
    }


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"COORD_METRICS_PORT": "http"}, "$COORD_METRICS_PORT: 'http' is not a port number"),
        ({"COORD_METRICS_PORT": "70000"}, "--metrics-port: 70000 is not a port (1 to 65535)"),
        (
            {"COORD_METRICS_PORT": "9464", "COORD_METRICS_BIND": "example.org"},
            "--metrics-bind: 'example.org' is not an IP address",
        ),
    ],
)
def test_bad_settings_are_refused_naming_them(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SpecError) as refused:
        MetricsEndpoint.of(None)
    assert str(refused.value).startswith(message)


DOCS = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"
TABLE_ROW = re.compile(r"^\| `(coord_\w+)` \| (\w+) \| ([^|]*) \| (.*) \|$")


def test_the_manual_lists_every_metric_with_its_kind_labels_and_meaning() -> None:
    rows = [TABLE_ROW.match(line) for line in DOCS.read_text().splitlines()]
    documented = [
        (row[1], row[2], tuple(re.findall(r"`(\w+)`", row[3])), row[4]) for row in rows if row
    ]
    assert documented == [(spec.name, spec.kind, spec.labels, spec.description) for spec in METRICS]


def test_the_manual_names_the_options_and_their_defaults() -> None:
    text = DOCS.read_text()
    for named in ("--metrics-port", "--metrics-bind", PORT_ENV, BIND_ENV, DEFAULT_BIND):
        assert named in text, named
