"""The hand-written saga's activities (`bench.baseline_saga`): the demo agents' trivial work as
plain Temporal activities, with the spec's timeouts and retry policies. A module of their own,
as temporalio/samples-python keeps a workflow's activities, so the workflows' module imports
them passed through."""

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.common import RetryPolicy

from coord.models.mesh.demo import FEATURE_DEPLOYMENT_AGENTS

# The spec's defaults (5m per step, 4 attempts, 1s..30s exponential backoff, no retry on
# invalid_payload/unauthorized), its 2m for DeployToProduction, and its compensation retries.
STEP_TIMEOUT = timedelta(minutes=5)
PRODUCTION_TIMEOUT = timedelta(minutes=2)
RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=4,
    non_retryable_error_types=["invalid_payload", "unauthorized"],
)
COMPENSATION_RETRY = replace(RETRY, maximum_interval=timedelta(minutes=1), maximum_attempts=0)


def _done(summary: str, payload: dict[str, Any]) -> dict[str, Any]:
    """What a demo agent does: a summary, a hash of the activity's identity, the input."""
    info = activity.info()
    ref = hashlib.sha256(f"{info.workflow_id}/{info.activity_id}".encode()).hexdigest()[:8]
    return {"summary": summary, "ref": ref, **payload}


Step = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def _baseline_step(name: str, summary: str) -> Step:
    """The hand-written side's activity `name`: the demo agent's trivial work, as a plain
    Temporal activity."""

    async def step(payload: dict[str, Any]) -> dict[str, Any]:
        return _done(summary, payload)

    return activity.defn(name=name)(step)


BASELINE_STEPS = {
    name: _baseline_step(name, summary) for name, summary in FEATURE_DEPLOYMENT_AGENTS.items()
}


def steps_queue(workflow_queue: str) -> str:
    """The task queue of the hand-written saga's activities when they run on another queue."""
    return f"{workflow_queue}-steps"
