"""The agent SDK, in one import: what an agent's code is written against.

An agent is a function of the event and its run's context, returning a mapping (its result's
data; `publish` and `metadata` keys ask for events and report metadata) or None:

    from coord.agents import AgentContext, EventEnvelope, FailureType, failure

    async def review(event: EventEnvelope, context: AgentContext) -> dict[str, object]:
        context.progress("Reading the diff")
        if "diff" not in event.payload:
            raise failure(FailureType.INVALID_PAYLOAD, "no diff to review")  # not retried
        return {"verdict": "ok", "metadata": {"quality_score": 0.9}}

Declare it in an agents file (`kind: python`, `callable: mypkg.review:review`) or register it on
an `AgentRegistry` in code. A failure raised with `failure(type, message)` is typed: the step's
or subscription's retry policy reads its type (`FailureType`, or any string of your own), and
`non_retryable=True` or `retry_after=` override the policy for that failure. Any other exception
fails the attempt typed by its class name (`KeyError`), retried by the policy. docs/api.md says
more.

Importing this module loads neither the worker nor Temporal's worker: an agent's module is
imported by the worker that runs it, and by nothing else."""

from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.mesh.agents import (
    MAX_PROGRESS,
    RESERVED_RESULT_KEYS,
    AgentContext,
    AgentFn,
    AgentProgress,
    AgentRegistry,
    AgentResult,
    ProgressReporter,
    PublishRequest,
)
from coord.models.wire.contract import FailureType, Health, failure

__all__ = [
    "MAX_PROGRESS",
    "RESERVED_RESULT_KEYS",
    "AgentContext",
    "AgentFn",
    "AgentProgress",
    "AgentRegistry",
    "AgentResult",
    "EventEnvelope",
    "FailureType",
    "Health",
    "Priority",
    "ProgressReporter",
    "PublishRequest",
    "failure",
]
