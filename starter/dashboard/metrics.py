"""Where the dashboard's event figures come from: a Prometheus server's query API (sums over
every worker it scrapes, the last hour by `increase()`), else the workers' own metrics
endpoints, scraped and summed here (the increase since the dashboard's first scrape)."""

import asyncio
import json
import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

from coord.models.ops.dashboard import (
    QUERIES,
    RATE_WINDOW,
    ByLabel,
    EventFigures,
    FigureQuery,
    IncreaseTracker,
    Labels,
    SeriesKey,
    Source,
    rates,
    sum_by,
)

WINDOW = "1h"
MAX_BODY = 16 * 1024 * 1024
"""Bytes of one answer read at most: an endpoint or server sending more is refused, not read
into memory whole."""
TIMEOUT = httpx.Timeout(10.0)


class MetricsError(Exception):
    """A source answered with something that is not what was asked for."""


class MetricsSource(Protocol):
    async def read(self) -> tuple[EventFigures | None, list[Source]]:
        """The figures (None when no part of the source answered) and how each part fared."""
        ...


async def fetch_text(http: httpx.AsyncClient, url: str, **params: str) -> str:
    """The body of a GET, refused past `MAX_BODY` bytes and on any status but 200."""
    async with http.stream("GET", url, params=params, timeout=TIMEOUT) as response:
        if response.status_code != 200:
            raise MetricsError(f"HTTP {response.status_code} from {url}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_BODY:
                raise MetricsError(f"{url} sent more than {MAX_BODY} bytes")
    return body.decode("utf-8", errors="replace")


def failed(name: str, error: Exception) -> Source:
    return Source(name=name, ok=False, error=str(error) or type(error).__name__)


SOURCE_ERRORS = (httpx.HTTPError, MetricsError, ValueError, OSError, asyncio.TimeoutError)
"""What a source that is down, slow or mistaken raises: shown on the dashboard, not raised."""


# --- A Prometheus server --------------------------------------------------------------------


def promql(query: FigureQuery) -> str:
    """The PromQL of one figure, summed over every worker and every other label."""
    if query.mode == "current":
        inner = query.name
    elif query.mode == "rate":
        inner = f"rate({query.name}[{RATE_WINDOW}])"
    else:
        inner = f"increase({query.name}[{WINDOW}])"
    return f"sum by ({query.label}) ({inner})"


def vector_by(answer: Any, label: str) -> ByLabel:
    """An instant-vector answer of the query API as label value -> number (NaN reads 0: a
    series with no sample in its window)."""
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise MetricsError(f"the query was refused: {str(answer)[:200]}")
    figures: ByLabel = {}
    for item in answer["data"]["result"]:
        value = float(item["value"][1])
        figures[str(item["metric"].get(label, ""))] = 0.0 if math.isnan(value) else value
    return figures


class PrometheusSource:
    """Instant queries against a Prometheus server's HTTP API, every figure at once."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url = url.rstrip("/")
        self.http = http
        self.name = f"prometheus {self.url}"

    async def query(self, query: FigureQuery) -> ByLabel:
        text = await fetch_text(self.http, f"{self.url}/api/v1/query", query=promql(query))
        try:
            return vector_by(json.loads(text), query.label)
        except (KeyError, IndexError, TypeError) as error:
            raise MetricsError(f"not a query answer: {error}") from None

    async def read(self) -> tuple[EventFigures | None, list[Source]]:
        try:
            answers = await asyncio.gather(*(self.query(q) for q in QUERIES.values()))
        except SOURCE_ERRORS as error:
            return None, [failed(self.name, error)]
        values = dict(zip(QUERIES, answers, strict=True))
        return EventFigures(window="last hour", values=values), [Source(name=self.name, ok=True)]


# --- The workers' endpoints -----------------------------------------------------------------

Readings = dict[tuple[str, Labels], float]
COUNTERS = {q.name for q in QUERIES.values() if q.mode != "current"}
GAUGES = {q.name for q in QUERIES.values() if q.mode == "current"}


def parse_exposition(text: str) -> tuple[Readings, Readings]:
    """The counter and gauge series the dashboard reads, from Prometheus text exposition."""
    counters: Readings = {}
    gauges: Readings = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if sample.name in COUNTERS:
                counters[key] = sample.value
            elif sample.name in GAUGES:
                gauges[key] = sample.value
    return counters, gauges


class EndpointsSource:
    """Every worker's endpoint scraped on each read, its series summed across workers.
    Counters read as their increase since this source's first scrape (or, `from_zero`, as
    their whole value: one reading, for `--once`); gauges as their values now."""

    def __init__(
        self, urls: Sequence[str], http: httpx.AsyncClient, *, from_zero: bool = False
    ) -> None:
        self.urls = list(urls)
        self.http = http
        self.tracker = IncreaseTracker(from_zero=from_zero)
        self.window = (
            "since each worker started; no Prometheus server: one reading of their endpoints"
            if from_zero
            else f"since {datetime.now(UTC):%H:%M:%S} UTC, the dashboard's first scrape; "
            "no Prometheus server: the increase since then"
        )
        self._previous: tuple[float, dict[SeriesKey, float]] | None = None

    async def scrape(self, url: str) -> tuple[Readings, Readings]:
        return parse_exposition(await fetch_text(self.http, url))

    async def read(self) -> tuple[EventFigures | None, list[Source]]:
        results = await asyncio.gather(
            *(self.scrape(url) for url in self.urls), return_exceptions=True
        )
        sources: list[Source] = []
        gauges: dict[SeriesKey, float] = {}
        for url, result in zip(self.urls, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, SOURCE_ERRORS):
                    raise result
                sources.append(failed(f"metrics {url}", result))
                continue
            counters, current = result
            self.tracker.observe(url, counters)
            gauges.update({(url, name, labels): v for (name, labels), v in current.items()})
            sources.append(Source(name=f"metrics {url}", ok=True))
        if not any(source.ok for source in sources):
            return None, sources
        return self.figures(gauges), sources

    def figures(self, gauges: dict[SeriesKey, float]) -> EventFigures:
        now, increases = time.monotonic(), self.tracker.increases()
        then, before = self._previous or (now, increases)
        self._previous = (now, increases)
        per_second = rates(before, increases, now - then)
        series = {"increase": increases, "current": gauges, "rate": per_second}
        values = {
            figure: sum_by(series[query.mode], query.name, query.label)
            for figure, query in QUERIES.items()
        }
        return EventFigures(window=self.window, values=values)
