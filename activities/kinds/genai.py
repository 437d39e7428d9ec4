"""An `llm` agent's chat completion as an OpenTelemetry span of the GenAI semantic conventions
(`gen_ai.*` attributes), so generic GenAI trace viewers show its model, its tokens and the
conversation (the correlation) it belongs to. Without tracing the tracer is a no-op."""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace

_tracer = trace.get_tracer("coord.agents.llm")


@contextmanager
def chat_span(model: str, base_url: str | None, correlation_id: str | None) -> Iterator[trace.Span]:
    """The span of one chat completion, named as the conventions ask (`chat {model}`)."""
    attributes: dict[str, str | int] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model,
    }
    if correlation_id:
        attributes["gen_ai.conversation.id"] = correlation_id
        attributes["coord.correlation_id"] = correlation_id
    if base_url and (server := urlsplit(base_url)).hostname:
        attributes["server.address"] = server.hostname or ""
        if server.port:
            attributes["server.port"] = server.port
    with _tracer.start_as_current_span(
        f"chat {model}", kind=trace.SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield span


def record_usage(span: trace.Span, metadata: Mapping[str, Any]) -> None:
    """The answer's model and token counts (the run's result `metadata`) on the span."""
    usage = metadata.get("usage") or {}
    if metadata.get("model"):
        span.set_attribute("gen_ai.response.model", str(metadata["model"]))
    span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("prompt_tokens", 0)))
    span.set_attribute("gen_ai.usage.output_tokens", int(usage.get("completion_tokens", 0)))
