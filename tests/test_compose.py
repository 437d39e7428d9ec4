"""docker-compose.yml, the self-hosted path: valid Compose, scalable workers, the project's search
attributes registered, no deprecated auto-setup image; Prometheus scraping every worker's
metrics and Grafana provisioned with dashboards whose every query names an exported metric.
Static checks only; no Docker needed."""

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from coord.infra.devserver import FLOOD_CONFIG, TASK_DISPATCH_CONFIG, TIMER_CONFIG
from coord.models.ops.metrics import METRICS, exported_names
from coord.models.wire import contract
from tests.dashboards import (
    DASHBOARDS,
    SDK_METRICS,
    dashboards,
    expressions,
    metric_names,
    panels,
    sections,
)

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
SEARCH_ATTRIBUTES = (
    "CorrelationId",
    "CoordPattern",
    "CoordStatus",
    "CoordFailureType",
    "CoordEventType",
    "CoordTopic",
    "CoordAgents",
    "CoordRewindOf",
)


def services() -> dict[str, dict[str, Any]]:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def test_valid_against_compose_spec() -> None:
    check_jsonschema = Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(check_jsonschema), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_worker_scales_and_takes_its_server_from_the_environment() -> None:
    worker = services()["worker"]
    assert "build" in worker
    assert "container_name" not in worker, "a fixed name breaks `--scale worker=N`"
    assert "ports" not in worker, "host ports break `--scale worker=N`"
    assert str(worker["environment"]["TEMPORAL_ADDRESS"]).startswith("${TEMPORAL_ADDRESS")


@pytest.mark.parametrize("name", SEARCH_ATTRIBUTES)
def test_namespace_job_registers_search_attribute(name: str) -> None:
    assert name in yaml.safe_dump(services()["temporal-create-namespace"])


def test_search_attributes_match_the_workflows() -> None:
    assert {key.name for key in contract.SEARCH_ATTRIBUTES} == set(SEARCH_ATTRIBUTES)


def test_no_deprecated_auto_setup_image() -> None:
    images = {name: str(service.get("image", "")) for name, service in services().items()}
    assert not {name: image for name, image in images.items() if "auto-setup" in image}


def test_server_dispatches_tasks_as_the_embedded_one() -> None:
    """Fairness, priority, task loading and timers are the server's: the compose server is
    configured as every dev server the project starts."""
    server = services()["temporal"]
    path = Path(server["environment"]["DYNAMIC_CONFIG_FILE_PATH"])
    host_dir, mounted, _ = server["volumes"][0].split(":")
    config = yaml.safe_load((ROOT / host_dir / path.relative_to(mounted)).read_text())
    values = (*TASK_DISPATCH_CONFIG, *TIMER_CONFIG, *FLOOD_CONFIG)[1::2]
    embedded = {key: json.loads(value) for key, value in (v.split("=", 1) for v in values)}
    assert {key: config[key][0]["value"] for key in embedded} == embedded


# --- Metrics: every worker's endpoint, Prometheus scraping them, Grafana provisioned ------------

DEPLOY = ROOT / "deploy"
EVENT_SECTIONS = {
    "Throughput (last hour)": {
        "Events published",
        "Events consumed",
        "Events failed",
        "Events in DLQ",
    },
    "By topic": {"Topics (last hour)"},
    "Agent activity": {"Agents (last hour)"},
    "Health": {"Average latency", "Consumer lag", "Breaker states"},
}
"""The event-system dashboard: its four sections and the panels each shows."""


def workers() -> dict[str, dict[str, Any]]:
    """Every service that runs `coord worker`."""
    return {
        name: service
        for name, service in services().items()
        if service.get("command", [])[:2] == ["coord", "worker"]
    }


def mounted(service: dict[str, Any], target: str) -> Path:
    """The host folder the service mounts at `target`."""
    volumes: list[str] = service["volumes"]
    for volume in volumes:
        source, at, *_ = volume.split(":")
        if at == target:
            return ROOT / source
    raise AssertionError(f"nothing mounted at {target}")


def test_every_worker_serves_metrics_to_prometheus() -> None:
    for name, worker in workers().items():
        environment = worker["environment"]
        assert environment["COORD_METRICS_PORT"] == "9464", name
        assert environment["COORD_METRICS_BIND"] == "0.0.0.0", name
    assert "ports" not in services()["worker"], "workers are scraped inside the network"


def test_prometheus_scrapes_every_worker_on_its_metrics_port() -> None:
    prometheus = services()["prometheus"]
    config_flag = next(a for a in prometheus["command"] if a.startswith("--config.file="))
    config_path = Path(config_flag.split("=", 1)[1])
    folder = mounted(prometheus, str(config_path.parent))
    config = yaml.safe_load((folder / config_path.name).read_text())
    [job] = [job for job in config["scrape_configs"] if job["job_name"] == "coord-worker"]
    [discovery] = job["dns_sd_configs"]
    assert set(discovery["names"]) == set(workers())
    assert (discovery["type"], str(discovery["port"])) == ("A", "9464")


def test_grafana_is_provisioned_with_prometheus_and_the_dashboards() -> None:
    grafana = services()["grafana"]
    provisioning = mounted(grafana, "/etc/grafana/provisioning")
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus"
    assert (
        source["url"] == f"http://prometheus:{services()['prometheus']['ports'][0].split(':')[1]}"
    )
    [provider] = yaml.safe_load((provisioning / "dashboards" / "coord.yml").read_text())[
        "providers"
    ]
    assert mounted(grafana, provider["options"]["path"]) == DASHBOARDS
    uids = {
        target["datasource"]["uid"]
        for dashboard in dashboards().values()
        for panel in panels(dashboard)
        for target in panel["targets"]
    }
    assert uids == {source["uid"]}


def test_the_dashboards_load_each_with_its_own_uid() -> None:
    loaded = dashboards()
    assert set(loaded) == {"coord-events.json", "temporal-sdk.json"}
    assert len({dashboard["uid"] for dashboard in loaded.values()}) == len(loaded)
    for dashboard in loaded.values():
        assert dashboard["title"] and panels(dashboard)
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(set(ids)) == len(ids)


def test_the_event_dashboard_has_the_four_sections_of_the_event_system() -> None:
    found = sections(dashboards()["coord-events.json"])
    for section, wanted in EVENT_SECTIONS.items():
        assert wanted <= found[section], section


def test_the_topic_and_agent_tables_show_their_columns() -> None:
    by_title = {panel["title"]: panel for panel in panels(dashboards()["coord-events.json"])}
    columns = {
        "Topics (last hour)": ["Published", "Consumed", "Lag"],
        "Agents (last hour)": ["Published", "Consumed", "Processing"],
    }
    for title, wanted in columns.items():
        shown = [target["legendFormat"] for target in by_title[title]["targets"]]
        assert shown == wanted, title


def test_the_sdk_dashboard_covers_requests_workflows_activities_and_workers() -> None:
    found = sections(dashboards()["temporal-sdk.json"])
    assert set(found) == {"Requests", "Workflows", "Activities", "Workers"}
    assert all(found.values())


def test_every_query_names_only_metrics_the_worker_exports() -> None:
    """The catalogue's series, and the SDK's seen at a worker's endpoint (tests/test_metrics.py
    holds SDK_METRICS to what the endpoint shows)."""
    exported = exported_names() | SDK_METRICS
    assert expressions()
    for expression in expressions():
        assert metric_names(expression) <= exported, expression


def test_the_event_dashboard_shows_every_metric_of_the_catalogue() -> None:
    shown = {name for expression in expressions() for name in metric_names(expression)}
    for spec in METRICS:
        assert set(spec.exported()) & shown, spec.name


def test_a_query_naming_an_unexported_metric_is_caught() -> None:
    assert metric_names('sum(rate(coord_events_sent_total{topic="a"}[$__rate_interval]))') == {
        "coord_events_sent_total"
    }


def test_prometheus_accepts_its_configuration() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("no promtool on PATH: `make test` installs Debian's prometheus when root")
    config = DEPLOY / "prometheus" / "prometheus.yml"
    checked = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
