"""One frame of the dashboard from every source at once; a source that does not answer is shown
as such on the frame (the bus degraded, or down without Temporal), never raised."""

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

import httpx
from pydantic import TypeAdapter, ValidationError
from temporalio.client import Client
from temporalio.service import RPCError

from coord.infra.temporal import ServerUnreachable
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.config import HttpUrl
from coord.models.mesh.declared import DeclaredAgents
from coord.models.ops.dashboard import EventFigures, PatternFigures, Snapshot, Source, snapshot
from coord.models.wire.specs import SpecError
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
HTTP_URL = TypeAdapter(HttpUrl)
"""The sources' URLs are held to the rule an http agent's `url` is."""
NO_METRICS = "no metrics source: give --prometheus URL or --metrics URL,..."


def endpoints_from(given: Sequence[str]) -> list[str]:
    """`--metrics` URLs (each may itself be comma-separated), else $COORD_METRICS_ENDPOINTS;
    each checked to be an http(s) URL (SpecError naming where it came from)."""
    raw, origin = (
        (list(given), "--metrics")
        if given
        else ([os.environ.get(ENDPOINTS_ENV, "")], f"${ENDPOINTS_ENV}")
    )
    urls = [url.strip() for item in raw for url in item.split(",") if url.strip()]
    return [checked_url(url, origin, "http://HOST:PORT/metrics") for url in urls]


def checked_url(url: str, origin: str, shape: str) -> str:
    """`url` when it is an http(s) URL with a host; otherwise a SpecError naming the option or
    variable it came from, before anything is read (a URL without its scheme, say, would only
    show as a source that does not answer). The rule an http agent's `url` is held to."""
    try:
        return HTTP_URL.validate_python(url)
    except ValidationError:
        raise SpecError(f"{origin}: {url!r} is not an http(s) URL ({shape})") from None


def metrics_source(
    prometheus: str | None, endpoints: Sequence[str], http: httpx.AsyncClient, *, once: bool
) -> MetricsSource | None:
    """A Prometheus server when one is configured (--prometheus, $COORD_PROMETHEUS_URL), else
    the workers' endpoints, else none (the metric sections say so). A URL that is not one is
    refused (SpecError)."""
    origin = "--prometheus" if prometheus else f"${PROMETHEUS_ENV}"
    if url := prometheus or os.environ.get(PROMETHEUS_ENV):
        return PrometheusSource(checked_url(url, origin, "http://HOST:9090"), http)
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
