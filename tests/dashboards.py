"""The Grafana dashboards of deploy/grafana/dashboards, as the tests read them: their panels and
sections, their PromQL queries (Grafana's variables replaced by what they stand for) and the
metrics each query selects; and the SDK's series they may query, each one seen at a worker's
endpoint (tests/test_metrics.py)."""

import json
from typing import Any

import promql_parser

from tests.conftest import ROOT

DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
SDK_METRICS = frozenset(
    {
        "temporal_request",
        "temporal_request_failure",
        "temporal_request_latency_bucket",
        "temporal_long_request",
        "temporal_long_request_latency_bucket",
        "temporal_workflow_completed",
        "temporal_workflow_failed",
        "temporal_workflow_endtoend_latency_bucket",
        "temporal_workflow_task_schedule_to_start_latency_bucket",
        "temporal_workflow_task_execution_latency_bucket",
        "temporal_workflow_task_replay_latency_bucket",
        "temporal_workflow_task_queue_poll_succeed",
        "temporal_activity_execution_latency_bucket",
        "temporal_activity_schedule_to_start_latency_bucket",
        "temporal_activity_succeed_endtoend_latency_bucket",
        "temporal_activity_execution_failed",
        "temporal_activity_task_received",
        "temporal_local_activity_total",
        "temporal_local_activity_execution_failed",
        "temporal_local_activity_execution_latency_bucket",
        "temporal_worker_task_slots_available",
        "temporal_worker_task_slots_used",
        "temporal_num_pollers",
        "temporal_sticky_cache_size",
        "temporal_sticky_cache_hit",
    }
)
"""The SDK's series the dashboards may query: tests/test_metrics.py sees each at a worker's
endpoint, tests/test_compose.py holds the dashboards to them."""


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in dashboard["panels"] if panel["type"] != "row"]


def sections(dashboard: dict[str, Any]) -> dict[str, set[str]]:
    """Each row's title -> the titles of the panels under it."""
    found: dict[str, set[str]] = {}
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            found[row] = set()
        else:
            found[row].add(panel["title"])
    return found


def expressions() -> list[str]:
    """Every query of every dashboard, as Prometheus is sent it."""
    return [
        promql(target["expr"])
        for dashboard in dashboards().values()
        for panel in panels(dashboard)
        for target in panel["targets"]
    ]


def promql(expression: str) -> str:
    """The query with Grafana's variables replaced by what they stand for."""
    for variable, value in GRAFANA_VARIABLES.items():
        expression = expression.replace(variable, value)
    return expression


def metric_names(expression: str) -> set[str]:
    """The metrics a PromQL expression selects, parsed by a PromQL parser."""
    names: set[str | None] = set()

    def selected(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(promql(expression)), selected)
    assert None not in names, f"a selector without a metric name: {expression}"
    return {name for name in names if name is not None}
