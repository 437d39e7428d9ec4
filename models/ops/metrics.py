"""The product's metrics: every name, kind and label the worker exports, in one catalogue.

Workflows record through the workflow metric meter (replay-safe: nothing is recorded while a
workflow replays), activities through the activity metric meter; the SDK's runtime serves both,
beside its own `temporal_*` metrics, on the worker's Prometheus endpoint. The dashboard, the
Grafana dashboards and the tests read the same catalogue, so a query can name only a metric that
is exported. Labels are bounded sets (topics, event types, agents, outcomes, failure types): no
event, workflow or correlation id is ever a label."""

from dataclasses import dataclass
from typing import Literal

__all__ = ["METRICS", "MetricKind", "MetricSpec", "exported_names"]

MetricKind = Literal["counter", "histogram", "gauge"]


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: MetricKind
    labels: tuple[str, ...]
    description: str
    unit: str = ""

    def exported(self) -> tuple[str, ...]:
        """The series names Prometheus shows for it: a counter's `_total`, a histogram's
        `_bucket`, `_sum` and `_count`."""
        if self.kind == "histogram":
            return tuple(f"{self.name}_{part}" for part in ("bucket", "sum", "count"))
        return (self.name,)


METRICS: tuple[MetricSpec, ...] = (
    # events, by topic and type
    MetricSpec(
        "coord_events_published_total",
        "counter",
        ("topic", "type"),
        "Events published (by a CLI, a script or an agent's run).",
    ),
    MetricSpec(
        "coord_events_consumed_total",
        "counter",
        ("topic", "type"),
        "Events a pattern's workflow took in (a chain, an aggregator, a plan).",
    ),
    MetricSpec(
        "coord_events_rejected_total",
        "counter",
        ("topic", "type"),
        "Events refused at a workflow's edge (invalid, undeclared, over a bound) and parked.",
    ),
    MetricSpec(
        "coord_events_dead_lettered_total",
        "counter",
        ("topic", "type"),
        "Events whose processing ended in the dead-letter queue.",
    ),
    MetricSpec(
        "coord_event_latency_seconds",
        "histogram",
        ("topic",),
        "From an event's time to its consumer taking it in.",
        "s",
    ),
    # agents
    MetricSpec(
        "coord_agent_runs_total",
        "counter",
        ("agent", "kind", "outcome"),
        "Agent runs ended, by outcome (succeeded, or the failure type).",
    ),
    MetricSpec(
        "coord_agent_run_duration_seconds",
        "histogram",
        ("agent", "kind", "outcome"),
        "How long an agent's run took on the worker.",
        "s",
    ),
    MetricSpec(
        "coord_agent_runs_in_flight",
        "gauge",
        ("agent",),
        "Agent runs running now on this worker (summed over workers).",
    ),
    MetricSpec(
        "coord_agent_events_published_total",
        "counter",
        ("agent",),
        "Events agents published by their results.",
    ),
    MetricSpec(
        "coord_breaker_state",
        "gauge",
        ("agent",),
        "The agent's breaker as this worker sees it: 0 closed, 1 half-open, 2 open.",
    ),
    MetricSpec(
        "coord_pool_in_use",
        "gauge",
        ("agent",),
        "Permits of the agent's pool held now.",
    ),
    MetricSpec(
        "coord_llm_tokens_total",
        "counter",
        ("agent", "model", "direction"),
        "Tokens of `llm` agents' runs, input and output.",
    ),
    # patterns
    MetricSpec("coord_sagas_total", "counter", ("outcome",), "Sagas ended, by outcome."),
    MetricSpec(
        "coord_saga_compensations_total",
        "counter",
        ("agent",),
        "Compensation steps a saga ran, by compensating agent.",
    ),
    MetricSpec(
        "coord_aggregators_total", "counter", ("outcome",), "Aggregators ended, by outcome."
    ),
    MetricSpec("coord_plans_total", "counter", ("outcome",), "Plans ended, by outcome."),
    MetricSpec(
        "coord_plan_tasks_total", "counter", ("state",), "Plan tasks ended, by final state."
    ),
    MetricSpec("coord_votes_total", "counter", ("outcome",), "Votes decided, by outcome."),
    MetricSpec(
        "coord_dlq_parked_total",
        "counter",
        ("failure_type",),
        "Dead letters parked, by failure type.",
    ),
    MetricSpec(
        "coord_dlq_replayed_total",
        "counter",
        ("failure_type", "outcome"),
        "Dead letters replayed, by failure type and how the replay ended.",
    ),
    MetricSpec(
        "coord_chain_runs_queued_total",
        "counter",
        ("agent",),
        "Agent runs a chain queued (depth: queued minus dispatched).",
    ),
    MetricSpec(
        "coord_chain_runs_dispatched_total",
        "counter",
        ("agent",),
        "Queued agent runs a chain started.",
    ),
)


def exported_names() -> set[str]:
    """Every series name the worker's endpoint can show for the product's metrics."""
    return {name for spec in METRICS for name in spec.exported()}
