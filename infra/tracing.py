"""One trace per correlation: OpenTelemetry through the SDK's tracing interceptor.

Tracing is on when the standard `OTEL_*` variables name an exporter endpoint
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, unless
`OTEL_TRACES_EXPORTER=none`), or when a process installed a tracer provider of its own before
connecting (tests do, with an in-memory exporter). Then:

- the client (CLI, API, worker) and the worker carry `temporalio.contrib.opentelemetry`'s
  `TracingInterceptor`, so spans of starts, signals, workflows and activities link up across the
  server;
- a call that carries an event or a spec with a correlation id runs under a parent whose trace
  id is derived from the correlation id (`correlation_parent`), so every publish of one
  correlation, from any process, lands in the same trace;
- the correlation id travels as OpenTelemetry baggage with the context, and `CorrelationSpans`
  writes it (`coord.correlation_id`) on every span started under it, in any process;
- an agent run's span carries its event's ids and type and the agent (`run_context.RunContext`,
  the worker's side, kept apart so that a client loads no worker code).
"""

import hashlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import baggage, context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic import BaseModel
from temporalio import client as temporal_client

from coord.models.wire.contract import LEDGER_QUERY

__all__ = [
    "CORRELATION_ATTRIBUTE",
    "CorrelationSpans",
    "client_interceptors",
    "configure_tracing",
    "correlation_parent",
    "event_attributes",
    "flush_tracing",
    "tracing_on",
    "untraced",
]

CORRELATION_ATTRIBUTE = "coord.correlation_id"
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def _exporting() -> bool:
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(os.environ.get(name) for name in _ENDPOINT_VARIABLES)


def tracing_on() -> bool:
    """Whether spans go anywhere: an SDK tracer provider is installed (by `configure_tracing`
    or by the process itself)."""
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def configure_tracing(service: str) -> bool:
    """Install a tracer provider exporting over OTLP when the `OTEL_*` variables ask for it
    (the exporter reads its endpoint, headers and protocol from them); keep a provider the
    process installed itself. Whether tracing is on."""
    if tracing_on() or not _exporting():
        return tracing_on()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service)})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(CorrelationSpans())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True


class CorrelationSpans(SpanProcessor):
    """Writes the correlation id the context carries as baggage on every span started under
    it: a workflow's, an activity's or a client call's, whichever process starts it."""

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        correlation_id = baggage.get_baggage(CORRELATION_ATTRIBUTE, parent_context)
        if isinstance(correlation_id, str):
            span.set_attribute(CORRELATION_ATTRIBUTE, correlation_id)

    def on_end(self, span: ReadableSpan) -> None:
        return None


def _trace_ids(correlation_id: str) -> tuple[int, int]:
    digest = hashlib.sha256(correlation_id.encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


@contextmanager
def correlation_parent(correlation_id: str | None) -> Iterator[None]:
    """Run the block under the correlation's trace (a remote parent whose trace id is derived
    from the correlation id), with the id as baggage for every span below."""
    if correlation_id is None or not tracing_on():
        yield
        return
    trace_id, span_id = _trace_ids(correlation_id)
    parent = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id,
            span_id,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
    )
    ctx = baggage.set_baggage(
        CORRELATION_ATTRIBUTE, correlation_id, trace.set_span_in_context(parent)
    )
    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


def event_attributes(envelope: Mapping[str, Any]) -> dict[str, str]:
    """The span attributes of an event (an envelope as JSON): its ids, type and topic."""
    header = _mapping(envelope.get("event"))
    values = {
        "coord.event_id": header.get("id"),
        "coord.causation_id": header.get("causation_id"),
        "coord.event_type": header.get("type"),
        "coord.topic": _mapping(envelope.get("routing")).get("topic"),
    }
    return {name: str(value) for name, value in values.items() if value is not None}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _correlation_of(args: Any) -> tuple[str | None, dict[str, str]]:
    """The correlation id and event attributes of a call's first argument: an event envelope,
    or a spec or input naming a correlation id (as JSON or as a model)."""
    first: Any = args[0] if args else None
    if isinstance(first, BaseModel):
        first = first.model_dump(mode="json")
    first = _mapping(first)
    header = _mapping(first.get("event"))
    correlation_id = header.get("correlation_id") or first.get("correlation_id")
    return (str(correlation_id) if correlation_id else None), event_attributes(first)


UNTRACED_QUERIES = frozenset({LEDGER_QUERY})
"""Reads the workers make of their own accord, whatever runs: the agent monitor reads every
ledger each few seconds. Traced, they were a steady stream of spans (about 13 a second for
25 agents, idle) that belong to no correlation."""

_UNSAMPLED = trace.NonRecordingSpan(
    trace.SpanContext(trace_id=1, span_id=1, is_remote=False, trace_flags=trace.TraceFlags(0))
)
"""A parent that is not sampled: spans started under it, here and (by the header the tracing
interceptor sends) in the worker that answers, are not recorded either."""


@contextmanager
def untraced() -> Iterator[None]:
    """Run the block under a parent that is not sampled: what it starts or asks of a workflow
    is not recorded, nor (the header carrying the unsampled parent) whatever that workflow and
    its activities do after. The workers' own reads: the ledger queries, and the agent monitor,
    whose reading every few seconds was otherwise a trace that never ends."""
    token = context.attach(trace.set_span_in_context(_UNSAMPLED))
    try:
        yield
    finally:
        context.detach(token)


class _CorrelationOutbound(temporal_client.OutboundInterceptor):
    """Starts and signals that carry a correlation run under its trace, and the workers' own
    reads under none (`UNTRACED_QUERIES`): outside the tracing interceptor, so its spans start
    there."""

    async def start_workflow(
        self, input: temporal_client.StartWorkflowInput
    ) -> temporal_client.WorkflowHandle[Any, Any]:
        with correlation_parent(_correlation_of(_carried(input))[0]):
            return await super().start_workflow(input)

    async def signal_workflow(self, input: temporal_client.SignalWorkflowInput) -> None:
        with correlation_parent(_correlation_of(input.args)[0]):
            return await super().signal_workflow(input)

    async def query_workflow(self, input: temporal_client.QueryWorkflowInput) -> Any:
        if input.query not in UNTRACED_QUERIES:
            return await super().query_workflow(input)
        with untraced():
            return await super().query_workflow(input)


class _EventOutbound(temporal_client.OutboundInterceptor):
    """An event's ids and type on the span of the call that carries it (inside the tracing
    interceptor, whose span is then the current one)."""

    async def start_workflow(
        self, input: temporal_client.StartWorkflowInput
    ) -> temporal_client.WorkflowHandle[Any, Any]:
        trace.get_current_span().set_attributes(_correlation_of(_carried(input))[1])
        return await super().start_workflow(input)

    async def signal_workflow(self, input: temporal_client.SignalWorkflowInput) -> None:
        trace.get_current_span().set_attributes(_correlation_of(input.args)[1])
        return await super().signal_workflow(input)


def _carried(input: temporal_client.StartWorkflowInput) -> Any:
    """What a start carries: its start signal's event when it has one, else its input."""
    return input.start_signal_args if input.start_signal else input.args


class _Outbound(temporal_client.Interceptor):
    def __init__(self, outbound: type[temporal_client.OutboundInterceptor]) -> None:
        self._outbound = outbound

    def intercept_client(
        self, next: temporal_client.OutboundInterceptor
    ) -> temporal_client.OutboundInterceptor:
        return self._outbound(next)


def client_interceptors() -> list[temporal_client.Interceptor]:
    """A client's interceptors when tracing is on: the correlation's trace outermost, then the
    SDK's tracing interceptor, then the event's attributes on its spans; none otherwise, which
    costs nothing. A worker built on the client takes the tracing interceptor's worker side."""
    if not tracing_on():
        return []
    # Loaded only when tracing is on: the SDK's tracing module loads its worker side too, which
    # a client (a script's `import coord`) otherwise never needs.
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [_Outbound(_CorrelationOutbound), TracingInterceptor(), _Outbound(_EventOutbound)]


def flush_tracing() -> None:
    """Send the spans still batched (a process leaving without its interpreter's teardown
    would drop them)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()
