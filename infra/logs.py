"""structlog, configured once for every process: console lines in a terminal, JSON otherwise.

The SDK's replay-safe `workflow.logger` and `activity.logger` are stdlib loggers; their records go
through the same processors, with the workflow id and correlation id lifted into the line; a
line written while an agent runs carries its run's ids (`coord.infra.run_context.RunContext`), and
the trace and span ids when tracing is on."""

import logging
import sys
from typing import Any

import structlog
from opentelemetry import trace
from structlog.typing import EventDict, WrappedLogger
from temporalio import activity, workflow
from temporalio.runtime import LogForwardingConfig, LoggingConfig, TelemetryFilter

_TEMPORAL_CONTEXT = {
    "temporal_workflow": ("workflow_id", "workflow_type", "run_id"),
    "temporal_activity": ("workflow_id", "activity_type", "attempt"),
}


def _lift_temporal_context(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    for key, fields in _TEMPORAL_CONTEXT.items():
        context: dict[str, Any] = event.pop(key, None) or {}
        for field in fields:
            if field in context:
                event.setdefault(field, context[field])
    return event


CORE_LOGGER = "temporalio.core"
"""The logger the SDK core's (Rust) log lines arrive on, their target after it
(`temporalio.core-sdk_core::temporalio_client::retry`)."""
CORE_ENTRY = "temporal_log"
"""The attribute a forwarded core record carries the core's own entry in: its fields are in the
message already, and the object itself renders as nothing a reader can use."""

CORE_RETRIES = f"{CORE_LOGGER}-sdk_core::temporalio_client::retry"
"""The logger of the core's lines about a call it retries: one per try while the server is
away, each with the gRPC status it got."""
SERVER_AWAY = "the Temporal server does not answer; retrying"
"""What a command says, once, instead of those lines."""


class RetriesSaidOnce(logging.Filter):
    """For a command a person runs (a handler's filter): the core's lines about the calls it
    retries (CORE_RETRIES) said once, in words (SERVER_AWAY), the rest left out: left alone,
    a `--wait` the server dies under prints a dozen gRPC dumps before the command's own line,
    which says what happened (unreachable, exit 6). A worker keeps every line, for its
    operator."""

    def __init__(self) -> None:
        super().__init__()
        self._said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != CORE_RETRIES:
            return True
        if self._said:
            return False
        self._said = True
        record.msg, record.args = SERVER_AWAY, ()
        return True


def core_logging() -> LoggingConfig:
    """The SDK core's logging as a runtime of this project configures it: the SDK's default
    levels (its own WARN, its libraries' ERROR), forwarded to Python logging (CORE_LOGGER), so
    they are rendered like every other line, on stderr, JSON when not on a terminal. Left to
    the SDK, the core writes them to stdout, ANSI-coloured, into a command's `--json` output or
    a worker's JSON log."""
    return LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(
            logger=logging.getLogger(CORE_LOGGER), prepend_target_on_message=False
        ),
    )


def _drop_core_entry(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    event.pop(CORE_ENTRY, None)
    return event


def _add_trace_ids(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    """The trace and span the line was written in, when tracing is on and that trace is
    recorded (not one of the untraced reads, `tracing.untraced`, which no exporter has)."""
    span = trace.get_current_span().get_span_context()
    if span.is_valid and span.trace_flags.sampled:
        event.setdefault("trace_id", format(span.trace_id, "032x"))
        event.setdefault("span_id", format(span.span_id, "016x"))
    return event


def configure_logging(
    level: str = "INFO", *, json: bool | None = None, retries_once: bool = False
) -> None:
    """Every line through structlog, at `level`; `retries_once`: the core's retry lines said
    once (`RetriesSaidOnce`), for a command a person runs."""
    json = not sys.stderr.isatty() if json is None else json
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        _drop_core_entry,
        _lift_temporal_context,
        _add_trace_ids,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler()
    if retries_once:
        handler.addFilter(RetriesSaidOnce())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info if json else _identity,
                renderer,
            ],
        )
    )
    workflow.logger.workflow_info_on_message = False
    activity.logger.activity_info_on_message = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def _identity(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    return event


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
