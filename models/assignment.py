"""Routing by capability (seed 002's capability router and task auction): a saga step, chain
subscription or plan task may ask for capabilities instead of naming an agent; the coordinator
then picks one of the declared agents offering enough of them, by a strategy. Pure: the readings
(health, backlog, history, pool) come from the `choose_agent` activity."""

from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from coord.models.agent_config import MAX_CAPABILITIES, Capability
from coord.models.durations import Duration
from coord.models.specs import MAX_NAME

MATCH_THRESHOLD = 0.7
"""Seed 002's `capability_match > 0.7`: an agent offering less of what is asked is no candidate."""
BID_WEIGHTS = {
    "capability_match": 0.4,
    "current_load": 0.3,
    "past_performance": 0.2,
    "resource_availability": 0.1,
}
"""Seed 002's `TaskAuction.evaluate_bid` criteria."""
BID_DIGITS = 6
"""Bids are rounded before they are compared, so equal bids tie (and go by name) whatever the
floating-point order of their sums."""

Strategy = Literal["least_loaded", "auction"]


class CapabilityRoute(BaseModel):
    """What a run asks for instead of an agent, and how one is picked among the offers."""

    model_config = ConfigDict(extra="forbid")

    capabilities: list[Capability] = Field(min_length=1, max_length=MAX_CAPABILITIES)
    strategy: Strategy = "least_loaded"
    exclude: list[str] = Field(default_factory=list, max_length=MAX_CAPABILITIES)
    """Agents not to pick: those a run already found unable to take it (routed again)."""


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
    """How an agent is picked among those offering the capabilities: `least_loaded` (the lowest
    backlog per healthy worker) or `auction` (seed 002's bids)."""
    fallback: Fallback | None = None
    """Where the run goes when its agent cannot take it (breaker open, no worker, timed out):
    another agent, or capabilities (`coord.models.agent_runs`)."""
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
    backlog, workers), the agent's ledger (success rate) and its pool (free share)."""

    agent: str
    capability_match: float
    healthy: bool
    backlog: int = 0
    pollers: int = 0
    """Workers serving the agent's queue seen alive."""
    success_rate: float | None = None
    """Over the ledger's recent window; None without runs (counted as 1.0)."""
    free_share: float | None = None
    """The free share of the agent's pool; None when unknown (counted as 1.0)."""


class Bid(BaseModel):
    """One candidate's figures as recorded with the choice, whatever the strategy."""

    agent: str
    capability_match: float
    healthy: bool
    backlog: int
    pollers: int
    backlog_per_poller: float | None
    """`least_loaded`'s score (lowest wins); None without a worker seen alive."""
    load: float
    """In [0, 1]: `b / (1 + b)` of the backlog per poller `b`; 1 without a healthy worker."""
    past_performance: float
    resource_availability: float
    bid: float
    """`auction`'s score (highest wins): the seed's weighted sum of the four criteria."""


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
    if strategy == "auction":
        return f"{bid.bid:.3f}"
    per_poller = bid.backlog_per_poller
    return "unreachable" if per_poller is None else f"backlog/worker {per_poller:g}"


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


def bid_of(reading: CandidateReading) -> Bid:
    per_poller = reading.backlog / reading.pollers if reading.healthy and reading.pollers else None
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
        agent=reading.agent,
        capability_match=reading.capability_match,
        healthy=reading.healthy,
        backlog=reading.backlog,
        pollers=reading.pollers,
        backlog_per_poller=per_poller,
        load=round(load, BID_DIGITS),
        past_performance=past,
        resource_availability=free,
        bid=round(score, BID_DIGITS),
    )


def _rank(strategy: Strategy, bid: Bid) -> tuple[bool, float, str]:
    """Sort key, best first: a candidate with a worker alive before one without (a run sent
    to an unserved queue only waits), then the strategy's score, then the name."""
    per_poller = bid.backlog_per_poller
    score = -bid.bid if strategy == "auction" else (per_poller or 0.0)
    return (per_poller is None, score, bid.agent)


def choose(route: CapabilityRoute, readings: Sequence[CandidateReading]) -> Assignment | None:
    """The candidate the strategy picks, with every candidate's bid; None without candidates."""
    bids = sorted((bid_of(r) for r in readings), key=lambda bid: _rank(route.strategy, bid))
    if not bids:
        return None
    return Assignment(
        capabilities=list(route.capabilities),
        strategy=route.strategy,
        agent=bids[0].agent,
        bids=bids,
    )


def no_candidate_message(catalogue: Mapping[str, Sequence[str]], required: Sequence[str]) -> str:
    """Why nobody can take the run: what is asked, and the closest offers."""
    partial = {a: m for a, m in matches(catalogue, required).items() if m > 0}
    closest = ", ".join(f"{a} ({m:.2f})" for a, m in partial.items()) or "none"
    return (
        f"no declared agent offers more than {MATCH_THRESHOLD:.0%} of {', '.join(required)}; "
        f"agents offering some: {closest}"
    )
