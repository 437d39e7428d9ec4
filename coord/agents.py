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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    __all__: list[str]  # the names below, served by `coord._lazy`
    from coord.models.events.envelope import EventEnvelope as EventEnvelope
    from coord.models.events.envelope import Priority as Priority
    from coord.models.mesh.agents import MAX_PROGRESS as MAX_PROGRESS
    from coord.models.mesh.agents import RESERVED_RESULT_KEYS as RESERVED_RESULT_KEYS
    from coord.models.mesh.agents import AgentContext as AgentContext
    from coord.models.mesh.agents import AgentFn as AgentFn
    from coord.models.mesh.agents import AgentProgress as AgentProgress
    from coord.models.mesh.agents import AgentRegistry as AgentRegistry
    from coord.models.mesh.agents import AgentResult as AgentResult
    from coord.models.mesh.agents import ProgressReporter as ProgressReporter
    from coord.models.mesh.agents import PublishRequest as PublishRequest
    from coord.models.wire.contract import FailureType as FailureType
    from coord.models.wire.contract import Health as Health
    from coord.models.wire.contract import failure as failure
else:
    from coord._lazy import LazyExports

    _EXPORTS = LazyExports(__name__, __file__)
    __getattr__, __dir__ = _EXPORTS.attribute, _EXPORTS.listing
