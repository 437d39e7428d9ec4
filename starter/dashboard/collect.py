"""One frame of the dashboard from every source at once; a source that does not answer is shown
as such on the frame (the bus degraded, or down without Temporal), never raised."""

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

import httpx
from temporalio.client import Client
from temporalio.service import RPCError

from coord.infra.temporal import ServerUnreachable
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.declared import DeclaredAgents
from coord.models.ops.dashboard import EventFigures, PatternFigures, Snapshot, Source, snapshot
from coord.starter.dashboard.metrics import (
    SOURCE_ERRORS,
    EndpointsSource,
    MetricsSource,
    PrometheusSource,
    failed,
)
from coord.starter.dashboard.temporal import TemporalReader

PROMETHEUS_ENV = "COORD_PROMETHEUS_URL"
ENDPOINTS_ENV = "COORD_METRICS_ENDPOINTS"
SOURCE_TIMEOUT = 15.0
"""Seconds a frame waits for one source before showing it as not answering."""
TEMPORAL = "temporal"
NO_METRICS = "no metrics source: give --prometheus URL or --metrics URL,..."


def endpoints_from(given: Sequence[str]) -> list[str]:
    """`--metrics` URLs (each may itself be comma-separated), else $COORD_METRICS_ENDPOINTS."""
    raw = list(given) or [os.environ.get(ENDPOINTS_ENV, "")]
    return [url.strip() for item in raw for url in item.split(",") if url.strip()]


def metrics_source(
    prometheus: str | None, endpoints: Sequence[str], http: httpx.AsyncClient, *, once: bool
) -> MetricsSource | None:
    """A Prometheus server when one is configured (--prometheus, $COORD_PROMETHEUS_URL), else
    the workers' endpoints, else none (the metric sections say so)."""
    url = prometheus or os.environ.get(PROMETHEUS_ENV)
    if url:
        return PrometheusSource(url, http)
    urls = endpoints_from(endpoints)
    return EndpointsSource(urls, http, from_zero=once) if urls else None


class Dashboard:
    """Frames, each from the metrics source and the Temporal server read at once. The Temporal
    client is made on the first frame that reaches the server and kept."""

    def __init__(
        self,
        metrics: MetricsSource | None,
        connect: Callable[[], Awaitable[Client]],
        registry: AgentRegistry | DeclaredAgents,
        queue: str,
    ) -> None:
        self.metrics = metrics
        self.connect = connect
        self.registry = registry
        self.queue = queue
        self.client: Client | None = None

    async def frame(self) -> Snapshot:
        (figures, metric_sources), (patterns, temporal) = await asyncio.gather(
            self.read_metrics(), self.read_temporal()
        )
        missing = NO_METRICS if self.metrics is None else "no metrics source answered"
        return snapshot(
            datetime.now(UTC), figures, patterns, [*metric_sources, temporal], no_figures=missing
        )

    async def read_metrics(self) -> tuple[EventFigures | None, list[Source]]:
        if self.metrics is None:
            return None, []
        try:
            return await asyncio.wait_for(self.metrics.read(), SOURCE_TIMEOUT)
        except TimeoutError as error:
            return None, [failed("metrics", error)]

    async def read_temporal(self) -> tuple[PatternFigures | None, Source]:
        try:
            if self.client is None:
                self.client = await self.connect()
            reader = TemporalReader(self.client, self.registry, self.queue)
            patterns = await asyncio.wait_for(reader.read(), SOURCE_TIMEOUT)
        except (RPCError, ServerUnreachable, *SOURCE_ERRORS) as error:
            return None, failed(TEMPORAL, error)
        return patterns, Source(name=TEMPORAL, ok=True)
