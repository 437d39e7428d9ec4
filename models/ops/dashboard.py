"""The monitoring dashboard's arithmetic: what the workers' metrics and the Temporal server say,
turned into the seed's four sections (throughput, by topic, agent activity, health) and the
pattern panels beside them.

Figures hold across every worker, never from one process's memory: a Prometheus server answers
sums over all workers, or the workers' own endpoints are scraped and their series summed here.
Pure: the reading is starter/dashboard/."""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from coord.models.ops.metrics import exported_names

Mode = Literal["increase", "current", "rate"]
"""How a figure reads a metric: a counter's increase over the window, a gauge's value now, or
a counter's recent per-second rate (the charts)."""


class FigureQuery(BaseModel):
    """One figure: a metric of the catalogue summed by one of its labels."""

    name: str
    label: str
    mode: Mode = "increase"


RATE_WINDOW = "2m"
"""What a Prometheus server averages a rate over: a few scrapes at the usual 15-30 s."""

QUERIES: dict[str, FigureQuery] = {
    "published": FigureQuery(name="coord_events_published_total", label="topic"),
    "consumed": FigureQuery(name="coord_events_consumed_total", label="topic"),
    "rejected": FigureQuery(name="coord_events_rejected_total", label="topic"),
    "dead_lettered": FigureQuery(name="coord_events_dead_lettered_total", label="topic"),
    "agent_published": FigureQuery(name="coord_agent_events_published_total", label="agent"),
    "agent_runs": FigureQuery(name="coord_agent_runs_total", label="agent"),
    "agent_in_flight": FigureQuery(
        name="coord_agent_runs_in_flight", label="agent", mode="current"
    ),
    "latency_sum": FigureQuery(name="coord_event_latency_seconds_sum", label="topic"),
    "latency_count": FigureQuery(name="coord_event_latency_seconds_count", label="topic"),
    "published_rate": FigureQuery(name="coord_events_published_total", label="topic", mode="rate"),
    "consumed_rate": FigureQuery(name="coord_events_consumed_total", label="topic", mode="rate"),
    "rejected_rate": FigureQuery(name="coord_events_rejected_total", label="topic", mode="rate"),
    "dead_lettered_rate": FigureQuery(
        name="coord_events_dead_lettered_total", label="topic", mode="rate"
    ),
}
"""Every figure the dashboard reads from metrics, each a name the catalogue exports
(`unknown_metrics` is empty: a test holds it)."""

ByLabel = dict[str, float]


def unknown_metrics() -> set[str]:
    """The names the dashboard queries that the worker does not export."""
    return {query.name for query in QUERIES.values()} - exported_names()


# --- Counters across workers, without a Prometheus server --------------------------------------

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, str, Labels]
"""(endpoint, series name, its labels sorted): one series of one worker."""


def counter_increase(previous: float, current: float) -> float:
    """How much a counter grew between two readings. A counter only grows: a lower reading means
    its process restarted from zero since, so all of the current value is new."""
    return current - previous if current >= previous else current


class IncreaseTracker:
    """Each counter series' increase since a baseline, across restarts of the worker that
    exports it, as Prometheus's `increase()` reckons it.

    The baseline is the first reading of an endpoint: a dashboard without a Prometheus server
    shows what happened since it started watching. With `from_zero` an endpoint's first
    reading counts whole (the totals since each worker started: one reading has no "since").
    A series an endpoint shows for the first time after its first reading is new (a topic first
    published to): its whole value counts."""

    def __init__(self, *, from_zero: bool = False) -> None:
        self.from_zero = from_zero
        self._seen: set[str] = set()
        self._last: dict[SeriesKey, float] = {}
        self._increase: dict[SeriesKey, float] = {}

    def observe(self, endpoint: str, readings: Mapping[tuple[str, Labels], float]) -> None:
        """One scrape of one endpoint's counter series."""
        first = endpoint not in self._seen and not self.from_zero
        self._seen.add(endpoint)
        for (name, labels), value in readings.items():
            key = (endpoint, name, labels)
            previous = self._last.get(key, value if first else 0.0)
            self._increase[key] = self._increase.get(key, 0.0) + counter_increase(previous, value)
            self._last[key] = value

    def increases(self) -> dict[SeriesKey, float]:
        return dict(self._increase)


def sum_by(series: Mapping[SeriesKey, float], name: str, label: str) -> ByLabel:
    """The series of `name` summed across endpoints and every other label, by `label`'s value
    (a series without it sums under "")."""
    sums: ByLabel = {}
    for (_endpoint, series_name, labels), value in series.items():
        if series_name == name:
            key = dict(labels).get(label, "")
            sums[key] = sums.get(key, 0.0) + value
    return sums


def rates(
    earlier: Mapping[SeriesKey, float], later: Mapping[SeriesKey, float], seconds: float
) -> dict[SeriesKey, float]:
    """Per-second growth of each series' increase between two readings `seconds` apart."""
    if seconds <= 0:
        return {}
    return {key: (value - earlier.get(key, 0.0)) / seconds for key, value in later.items()}


# --- The sections ---------------------------------------------------------------------------


class EventFigures(BaseModel):
    """What the metrics say, one mapping per `QUERIES` entry (label value -> figure), and over
    which window: the sources fill it, the sections below read it."""

    window: str
    values: dict[str, ByLabel] = Field(default_factory=dict)

    def by(self, figure: str) -> ByLabel:
        return self.values.get(figure, {})

    def total(self, figure: str) -> float:
        return sum(self.by(figure).values())


class Throughput(BaseModel):
    """The seed's "Throughput (Last Hour)". `in_dlq` is the entries parked now (Temporal)."""

    published: int | None = None
    consumed: int | None = None
    failed: int | None = None
    """Refused at a workflow's edge, or ended in the dead-letter queue, in the window."""
    in_dlq: int | None = None


class TopicRow(BaseModel):
    topic: str
    published: int
    consumed: int
    lag: int


class AgentRow(BaseModel):
    agent: str
    published: int
    """Events its results published, in the window."""
    consumed: int
    """Runs of it that ended (the events it took in), in the window."""
    processing: int
    """Runs of it running now, summed over workers."""


LagLevel = Literal["Low", "Medium", "High"]
BusStatus = Literal["healthy", "degraded", "down"]
LOW_LAG_SHARE = 0.02
HIGH_LAG_SHARE = 0.10
LOW_LAG_EVENTS = 5
"""Consumer lag is Low while what waits is a few events or at most 2% of those published in
the window, High beyond 10%: a consumer that falls that far behind in an hour is not keeping
up."""


class Rates(BaseModel):
    """Events per second now (the charts)."""

    published: float = 0.0
    consumed: float = 0.0
    failed: float = 0.0


class Health(BaseModel):
    bus: BusStatus
    reasons: list[str] = Field(default_factory=list)
    """Why it is not healthy, one line each."""
    latency_ms: float | None = None
    """From an event's time to its consumer taking it in, averaged over the window."""
    consumer_lag: LagLevel | None = None
    lag: int | None = None


def whole(value: float) -> int:
    return round(value)


def throughput(figures: EventFigures | None, parked: int | None) -> Throughput:
    if figures is None:
        return Throughput(in_dlq=parked)
    return Throughput(
        published=whole(figures.total("published")),
        consumed=whole(figures.total("consumed")),
        failed=whole(figures.total("rejected") + figures.total("dead_lettered")),
        in_dlq=parked,
    )


def topic_rows(figures: EventFigures) -> list[TopicRow]:
    """Per topic, lag = published - consumed, never below zero (an event two patterns take in
    is consumed twice). Events published without a topic sum under "-"."""
    published, consumed = figures.by("published"), figures.by("consumed")
    rows = []
    for topic in sorted(set(published) | set(consumed)):
        out, taken = whole(published.get(topic, 0.0)), whole(consumed.get(topic, 0.0))
        rows.append(
            TopicRow(topic=topic or "-", published=out, consumed=taken, lag=max(out - taken, 0))
        )
    return rows


def agent_rows(figures: EventFigures) -> list[AgentRow]:
    published, runs = figures.by("agent_published"), figures.by("agent_runs")
    in_flight = figures.by("agent_in_flight")
    agents = sorted((set(published) | set(runs) | set(in_flight)) - {""})
    return [
        AgentRow(
            agent=agent,
            published=whole(published.get(agent, 0.0)),
            consumed=whole(runs.get(agent, 0.0)),
            processing=whole(in_flight.get(agent, 0.0)),
        )
        for agent in agents
    ]


def lag_level(lag: int, published: int) -> LagLevel:
    share = lag / published if published else (1.0 if lag else 0.0)
    if lag <= LOW_LAG_EVENTS or share <= LOW_LAG_SHARE:
        return "Low"
    return "Medium" if share <= HIGH_LAG_SHARE else "High"


def average_latency_ms(figures: EventFigures) -> float | None:
    """None without an event consumed in the window."""
    count = figures.total("latency_count")
    return figures.total("latency_sum") / count * 1000 if count else None


def event_rates(figures: EventFigures) -> Rates:
    return Rates(
        published=figures.total("published_rate"),
        consumed=figures.total("consumed_rate"),
        failed=figures.total("rejected_rate") + figures.total("dead_lettered_rate"),
    )


def health(figures: EventFigures | None, problems: Iterable[str], *, temporal_up: bool) -> Health:
    """The bus is down without the Temporal server (nothing is delivered), degraded while any
    source does not answer, a breaker is open or consumers lag far behind, else healthy."""
    reasons = list(problems)
    if figures is None:
        return Health(bus=_bus(reasons, temporal_up), reasons=reasons)
    lag = sum(row.lag for row in topic_rows(figures))
    level = lag_level(lag, whole(figures.total("published")))
    if level == "High":
        reasons.append(f"consumer lag high: {lag} events behind")
    return Health(
        bus=_bus(reasons, temporal_up),
        reasons=reasons,
        latency_ms=average_latency_ms(figures),
        consumer_lag=level,
        lag=lag,
    )


def _bus(reasons: list[str], temporal_up: bool) -> BusStatus:
    if not temporal_up:
        return "down"
    return "degraded" if reasons else "healthy"


# --- Temporal's side -----------------------------------------------------------------------


class OldEntry(BaseModel):
    """One of the dead-letter queue's oldest parked entries."""

    entry_id: str
    failure_type: str
    event_type: str | None
    target: str | None
    parked_at: datetime


class Breaker(BaseModel):
    agent: str
    state: str
    """`closed`, `half_open`, `open`, or `unknown` while no worker answers for its ledger."""
    status: str
    """`healthy` or `unreachable` (agent health)."""


class PatternFigures(BaseModel):
    """What the Temporal server's visibility says: sagas by outcome (running ones now, ended
    ones in the last hour), runs in flight by pattern, the queue's oldest entries, breakers."""

    sagas: dict[str, int] = Field(default_factory=dict)
    in_flight: dict[str, int] = Field(default_factory=dict)
    parked: int = 0
    oldest: list[OldEntry] = Field(default_factory=list)
    breakers: list[Breaker] = Field(default_factory=list)


class Source(BaseModel):
    """One place figures come from, and whether it answered."""

    name: str
    ok: bool
    error: str | None = None


class Snapshot(BaseModel):
    """One frame of the dashboard: what the terminal draws and the web page's JSON."""

    at: datetime
    window: str
    throughput: Throughput
    topics: list[TopicRow] = Field(default_factory=list)
    agents: list[AgentRow] = Field(default_factory=list)
    health: Health
    rates: Rates = Field(default_factory=Rates)
    patterns: PatternFigures | None = None
    sources: list[Source] = Field(default_factory=list)


def snapshot(
    at: datetime,
    figures: EventFigures | None,
    patterns: PatternFigures | None,
    sources: list[Source],
    *,
    no_figures: str = "no metrics source answered",
) -> Snapshot:
    """The frame from what the sources answered (None: that source did not; `no_figures`
    says why in the window's place)."""
    problems = [f"{source.name}: {source.error}" for source in sources if not source.ok]
    open_breakers = [b.agent for b in patterns.breakers if b.state == "open"] if patterns else []
    if open_breakers:
        problems.append(f"breaker open: {', '.join(open_breakers)}")
    temporal_up = patterns is not None
    return Snapshot(
        at=at,
        window=figures.window if figures else no_figures,
        throughput=throughput(figures, patterns.parked if patterns else None),
        topics=topic_rows(figures) if figures else [],
        agents=agent_rows(figures) if figures else [],
        health=health(figures, problems, temporal_up=temporal_up),
        rates=event_rates(figures) if figures else Rates(),
        patterns=patterns,
        sources=sources,
    )


# --- Finding the oldest entries without ORDER BY -------------------------------------------


def bisect_instant(
    lo: datetime, hi: datetime, count_at_mid: int, wanted: int, most: int
) -> tuple[datetime, datetime] | None:
    """One step of the search for an instant before which between `wanted` and `most` entries
    were started (visibility lists newest first and cannot order otherwise): the half of
    [lo, hi] to search next, or None when the middle is such an instant."""
    mid = midpoint(lo, hi)
    if count_at_mid < wanted:
        return mid, hi
    if count_at_mid > most:
        return lo, mid
    return None


def midpoint(lo: datetime, hi: datetime) -> datetime:
    return lo + (hi - lo) / 2
