"""The product's metrics: every name, kind and label the worker exports, in one catalogue.

Workflows record through the workflow metric meter (replay-safe: nothing is recorded while a
workflow replays), activities through the activity metric meter; the SDK's runtime serves both,
beside its own `temporal_*` metrics, on the worker's Prometheus endpoint. The dashboard, the
Grafana dashboards and the tests read the same catalogue, so a query can name only a metric that
is exported. Labels are bounded sets (topics, event types, agents, outcomes, failure types): no
event, workflow or correlation id is ever a label, and a label whose values come from outside (an
event's type, an agent's failure type) keeps at most MAX_LABEL_VALUES of them in a process."""

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from temporalio.common import MetricMeter

__all__ = [
    "METRICS",
    "MetricKind",
    "MetricSpec",
    "exported_names",
    "prometheus_buckets",
]

MetricKind = Literal["counter", "histogram", "gauge"]

MAX_LABEL_VALUES = 200
"""Distinct values one label of one metric takes in a process; later new values are counted as
OTHER. Event types, topics and agents' failure types come from whoever publishes or declares
them: without a bound a stream of made-up types would grow the endpoint, and Prometheus, without
end."""
MAX_LABEL_CHARS = 100
"""A longer label value is cut to this length."""
OTHER = "other"
NONE = "none"
"""The value of a label the fact has none for (an event without a topic)."""

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
"""From a few milliseconds (an event taken in, a python agent) to a quarter of an hour (an llm
or shell agent, an event held by a paused chain)."""


class LabelValues:
    """The values each label of each metric has taken in this process, first come first kept
    up to `limit`. Shared by every workflow and activity of the process (workflow code runs on
    several threads): what a label says never changes a workflow's commands."""

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self._limit = limit
        self._seen: dict[tuple[str, str], set[str]] = {}
        self._lock = threading.Lock()

    def seen(self, metric: str, label: str) -> frozenset[str]:
        """The values `label` of `metric` has taken so far."""
        with self._lock:
            return frozenset(self._seen.get((metric, label), ()))

    def bounded(self, metric: str, label: str, value: str) -> str:
        value = value[:MAX_LABEL_CHARS] or NONE
        with self._lock:
            seen = self._seen.setdefault((metric, label), set())
            if value in seen:
                return value
            if len(seen) >= self._limit:
                return OTHER
            seen.add(value)
            return value


LABEL_VALUES = LabelValues()


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: MetricKind
    labels: tuple[str, ...]
    description: str
    unit: str = ""
    buckets: tuple[float, ...] = ()
    """A histogram's bucket bounds (the exporter's `histogram_bucket_overrides`)."""

    def exported(self) -> tuple[str, ...]:
        """The series names Prometheus shows for it: a histogram's `_bucket`, `_sum` and
        `_count`, else the name itself. A counter's name carries its `_total`: the worker's
        exporter adds no suffix, so that the SDK's own counters keep the names its dashboards
        query (`temporal_request`, not `temporal_request_total`)."""
        if self.kind == "histogram":
            return tuple(f"{self.name}_{part}" for part in ("bucket", "sum", "count"))
        return (self.name,)

    def record(self, meter: MetricMeter, value: float, labels: Mapping[str, str]) -> None:
        """Adds `value` to a counter, observes it in a histogram (never below zero: clocks
        differ) or sets a gauge to it, under exactly this metric's labels, each value bounded
        (LabelValues)."""
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}, not {tuple(labels)}")
        attributes = {
            label: LABEL_VALUES.bounded(self.name, label, str(value))
            for label, value in labels.items()
        }
        unit = self.unit or None
        if self.kind == "counter":
            meter.create_counter(self.name, self.description, unit).add(int(value), attributes)
        elif self.kind == "histogram":
            histogram = meter.create_histogram_float(self.name, self.description, unit)
            histogram.record(max(float(value), 0.0), attributes)
        else:
            meter.create_gauge(self.name, self.description, unit).set(int(value), attributes)


# events, by topic and type
EVENTS_PUBLISHED = MetricSpec(
    "coord_events_published_total",
    "counter",
    ("topic", "type"),
    "Events published, counted once each by the workflow they were published to when it took "
    "them in (a chain, or an aggregator they were addressed to): by a CLI, a script, a saga, "
    "an aggregator, a dead letter's replay or an agent's run.",
)
EVENTS_CONSUMED = MetricSpec(
    "coord_events_consumed_total",
    "counter",
    ("topic", "type"),
    "Events a pattern's workflow took in: a chain recorded them, an aggregator matched them to "
    "a slot of its join (a chain's event that fills an aggregator's slot is consumed twice).",
)
EVENTS_REJECTED = MetricSpec(
    "coord_events_rejected_total",
    "counter",
    ("topic", "type"),
    "Events refused (invalid, foreign, a loop, a publication not allowed, their target closing "
    "or ended) and parked in the dead-letter queue; one that did not decode is type `invalid`.",
)
EVENTS_DEAD_LETTERED = MetricSpec(
    "coord_events_dead_lettered_total",
    "counter",
    ("topic", "type"),
    "Events whose processing by an agent ended in the dead-letter queue (its run failed for "
    "good, or never ran).",
)
EVENT_LATENCY = MetricSpec(
    "coord_event_latency_seconds",
    "histogram",
    ("topic",),
    "From an event's time to its consumer taking it in.",
    "s",
    SECONDS_BUCKETS,
)
# agents
AGENT_RUNS = MetricSpec(
    "coord_agent_runs_total",
    "counter",
    ("agent", "kind", "outcome"),
    "Agent runs ended on the worker (each attempt), by outcome: succeeded, cancelled, or the "
    "failure type. A run a breaker or a pool turned away never started and is not counted.",
)
AGENT_RUN_DURATION = MetricSpec(
    "coord_agent_run_duration_seconds",
    "histogram",
    ("agent", "kind", "outcome"),
    "How long an agent's run took on the worker (not its wait for a pool permit).",
    "s",
    SECONDS_BUCKETS,
)
AGENT_RUNS_IN_FLIGHT = MetricSpec(
    "coord_agent_runs_in_flight",
    "gauge",
    ("agent",),
    "Agent runs running now on this worker (summed over workers).",
)
AGENT_EVENTS_PUBLISHED = MetricSpec(
    "coord_agent_events_published_total",
    "counter",
    ("agent",),
    "Events a chain recorded from one of its agents (by their source): its runs' start, "
    "success and failure events, and the results' own publications the chain allowed.",
)
BREAKER_STATE = MetricSpec(
    "coord_breaker_state",
    "gauge",
    ("agent",),
    "The agent's breaker as this worker last saw it (at its last run): 0 closed, 1 half-open, "
    "2 open.",
)
POOL_IN_USE = MetricSpec(
    "coord_pool_in_use",
    "gauge",
    ("agent",),
    "Permits of the agent's pool held across its workers, as this worker last heard from the "
    "agent's ledger.",
)
LLM_TOKENS = MetricSpec(
    "coord_llm_tokens_total",
    "counter",
    ("agent", "model", "direction"),
    "Tokens of `llm` agents' runs as the server reported them: direction `input` (the prompt) "
    "or `output` (the completion); the model as declared.",
)
# patterns
SAGAS = MetricSpec(
    "coord_sagas_total",
    "counter",
    ("outcome",),
    "Sagas ended, by outcome: completed, compensated, compensation_failed, failed.",
)
SAGA_COMPENSATIONS = MetricSpec(
    "coord_saga_compensations_total",
    "counter",
    ("agent",),
    "Compensation steps a saga ran, by compensating agent.",
)
AGGREGATORS = MetricSpec(
    "coord_aggregators_total",
    "counter",
    ("outcome",),
    "Aggregators ended, by outcome: completed, timed_out, cancelled.",
)
PLANS = MetricSpec(
    "coord_plans_total",
    "counter",
    ("outcome",),
    "Plans ended, by outcome: completed, partial, failed, cancelled.",
)
PLAN_TASKS = MetricSpec(
    "coord_plan_tasks_total",
    "counter",
    ("state",),
    "Plan tasks ended, by final state (counted when their plan ends).",
)
VOTES = MetricSpec(
    "coord_votes_total",
    "counter",
    ("outcome",),
    "Votes decided, by outcome: decided, rejected, no_quorum, cancelled.",
)
DLQ_PARKED = MetricSpec(
    "coord_dlq_parked_total",
    "counter",
    ("failure_type",),
    "Dead letters parked, by failure type.",
)
DLQ_REPLAYED = MetricSpec(
    "coord_dlq_replayed_total",
    "counter",
    ("failure_type", "outcome"),
    "Dead letters replayed, by failure type and how the replay ended: delivered or not_delivered.",
)
CHAIN_RUNS_QUEUED = MetricSpec(
    "coord_chain_runs_queued_total",
    "counter",
    ("agent",),
    "Agent runs a chain queued (depth: queued minus dispatched).",
)
CHAIN_RUNS_DISPATCHED = MetricSpec(
    "coord_chain_runs_dispatched_total",
    "counter",
    ("agent",),
    "Queued agent runs a chain started.",
)

METRICS: tuple[MetricSpec, ...] = (
    EVENTS_PUBLISHED,
    EVENTS_CONSUMED,
    EVENTS_REJECTED,
    EVENTS_DEAD_LETTERED,
    EVENT_LATENCY,
    AGENT_RUNS,
    AGENT_RUN_DURATION,
    AGENT_RUNS_IN_FLIGHT,
    AGENT_EVENTS_PUBLISHED,
    BREAKER_STATE,
    POOL_IN_USE,
    LLM_TOKENS,
    SAGAS,
    SAGA_COMPENSATIONS,
    AGGREGATORS,
    PLANS,
    PLAN_TASKS,
    VOTES,
    DLQ_PARKED,
    DLQ_REPLAYED,
    CHAIN_RUNS_QUEUED,
    CHAIN_RUNS_DISPATCHED,
)

BREAKER_VALUES: Mapping[str, int] = {"closed": 0, "half_open": 1, "open": 2}
"""`coord_breaker_state`'s value for each state of a breaker."""


def parked_event(
    failure_type: str, *, has_event: bool, target_agent: str | None
) -> MetricSpec | None:
    """The event counter a parked dead letter counts in: an event an agent's run was for is
    dead-lettered; one parked without an agent was refused (a workflow's checks, or its target
    had ended), as was an envelope that did not decode (`invalid_envelope`, no event); a letter
    of another signal that did not decode (attach, rerun, a run's outcome) is no event."""
    if has_event:
        return EVENTS_DEAD_LETTERED if target_agent else EVENTS_REJECTED
    return EVENTS_REJECTED if failure_type == "invalid_envelope" else None


def exported_names() -> set[str]:
    """Every series name the worker's endpoint can show for the product's metrics."""
    return {name for spec in METRICS for name in spec.exported()}


def prometheus_buckets() -> dict[str, list[float]]:
    """The histograms' bucket bounds, by name, for the exporter."""
    return {spec.name: list(spec.buckets) for spec in METRICS if spec.buckets}
