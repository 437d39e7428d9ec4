"""An agent run's context, on its span and its log lines: the worker's side of tracing
(`coord.infra.tracing`), apart from it so that a client, which never runs an agent, loads no
worker code."""

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import structlog
from opentelemetry import trace
from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput
from temporalio.worker import Interceptor as WorkerInterceptor

from coord.infra.tracing import CORRELATION_ATTRIBUTE, event_attributes
from coord.models.mesh.agents import AgentRequest

BATCHED_RUN_SPAN = "BatchedRun:run_agent"
"""The span of one run in a batch of local runs, under the batch's `RunActivity:run_agents`."""

_tracer = trace.get_tracer(__name__)


@contextmanager
def agent_run_context(request: AgentRequest, *, own_span: bool = False) -> Iterator[None]:
    """`request`'s run: its event and agent on the current span (on a span of its own, for a
    run in a batch, with `own_span`) and on every log line written meanwhile."""
    envelope = request.event.event
    fields = {
        "correlation_id": envelope.correlation_id,
        "causation_id": envelope.causation_id,
        "event_id": envelope.id,
        "workflow_id": activity.info().workflow_id,
        "agent": request.agent,
    }
    bound = structlog.contextvars.bound_contextvars(
        **{key: value for key, value in fields.items() if value is not None}
    )
    if not trace.get_current_span().is_recording():
        with bound:
            yield
        return
    current = nullcontext(trace.get_current_span())
    with _tracer.start_as_current_span(BATCHED_RUN_SPAN) if own_span else current as span:
        span.set_attributes(event_attributes(request.event.model_dump(mode="json")))
        span.set_attribute("coord.agent", request.agent)
        if envelope.correlation_id:
            span.set_attribute(CORRELATION_ATTRIBUTE, envelope.correlation_id)
        with bound:
            yield


class _RunContextInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        request = input.args[0] if input.args else None
        if not isinstance(request, AgentRequest):
            return await super().execute_activity(input)
        with agent_run_context(request):
            return await super().execute_activity(input)


class RunContext(WorkerInterceptor):
    """An agent run's event and agent, on its span (when tracing is on) and on every log line
    written while it runs: correlation id, causation id, event id, workflow id, agent."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _RunContextInbound(next)
