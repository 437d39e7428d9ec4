"""Routing by capability (a capability router and a task auction): a saga step, chain
subscription or plan task may ask for capabilities instead of naming an agent; the coordinator
then picks one of the declared agents offering enough of them, by a strategy. Pure: the readings
(health, backlog, running runs, breaker, history, pool) come from the `choose_agent(s)`
activities.

Picks spread: an agent's load is its work (runs waiting on its queue, runs it is running, and the
picks made for it earlier in the same batch) per live worker, and a tie goes to the candidate
the router picked least recently. An agent that cannot take a run now (no live worker, or its
breaker open) is picked only when no candidate can."""

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    model_serializer,
    model_validator,
)

from coord.models.mesh.config import MAX_CAPABILITIES, Capability
from coord.models.mesh.ledger import BreakerStateName
from coord.models.wire.durations import Duration
from coord.models.wire.specs import MAX_NAME

MATCH_THRESHOLD = 0.7
"""The auction's capability threshold: an agent offering less of what is asked is no candidate."""
BID_WEIGHTS = {
    "capability_match": 0.4,
    "current_load": 0.3,
    "past_performance": 0.2,
    "resource_availability": 0.1,
}
"""How a task auction weighs a bid's criteria."""
BID_DIGITS = 6
"""Bids are rounded before they are compared, so equal bids tie (and go to the least recently
picked) whatever the floating-point order of their sums."""
MAX_EXCLUDED = 64
"""Agents one route may rule out."""

Strategy = Literal["least_loaded", "auction"]


class CapabilityRoute(BaseModel):
    """What a run asks for instead of an agent, and how one is picked among the offers."""

    model_config = ConfigDict(extra="forbid")

    capabilities: list[Capability] = Field(min_length=1, max_length=MAX_CAPABILITIES)
    strategy: Strategy = "least_loaded"
    exclude: list[str] = Field(default_factory=list, max_length=MAX_EXCLUDED)
    """Agents not to pick, whatever they offer: those a run already found unable to take it
    (routed again after its pick turned out unreachable or behind an open breaker)."""

    @model_serializer(mode="wrap")
    def _without_empty_exclude(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An empty `exclude` is left out, so a route reads as it did before the field existed
        (a worker of the version before takes it; recorded inputs look the same)."""
        data: dict[str, Any] = handler(self)
        if not self.exclude:
            data.pop("exclude", None)
        return data


class FallbackRoute(BaseModel):
    """A fallback naming capabilities instead of an agent."""

    model_config = ConfigDict(extra="forbid")

    capability: Capability | None = None
    capabilities: list[Capability] = Field(default_factory=list, max_length=MAX_CAPABILITIES)
    assignment: Strategy = "least_loaded"

    @model_validator(mode="after")
    def _one_way_to_say_it(self) -> Self:
        if (self.capability is None) == (not self.capabilities):
            raise ValueError("a fallback names `capability` or `capabilities` (one of them)")
        return self

    @property
    def route(self) -> CapabilityRoute:
        asked = [self.capability] if self.capability is not None else self.capabilities
        return CapabilityRoute(capabilities=asked, strategy=self.assignment)


def _fallback_kind(value: object) -> str:
    return "agent" if isinstance(value, str) else "capabilities"


Fallback = Annotated[
    Annotated[str, Tag("agent"), Field(min_length=1, max_length=MAX_NAME)]
    | Annotated[FallbackRoute, Tag("capabilities")],
    Discriminator(_fallback_kind),
]
"""A run's `fallback:`: an agent's name, or `{capability: X}` / `{capabilities: [X, Y]}`."""


class Routed(BaseModel):
    """The fields a saga step, chain subscription or plan task gets to name its agent by
    capability: `capability: X` or `capabilities: [X, Y]` (not both), and `assignment:`, the
    strategy. The item's own validator asks `doer_problem` whether it names exactly one doer."""

    capability: Capability | None = None
    capabilities: list[Capability] = Field(default_factory=list, max_length=MAX_CAPABILITIES)
    assignment: Strategy = "least_loaded"
    """How an agent is picked among those offering the capabilities: `least_loaded` (the least
    work per live worker: runs waiting, running, just picked) or `auction` (bids)."""
    fallback: Fallback | None = None
    """Where the run goes when its agent cannot take it (breaker open, no worker, timed out):
    another agent, or capabilities (`coord.models.mesh.runs`)."""
    schedule_to_close_timeout: Duration | None = None
    """The run's whole time, its retries and its waits for an open breaker or a full pool
    included; without it, those waits end after `agent_runs.DEFAULT_AGENT_WAIT`."""

    @model_validator(mode="after")
    def _one_way_to_say_it(self) -> Self:
        if self.capability is not None and self.capabilities:
            raise ValueError("give `capability` or `capabilities`, not both")
        return self

    @property
    def route(self) -> CapabilityRoute | None:
        """The capabilities asked for; None when the item names its agent."""
        asked = [self.capability] if self.capability is not None else self.capabilities
        return CapabilityRoute(capabilities=asked, strategy=self.assignment) if asked else None

    def doer_problem(self, agent: str, **others: bool) -> str | None:
        """Why the item does not name exactly one doer (None when it does): its `agent`, one
        of `others` (the item's other fields that may, e.g. `vote`: whether given), or
        capabilities (`capability` standing for both spellings)."""
        given = {"agent": bool(agent), **others, "capability": self.route is not None}
        named = [name for name, present in given.items() if present]
        fields = [f"`{name}`" for name in given]
        if len(named) > 1:
            choices = f"{', '.join(fields[:-1])} or {fields[-1]}"
            return f"give one of {choices}, not both {named[0]} and {named[1]}"
        if not named:
            return f"`agent` is required (or {', '.join([*fields[1:-1], ''])}`capability`)"
        return None


class CandidateReading(BaseModel):
    """What the coordinator knows of one candidate when it picks: from the server (health,
    backlog, workers, runs in progress) and the agent's ledger (breaker, success rate, pool)."""

    agent: str
    capability_match: float = 1.0
    """The share of the route's capabilities it offers (set per route)."""
    healthy: bool
    backlog: int = 0
    """Runs waiting for it: on its queue, and (for a pool) taken by a worker, waiting for a
    permit."""
    running: int = 0
    """Runs it is running now: its pool's permits out (an agent declaring max_concurrent, from
    its ledger), else the run slots its live workers last reported in use."""
    picked: int = 0
    """Picks made for it earlier in the same batch: runs that are on no queue yet."""
    pollers: int = 0
    """Workers serving the agent's queue seen alive."""
    breaker: BreakerStateName = "closed"
    """Its circuit breaker, as its ledger says now (open past its window reads half-open)."""
    success_rate: float | None = None
    """Over the ledger's recent window; None without runs (counted as 1.0)."""
    free_share: float | None = None
    """The free share of the agent's pool; None when unknown (counted as 1.0)."""

    @property
    def work(self) -> int:
        """Its load: what waits for it, what it runs, and what was just sent its way."""
        return self.backlog + self.running + self.picked

    @property
    def available(self) -> bool:
        """Whether it can take a run now: a live worker, and its breaker not open (a run sent
        behind an open breaker fails fast; a half-open one lets its probe through)."""
        return self.healthy and self.pollers > 0 and self.breaker != "open"


class Bid(BaseModel):
    """One candidate's figures as recorded with the choice, whatever the strategy. Fields added
    since the first version have defaults, so records made before still read."""

    agent: str
    capability_match: float
    healthy: bool
    breaker: BreakerStateName = "closed"
    available: bool = True
    """A live worker and no open breaker: a candidate that is not is picked only when no
    candidate is."""
    backlog: int
    running: int = 0
    picked: int = 0
    pollers: int
    work_per_poller: float | None = Field(
        default=None, validation_alias=AliasChoices("work_per_poller", "backlog_per_poller")
    )
    """`least_loaded`'s score (lowest wins): backlog + running + picked, per live worker; None
    without a worker seen alive. Records made before running runs and picks counted hold the
    backlog alone, as `backlog_per_poller`."""
    load: float
    """In [0, 1]: `w / (1 + w)` of the work per poller `w`; 1 without a healthy worker."""
    past_performance: float
    resource_availability: float
    bid: float
    """`auction`'s score (highest wins): the weighted sum of the four criteria."""


class Assignment(BaseModel):
    """The agent picked for a run, with every candidate's bid (best first, by the strategy)."""

    capabilities: list[str]
    strategy: Strategy
    agent: str
    bids: list[Bid]

    def describe(self) -> str:
        """`db-2 (auction over sql: db-2 0.870, db-1 0.640)`, for summaries and the UI."""
        scores = ", ".join(f"{b.agent} {_score(self.strategy, b)}" for b in self.bids)
        return f"{self.agent} ({self.strategy} over {', '.join(self.capabilities)}: {scores})"


def _score(strategy: Strategy, bid: Bid) -> str:
    if not bid.available:
        return "unreachable" if bid.work_per_poller is None else f"breaker {bid.breaker}"
    if strategy == "auction":
        return f"{bid.bid:.3f}"
    return f"work/worker {bid.work_per_poller:g}"


class RecentPicks:
    """A router's memory of its own picks: a tie goes to the candidate it picked least recently
    (one it never picked first), so equal agents take turns instead of one taking every run.
    Holds one number per agent picked, and only declared agents are."""

    def __init__(self) -> None:
        self._order: dict[str, int] = {}
        self._count = 0

    def recency(self, agent: str) -> int:
        """Higher is more recent; 0 for an agent never picked."""
        return self._order.get(agent, 0)

    def picked(self, agent: str) -> None:
        self._count += 1
        self._order[agent] = self._count


def capability_match(offered: Sequence[str], required: Sequence[str]) -> float:
    """The fraction of the required capabilities the agent offers."""
    wanted = set(required)
    return len(wanted & set(offered)) / len(wanted)


def matches(catalogue: Mapping[str, Sequence[str]], required: Sequence[str]) -> dict[str, float]:
    """Every declared agent's capability match (agent -> offered capabilities), by name."""
    return {
        agent: capability_match(offered, required) for agent, offered in sorted(catalogue.items())
    }


def candidates(catalogue: Mapping[str, Sequence[str]], required: Sequence[str]) -> dict[str, float]:
    """The agents offering more than MATCH_THRESHOLD of what is required, with their match."""
    return {a: m for a, m in matches(catalogue, required).items() if m > MATCH_THRESHOLD}


def route_candidates(
    catalogue: Mapping[str, Sequence[str]], routes: Iterable[CapabilityRoute]
) -> list[str]:
    """Every agent some route may pick (offering enough, not excluded), by name: what to read."""
    wanted = {
        agent
        for route in routes
        for agent in candidates(catalogue, route.capabilities)
        if agent not in route.exclude
    }
    return sorted(wanted)


_FIGURES_AS_READ = set(CandidateReading.model_fields) & set(Bid.model_fields)
"""What a bid records of its candidate as read (agent, health, breaker, backlog, runs, pollers):
the fields the two share, so a figure added to both is carried without another line here."""


def bid_of(reading: CandidateReading) -> Bid:
    served = reading.healthy and reading.pollers
    per_poller = reading.work / reading.pollers if served else None
    load = 1.0 if per_poller is None else per_poller / (1 + per_poller)
    past = 1.0 if reading.success_rate is None else reading.success_rate
    free = 1.0 if reading.free_share is None else reading.free_share
    score = (
        BID_WEIGHTS["capability_match"] * reading.capability_match
        + BID_WEIGHTS["current_load"] * (1 - load)
        + BID_WEIGHTS["past_performance"] * past
        + BID_WEIGHTS["resource_availability"] * free
    )
    return Bid(
        **reading.model_dump(include=_FIGURES_AS_READ),
        available=reading.available,
        work_per_poller=per_poller,
        load=round(load, BID_DIGITS),
        past_performance=past,
        resource_availability=free,
        bid=round(score, BID_DIGITS),
    )


def _rank(strategy: Strategy, bid: Bid, recency: int) -> tuple[bool, float, int]:
    """Sort key, best first: a candidate that can take the run now before one that cannot (a
    run sent to an unserved queue only waits, one behind an open breaker fails fast), then the
    strategy's score, then the least recent pick."""
    score = -bid.bid if strategy == "auction" else (bid.work_per_poller or 0.0)
    return (not bid.available, score, recency)


def choose(
    route: CapabilityRoute,
    readings: Sequence[CandidateReading],
    recent: RecentPicks | None = None,
) -> Assignment | None:
    """The candidate the strategy picks, with every candidate's bid; None without candidates
    (the route's `exclude` are none). Ties go to the one `recent` says was picked least
    recently, then keep the readings' order (which the router shuffles)."""
    memory = recent or RecentPicks()
    excluded = set(route.exclude)
    offers = [bid_of(r) for r in readings if r.agent not in excluded]
    bids = sorted(offers, key=lambda bid: _rank(route.strategy, bid, memory.recency(bid.agent)))
    if not bids:
        return None
    return Assignment(
        capabilities=list(route.capabilities),
        strategy=route.strategy,
        agent=bids[0].agent,
        bids=bids,
    )


def choose_each(
    routes: Sequence[CapabilityRoute],
    catalogue: Mapping[str, Sequence[str]],
    readings: Mapping[str, CandidateReading],
    recent: RecentPicks,
) -> list[Assignment | None]:
    """The picks for runs started together (a plan's wave), in order: each sees the ones before
    it, whose agent counts one more run (`picked`) and is the most recent pick, so the runs
    spread over the capable agents instead of all going to the one that was idle when read.
    None for a route without a candidate (`no_candidate_message` says why)."""
    seen = dict(readings)
    picks: list[Assignment | None] = []
    for route in routes:
        matched = candidates(catalogue, route.capabilities)
        offers = [
            reading.model_copy(update={"capability_match": matched[agent]})
            for agent, reading in seen.items()
            if agent in matched
        ]
        assignment = choose(route, offers, recent)
        picks.append(assignment)
        if assignment is not None:
            mine = seen[assignment.agent]
            seen[assignment.agent] = mine.model_copy(update={"picked": mine.picked + 1})
            recent.picked(assignment.agent)
    return picks


def no_candidate_message(
    catalogue: Mapping[str, Sequence[str]], required: Sequence[str], excluded: Sequence[str] = ()
) -> str:
    """Why nobody can take the run: what is asked, the agents ruled out, the closest offers."""
    partial = {a: m for a, m in matches(catalogue, required).items() if m > 0}
    closest = ", ".join(f"{a} ({m:.2f})" for a, m in partial.items()) or "none"
    ruled_out = sorted(set(excluded) & set(candidates(catalogue, required)))
    but = f" but those excluded ({', '.join(ruled_out)})" if ruled_out else ""
    return (
        f"no declared agent{but} offers more than {MATCH_THRESHOLD:.0%} of "
        f"{', '.join(required)}; agents offering some: {closest}"
    )
