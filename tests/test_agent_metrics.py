"""What an activity records on a worker without a metrics endpoint: nothing. The SDK hands such
a worker's activities its no-op meter; an agent run there builds no metric and bounds no label
value (`coord.activities.metrics`), while a worker with an endpoint records each."""

from temporalio.common import MetricMeter
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment

from coord import testing
from coord.activities import metrics
from coord.models.mesh.ledger import PoolState
from coord.models.ops.metrics import LABEL_VALUES, POOL_IN_USE

POOL = PoolState(size=2, in_use=1, waiting=0)


def _labelled(agent: str) -> bool:
    """Whether `agent` is among the label values the process kept for the pool gauge (the
    label bounding every recorded metric goes through)."""
    return agent in LABEL_VALUES.seen(POOL_IN_USE.name, "agent")


def test_an_activity_on_a_worker_without_metrics_builds_none() -> None:
    agent = testing.unique("unmetered")
    environment = ActivityEnvironment()
    assert environment.metric_meter is MetricMeter.noop
    environment.run(metrics.pool_seen, agent, POOL)
    assert not _labelled(agent)


def test_an_activity_on_a_worker_with_metrics_records_them() -> None:
    agent = testing.unique("metered")
    runtime = Runtime(telemetry=TelemetryConfig(metrics=MetricBuffer(100)))
    environment = ActivityEnvironment()
    environment.metric_meter = runtime.metric_meter
    environment.run(metrics.pool_seen, agent, POOL)
    assert _labelled(agent)
