"""Reactive chain specs (who subscribes to what, and publishes what) and the chain's record."""

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    RootModel,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from coord.models.events.envelope import EventEnvelope
from coord.models.events.filters import compile_filter
from coord.models.events.joins import JoinState, Slot
from coord.models.events.rewind import RewindOrigin
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.assignment import Assignment, Routed
from coord.models.mesh.config import SCHEDULE_TO_START_DEFAULT, AgentConfig
from coord.models.mesh.retry import RetryConfig
from coord.models.mesh.runs import RunDetour
from coord.models.mesh.usage import TokenBudget, TokenUsage
from coord.models.vote.spec import VoteRules
from coord.models.wire.contract import Pattern, SearchValues, coordination_attributes
from coord.models.wire.durations import Duration
from coord.models.wire.graphs import Step, find_cycle, reach
from coord.models.wire.specs import IDENTIFIER, MAX_ITEMS, MAX_NAME


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


EventTypes = str | Annotated[list[str], Field(max_length=MAX_ITEMS)]
"""What a field taking one event type or several may be written as (its JSON Schema)."""


class Publishes(BaseModel):
    """The event types a subscription declares: those the chain publishes around each run
    (`on_start`, `on_success`, `on_failure`) and those its agent may publish itself, by its
    result's `publish` (`events`). A list (`publishes: [TypeA, TypeB]`) is `events` alone."""

    model_config = ConfigDict(extra="forbid")

    on_start: str | None = None
    on_success: list[str] = Field(default_factory=list)
    on_failure: str | None = None
    events: list[str] | None = Field(default=None, max_length=MAX_ITEMS)
    """The types the agent may publish besides the three above. Unset, the agent's own
    declaration decides (`AgentResult.may_publish`); set (`[]` included), the agent publishes
    only the types this subscription declares, and those its declaration allows."""

    _one_or_many = field_validator("on_success", mode="before", json_schema_input_type=EventTypes)(
        _as_list
    )

    @model_validator(mode="before")
    @classmethod
    def _a_list_is_events(cls, value: Any) -> Any:
        return {"events": value} if isinstance(value, list) else value

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """A spec may write the list form (`publishes: [TypeA, TypeB]`, `_a_list_is_events`)."""
        json_schema = handler(schema)
        if handler.mode != "validation":
            return json_schema
        return {"anyOf": [json_schema, {"type": "array", "items": {"type": "string"}}]}

    @property
    def all(self) -> list[str]:
        declared = (self.on_start, *self.on_success, self.on_failure, *(self.events or []))
        return [t for t in declared if t]

    def allowed(self, by_agent: list[str] | None) -> set[str] | None:
        """The event types a run's agent may publish itself, given what its declaration allows
        (`by_agent`, None: no restriction of its own); None: any type, as before the rule (a
        python, shell or http agent with neither list declared)."""
        if self.events is None and by_agent is None:
            return None
        return {*self.all, *(by_agent or [])}


class Subscription(Routed):
    model_config = ConfigDict(extra="forbid")

    agent: str = ""
    """The agent that runs, unless the subscription names capabilities (`Routed`)."""
    vote: VoteRules | None = None
    """A consensus vote instead of an agent's run, the event's payload its proposal: decided
    publishes `on_success`, rejected or no quorum `on_failure`, either with the ballots."""
    name: str = ""
    """The agent's name by default (the capabilities, `+`-joined, for one naming those)."""
    topic: str | None = None
    events: list[str] = Field(min_length=1, max_length=MAX_ITEMS)
    join: Literal["any", "all"] = "any"
    filter: str | None = None
    publishes: Publishes = Field(default_factory=Publishes)
    timeout: Duration = timedelta(minutes=5)
    heartbeat_timeout: Duration | None = None
    """Set it for agents that heartbeat (shell agents do), so a dead worker shows in seconds."""
    schedule_to_start_timeout: Duration = SCHEDULE_TO_START_DEFAULT
    """How long a run waits for a worker serving its agent before it fails `agent_unavailable`
    (not retried: a retry would wait on the same queue)."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    hand_over: bool | None = None
    """`true`: every run goes to a `ChainRun` workflow of its own, so the chain never waits for
    it (for agents that may run long); `false`: every run stays in the chain; unset: a run stays
    in the chain (the fast path) unless it starts while the chain is due to continue as new."""

    _one_or_many = field_validator("events", mode="before", json_schema_input_type=EventTypes)(
        _as_list
    )

    @field_validator("filter")
    @classmethod
    def _filter_compiles(cls, expression: str | None) -> str | None:
        if expression is not None:
            compile_filter(expression)
        return expression

    @model_validator(mode="after")
    def _named(self) -> Self:
        if problem := self.doer_problem(self.agent, vote=self.vote is not None):
            raise ValueError(problem)
        if self.vote is not None and self.publishes.events is not None:
            raise ValueError(
                "publishes.events: a vote publishes only its on_success and on_failure events"
            )
        route = self.route
        capabilities = "+".join(route.capabilities) if route else ""
        self.name = self.name or self.agent or capabilities or "vote"
        return self

    def agents_named(self, place: str) -> list[tuple[str, str]]:
        """The agents it runs (its agent, or its voters), with the field naming each."""
        if self.vote is not None:
            return [(f"{place}.vote.voters", voter) for voter in self.vote.voters]
        return [(f"{place}.agent", self.agent)]

    def hands_over(self, held_up: bool) -> bool:
        """Whether a run of it goes to a `ChainRun` of its own: a vote always; an agent run when
        the subscription says so (`hand_over: true`, for agents that may run long), or, unless
        it says not to, when it starts while its chain is held up by a slow agent before
        continuing as new (so that it does not wait for that agent)."""
        if self.vote is not None or self.hand_over is not None:
            return self.vote is not None or bool(self.hand_over)
        return held_up

    def new_join(self) -> JoinState:
        return JoinState.of([Slot(type=t) for t in self.events], mode=self.join)

    def step(self) -> Step:
        """The subscription in the spec's graph: it fires on its events, and publishes."""
        return Step(needs=self.events, gives=self.publishes.all, needs_all=self.join == "all")


class AlertPolicy(BaseModel):
    """The `project.alerts` with `severity=high`: pause new agent work until resolved."""

    model_config = ConfigDict(extra="forbid")

    topic: str = "project.alerts"
    pause_when: str = "severity=high"
    resume_on: list[str] = Field(default_factory=lambda: ["AlertResolved"])

    @field_validator("pause_when")
    @classmethod
    def _filter_compiles(cls, expression: str) -> str:
        compile_filter(expression)
        return expression


MAX_RUNS_PER_EVENT = 500
"""The largest `max_runs_per_event`: half the events a chain remembers the causes of
(`SEEN_WINDOW`), so a run's trigger is still remembered when its events are counted."""


class ChainSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME)
    description: str = ""
    topics: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    triggers: list[str] = Field(min_length=1, max_length=MAX_ITEMS)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """Agents declared inline, beside the worker's own (`coord worker --agents`)."""
    subscriptions: list[Subscription] = Field(min_length=1, max_length=MAX_ITEMS)
    terminal_event: str | None = None
    max_concurrency: int = Field(default=4, ge=1, le=MAX_ITEMS)
    max_causation_depth: int = Field(default=32, ge=1, le=MAX_ITEMS)
    max_runs_per_event: int = Field(default=200, ge=1, le=MAX_RUNS_PER_EVENT)
    """The most agent runs one event and the events it causes, hop after hop, may queue; an
    event past it is rejected as a probable loop (a filtered cycle that fans out)."""
    idle_timeout: Duration = timedelta(hours=1)
    alerts: AlertPolicy | None = Field(default_factory=AlertPolicy)
    budget: TokenBudget | None = None
    """`{tokens: N}`: the most tokens the chain's agent runs may use, across its continue-as-new
    (`coord.models.mesh.usage`); an `llm` run is refused `budget_exceeded` once none are left."""

    @model_validator(mode="after")
    def _well_formed(self) -> Self:
        _check_names_and_topics(self)
        _check_reachable(self)
        _check_settles(self)
        return self

    def subscription(self, name: str) -> Subscription:
        """The subscription named `name` (KeyError: none), by a plain loop: a chain asks several
        times for each run it starts, and a generator's steps are calls of their own."""
        for subscription in self.subscriptions:
            if subscription.name == name:
                return subscription
        raise KeyError(name)

    def agents_named(self) -> list[tuple[str, str]]:
        """Every agent the chain runs, with where it is named: what a pre-start check checks."""
        return [
            named
            for i, subscription in enumerate(self.subscriptions)
            for named in subscription.agents_named(f"subscriptions[{i}]")
        ]

    def served_agents(self) -> list[str]:
        """The agents it names (subscriptions' agents and voters; not those picked by capability)
        that run on their own queues, not declared inline: served by workers whose health the
        chain is told of (AgentHealth events)."""
        return [agent for _, agent in self.agents_named() if agent and agent not in self.agents]


def _place(index: int, subscription: Subscription) -> str:
    return f"subscriptions[{index}] ({subscription.name})"


def _check_names_and_topics(spec: ChainSpec) -> None:
    seen: set[str] = set()
    for index, sub in enumerate(spec.subscriptions):
        if sub.name in seen:
            raise ValueError(
                f"{_place(index, sub)}: name repeated; give each subscription a `name`"
            )
        seen.add(sub.name)
        if spec.topics and sub.topic is not None and sub.topic not in spec.topics:
            raise ValueError(f"{_place(index, sub)}: topic {sub.topic!r} is not one of `topics`")


def _check_reachable(spec: ChainSpec) -> None:
    """Every subscription must be able to fire from the triggers, and the terminal event must be
    publishable; otherwise the chain would wait forever."""
    reached = reach(spec.triggers, {sub.name: sub.step() for sub in spec.subscriptions})
    for index, sub in enumerate(spec.subscriptions):
        if sub.name not in reached.happened:
            missing = [t for t in sub.events if t not in reached.present]
            raise ValueError(
                f"{_place(index, sub)}: can never fire; nothing publishes {', '.join(missing)} "
                "and it is not among `triggers`"
            )
    if spec.terminal_event and spec.terminal_event not in reached.present:
        raise ValueError(f"terminal_event: {spec.terminal_event!r} is never published")


def _check_settles(spec: ChainSpec) -> None:
    """A cycle of unfiltered subscriptions re-triggers itself forever; a filter may end it."""
    subs = spec.subscriptions
    unfiltered = [i for i, sub in enumerate(subs) if sub.filter is None]
    edges = {
        i: [j for j in unfiltered if set(subs[i].publishes.all) & set(subs[j].events)]
        for i in unfiltered
    }
    cycle = find_cycle(edges)
    if cycle:
        names = " → ".join(subs[i].name for i in cycle)
        raise ValueError(
            f"{_place(cycle[-1], subs[cycle[-1]])}: cycle {names} never settles; "
            "add a filter or break the cycle"
        )


class ChainStatus(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    CLOSED = "closed"
    IDLE_CLOSED = "idle_closed"


class RejectedEvent(BaseModel):
    time: datetime
    reason: str
    event_id: str | None = None
    raw: Any = None


class RerunRequest(BaseModel):
    subscription: str
    event: EventEnvelope
    idempotency_key: str | None = None
    """The failed run's key; without it, the key of the run on the event this one replays."""
    inputs: dict[str, Any] = Field(default_factory=dict)
    """The failed run's inputs; the slot of the event replayed gets the replayed event."""


def replayed_inputs(request: RerunRequest) -> dict[str, Any]:
    """The failed run's inputs, with the event the replay stands for (the replay's cause)
    replaced by the replay, so a corrected payload reaches the agent in both places."""
    replayed = request.event
    return {
        slot: {**joined, "event_id": replayed.event.id, "payload": replayed.payload}
        if joined.get("event_id") == replayed.event.causation_id
        else joined
        for slot, joined in request.inputs.items()
    }


def run_idempotency_key(workflow_id: str, subscription: str, event_id: str) -> str:
    """What makes a chain's agent run unique: its chain, its subscription and the event that
    triggered it. The same across retries and replays of the run, different for any other."""
    return f"{workflow_id}/{subscription}/{event_id}"


class AgentRun(BaseModel):
    subscription: str
    agent: str
    trigger: EventEnvelope
    causes: list[str]
    inputs: dict[str, Any] = Field(default_factory=dict)
    """The join's events keyed by slot (`JoinState.inputs`)."""
    idempotency_key: str | None = None


class RunAssignment(BaseModel):
    """The agent picked for one run of a subscription that names capabilities, with the bids."""

    subscription: str
    event_id: str
    """The event that triggered the run."""
    assignment: Assignment


class ChainState(BaseModel):
    """The chain's record. Its counts keep the accounting identity: every event received was
    handled, ignored as a duplicate or rejected (`received = events_seen + duplicates +
    rejected_count`), and every rejection (but of a lifecycle notice), failed agent run and run
    still queued when the chain ended went to the dead-letter queue (`dead_lettered`)."""

    correlation_id: str
    spec: str
    status: ChainStatus = ChainStatus.RUNNING
    received: int = 0
    events_seen: int = 0
    duplicates: int = 0
    rejected_count: int = 0
    dead_lettered: int = 0
    rejected: list[RejectedEvent] = Field(default_factory=list)
    running: list[str] = Field(default_factory=list)
    waiting: list[str] = Field(default_factory=list)
    queued: int = 0
    pause_reason: str | None = None
    terminal_seen: bool = False
    listeners: list[str] = Field(default_factory=list)
    filter_errors: int = 0
    """Evaluations of a filter that failed on an event (which then did not match)."""
    last_filter_error: str | None = None
    assignments: list[RunAssignment] = Field(default_factory=list)
    """The latest runs picked by capability (a window: the newest ASSIGNMENT_WINDOW)."""
    detours: list[RunDetour] = Field(default_factory=list)
    """The latest runs that waited for their agent or went elsewhere (`run`: subscription and
    triggering event), newest last."""
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    """What the chain's agent runs reported using (an `llm` agent's tokens), in all and by model."""
    rewind_of: str | None = None
    """A rewound copy's original and event (`CoordRewindOf`): `<correlation>@<event id>`."""
    rewind_complete: bool = False
    """A rewound copy was handed its whole past and every re-delivered event (the `recorded`
    signal that ends a rewind's hand-over); a copy without it was interrupted halfway, and a
    batch rewind finishes or remakes it rather than skip it."""

    def search_attributes(self) -> SearchValues:
        """What the run is found by: set at start (the first record), upserted on every change;
        a rewound copy is found by its original too."""
        return coordination_attributes(
            Pattern.CHAIN,
            correlation_id=self.correlation_id,
            status=self.status,
            rewind_of=self.rewind_of,
        )


class ListenerId(RootModel[str]):
    """The workflow id an `attach` signal carries: a workflow the chain will signal."""

    root: str = Field(min_length=1, max_length=1000, pattern=r"^\S+$")


class QueuedRun(BaseModel):
    """An agent run waiting for a free slot; ordered by its trigger's priority, then arrival."""

    rank: int
    seq: int
    run: AgentRun

    def __lt__(self, other: "QueuedRun") -> bool:
        """Heap order of the run queue."""
        return (self.rank, self.seq) < (other.rank, other.seq)


RECORDED_BATCH = 100
"""The most events one `recorded` signal carries (the driver also keeps a batch's bytes small)."""


class RecordedEvents(BaseModel):
    """A batch of a rewound copy's past, in the original's order (`recorded` signal)."""

    model_config = ConfigDict(extra="forbid")

    events: list[EventEnvelope] = Field(max_length=RECORDED_BATCH)
    complete: bool = False
    """The last signal of a rewind's hand-over: every event the copy takes as recorded and every
    re-delivered one was sent before it (its `events` are usually none). The copy's record says
    so from then on (`ChainState.rewind_complete`)."""


class ChainCarry(BaseModel):
    """What a chain hands to its next run at continue-as-new. Its windows are trimmed to a fixed
    number of rows and ids, so its size depends on payload sizes, not on the chain's age."""

    state: ChainState
    seq: int
    timeline: list[TimelineEntry]
    causes: dict[str, str | None]
    depths: dict[str, int]
    first_causes: dict[str, str] = Field(default_factory=dict)
    """The first cause of each event whose depth is kept: the event its causes began with in
    this chain (`ChainIntake.first_cause`)."""
    runs_caused: dict[str, int] = Field(default_factory=dict)
    """Runs queued on the events each first cause caused, the most recently counted last
    (`max_runs_per_event`)."""
    joins: dict[str, JoinState]
    inbox: list[EventEnvelope]
    queue: list[QueuedRun]
    listeners: list[str] = Field(default_factory=list)
    closing: bool = False
    joined_causes: dict[str, list[str]] = Field(default_factory=dict)
    """Events in the inbox published by a joined agent → all their causes."""
    arrivals: list[str] = Field(default_factory=list)
    """`event` signals not decoded yet, after the inbox: the JSON text each carried. The next run
    validates them a bounded number a workflow task, as this one would have: validating
    thousands at continue-as-new would hold one activation for seconds."""
    recorded: list[str] = Field(default_factory=list)
    """Ids of waiting events a rewound copy takes as they stood in its original: recorded and
    matched, but no agent runs for them and no listener hears them again."""
    in_flight: dict[int, AgentRun] = Field(default_factory=dict)
    """Runs handed to a `ChainRun` of their own, by their queue number, whose outcome has not
    come back yet: it comes to whichever run of the chain is current (`run_outcome`)."""
    logged: int = 0
    """The sequence number of the last timeline row written to the correlation's log (the
    payload store); the rows after it stay in the timeline until written."""


SERVER_SIGNALS_PER_RUN = 10_000
"""The server's default `history.maximumSignalsPerExecution`: signals past it are refused."""


class ChainInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: ChainSpec
    correlation_id: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME)
    carried: ChainCarry | None = None
    rewind_of: RewindOrigin | None = None
    """Set on a rewound copy's first run: the correlation and event it was rewound from (its
    record keeps it as `ChainState.rewind_of`, carried across continue-as-new)."""
    signals_per_run: int = Field(default=SERVER_SIGNALS_PER_RUN, ge=100, le=1_000_000)
    """The server's limit on signals per run, which the chain must continue-as-new before: it
    continues at a quarter of it (or when the server suggests), and from half of it holds new
    events for the next run so nothing it started keeps it from continuing."""
