"""The agent SDK: what agents are written against, and what both sides of the wire import.

An agent is an async function of the event and its run's context (`AgentFn`, `AgentContext`); a
worker serves the agents in its `AgentRegistry`; a workflow asks for a run with an `AgentRequest`
and gets an `AgentResult`. The worker (activities) and the client side (the CLI's and the API's
pre-start check, `check_agents`) import this module, never each other."""

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.config import (
    AgentConfig,
    AgentDeclarationBase,
    WorkerSettings,
    publishes_allowed,
)
from coord.models.mesh.declared import unknown_agent
from coord.models.mesh.placement import Placement, placement
from coord.models.mesh.results import MAX_PROGRESS, ResultReference
from coord.models.mesh.retry import RunBudget
from coord.models.mesh.runs import RetryJitter
from coord.models.mesh.tiers import Effort
from coord.models.mesh.usage import TokenAllowance
from coord.models.wire.contract import FailureType, failure
from coord.models.wire.specs import MAX_COUNT, JsonObject, SpecError

__all__ = [
    "MAX_PROGRESS",
    "RESERVED_RESULT_KEYS",
    "AgentContext",
    "AgentFn",
    "AgentProgress",
    "AgentRegistry",
    "AgentRequest",
    "AgentResult",
    "OutgoingMessage",
    "ProgressReporter",
    "PublishRequest",
    "ResultReference",
    "TeamMessage",
]


class AgentProgress(BaseModel):
    """A run's heartbeat details: what its agent last said it is doing (`"Reading runAgent.ts"`),
    which whoever watches the run (a plan's progress reader) reads back from the server."""

    progress: str = Field(max_length=MAX_PROGRESS)


class ProgressReporter:
    """Where a run's progress goes: `send` is the activity's heartbeat on a worker, nothing in a
    plain call. Every heartbeat carries the latest summary, since the server keeps only the last
    heartbeat's details: a keep-alive beat without it would erase what the agent last said."""

    def __init__(self, send: Callable[..., None] | None = None) -> None:
        self._send = send or _nowhere
        self.latest: AgentProgress | None = None

    def report(self, summary: str) -> None:
        self.latest = AgentProgress(progress=summary.strip()[:MAX_PROGRESS])
        self.beat()

    def beat(self) -> None:
        self._send(*([self.latest] if self.latest else []))


def _nowhere(*details: Any) -> None:
    """No run to report to."""


class OutgoingMessage(BaseModel):
    """A message a run asks to send to a member of its team (`AgentContext.send`, or a result's
    `send` key). Unbounded here on purpose: the plan refuses one over its sender's limits with
    the reason, instead of the whole result failing to validate."""

    model_config = ConfigDict(extra="forbid")

    to: str
    message: str


class TeamMessage(BaseModel):
    """A message between team members, as delivered: numbered in the plan's order (`seq`), with
    who sent it and from which task's run."""

    seq: int = Field(ge=1)
    sender: str
    to: str
    message: str
    task: str
    at: datetime


@dataclass(frozen=True)
class AgentContext:
    """What an agent is told of its run (which attempt, its idempotency key, its inputs), and
    how it says what it is doing (`progress`) or that it is still alive (`heartbeat`)."""

    agent: str
    attempt: int
    idempotency_key: str
    """Stable across retries of the same run, so agents can avoid repeating side effects."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """The request's `inputs`: joined events by slot, earlier saga results by step name, a
    plan's dependency results by task id (results stored by reference arrive as their data)."""
    reporter: ProgressReporter = field(default_factory=ProgressReporter, repr=False, compare=False)
    tokens: TokenAllowance | None = None
    """The request's `tokens`: what the run's workflow has used and its spec's budget (an
    `llm` agent refuses to run when nothing is left; another agent may read it too)."""
    effort: Effort | None = None
    """The request's `effort`: the model tier its task asks for (an `llm` agent's model and
    timeout when it declares none of its own)."""

    rewind_of: str | None = None
    """Set when the run belongs to a rewound copy (`<original>@<point>`, the request's): an agent
    with side effects outside the coordinator may tell a what-if from the real thing."""
    messages: Sequence[TeamMessage] = ()
    """Messages from other members of the run's team (a plan's), oldest first, each with its
    `sender`: those that arrived since the member's previous run, or the one a long-lived
    member was handed."""
    outbox: list[OutgoingMessage] = field(default_factory=list, repr=False, compare=False)
    """What the run asked to `send`; it travels in the run's result."""
    scratchpad: Path | None = None
    """The directory its plan's team shares on this worker (the plan's `scratchpad`, under the
    worker's `scratchpad_root`), where members leave files for each other; None outside a
    plan with one, or on a worker that keeps no scratchpads."""

    def send(self, to: str, message: str) -> None:
        """Send `message` to team member `to`, with the run's result: the plan delivers it
        to that member's next run (or to the member waiting for one), or refuses it with a
        reason in its record (`to` not in the team, over the sender's limits)."""
        self.outbox.append(OutgoingMessage(to=to, message=message))

    def progress(self, summary: str) -> None:
        """Say what the agent is doing now, in a few words (`"Fixing null check"`); the run's
        watchers (`coord plan state`, the UI) show the latest. Cheap enough to call often: the
        worker sends heartbeats at most once a throttle interval, the latest one winning.
        Truncated to MAX_PROGRESS characters; callable from a thread of a plain `def` agent."""
        self.reporter.report(summary)

    def heartbeat(self) -> None:
        """Tell the server the agent is alive (and let a cancel reach it) without changing its
        progress; use this, not `activity.heartbeat()`, which would erase the summary."""
        self.reporter.beat()


AgentFn = Callable[[EventEnvelope, AgentContext], Awaitable[Mapping[str, Any] | None]]


class AgentRegistry:
    """The agents a worker declares, and its settings: what it trusts from outside."""

    def __init__(self, settings: WorkerSettings | None = None) -> None:
        self._agents: dict[str, AgentFn] = {}
        self.kinds: dict[str, str] = {}
        """Each agent's kind (`python` for one registered in code), shown by `coord agents`."""
        self.declarations: dict[str, AgentDeclarationBase] = {}
        """The declarations of agents from an agents file: their mesh fields (pool, rate)."""
        self.catalogue: dict[str, list[str]] = {}
        """Every agent declared to this worker -> the capabilities it offers, including the
        agents `only` leaves out: a run naming capabilities may go to an agent served on
        another host (`choose_agent` picks from it)."""
        self.settings = settings or WorkerSettings()

    def register(
        self, name: str, kind: str = "python", declaration: AgentDeclarationBase | None = None
    ) -> Callable[[AgentFn], AgentFn]:
        def add(fn: AgentFn) -> AgentFn:
            if name in self._agents:
                raise ValueError(f"agent {name!r} is already registered")
            self._agents[name] = fn
            self.kinds[name] = kind
            if declaration is not None:
                self.declarations[name] = declaration
            self.catalogue[name] = list(declaration.capabilities) if declaration else []
            return fn

        return add

    def only(self, names: Iterable[str]) -> "AgentRegistry":
        """The same settings with just the agents named (`coord worker --only a,b`), and the
        whole catalogue; a name no agent answers to is a SpecError saying which agents there
        are."""
        subset = AgentRegistry(self.settings)
        for name in names:
            if name not in self._agents:
                raise SpecError(self.unknown(name))
            subset.register(name, self.kinds[name], self.declarations.get(name))(self._agents[name])
        subset.catalogue = dict(self.catalogue)
        return subset

    def publishes_allowed(self, name: str, inline: AgentConfig | None) -> list[str] | None:
        """What the agent a request names may publish itself (`publishes_allowed`), by the
        declaration the run uses: the inline one it carries, else this worker's."""
        if inline is not None:
            return publishes_allowed(inline.kind, inline)
        return publishes_allowed(self.kinds.get(name, "python"), self.declarations.get(name))

    def max_concurrent(self, name: str) -> int | None:
        """The pool size (across all workers) `name` is declared with; None: no pool."""
        declaration = self.declarations.get(name)
        return declaration.max_concurrent if declaration is not None else None

    def placement(self, name: str) -> Placement:
        """Where a run of `name` goes from a workflow this worker runs (`placement`): its own
        queue when this worker does not serve it."""
        if name not in self._agents:
            return Placement.AGENT_QUEUE
        return placement(self.kinds[name], self.declarations.get(name))

    def get(self, name: str) -> AgentFn:
        try:
            return self._agents[name]
        except KeyError:
            raise failure(
                FailureType.UNKNOWN_AGENT, self.unknown(name), non_retryable=True
            ) from None

    def unknown(self, name: str) -> str:
        return unknown_agent(name, self)

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __iter__(self) -> Iterator[str]:
        return iter(self._agents)


class AgentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str
    event: EventEnvelope
    retry_on: list[str] = Field(default_factory=list)
    config: AgentConfig | None = None
    """The agent's declaration when the spec carries it inline; else the worker's registry."""
    idempotency_key: str | None = None
    """Set by the workflow from what makes this run unique (the triggering event and the
    subscription or step), so it is the same across retries and DLQ replays of one run and
    differs between runs; agents pass it on (HTTP `Idempotency-Key`)."""
    inputs: dict[str, Any] = Field(default_factory=dict)
    """What the run depends on besides its trigger: a join's events by slot, a saga step's
    earlier results by step name, the result a compensation undoes. A value
    `{"result_ref": ResultReference}` is read from the payload store before the agent runs, so
    the agent sees the data while history holds only the reference."""
    result_limit: int | None = Field(default=None, ge=0)
    """When the result's data is larger than this (JSON bytes), it goes to the payload store
    and the result carries only its `reference`."""
    gates_return: bool = False
    """True: a refusal made before the agent is called (`circuit_open`, `pool_full`) comes back
    to the workflow at once, never retried by Temporal, and the workflow waits or sends the run
    elsewhere without spending its attempts (`coord.models.mesh.runs`)."""
    attempts_before: int = Field(default=0, ge=0, le=MAX_COUNT)
    """Attempts the run spent in earlier activity executions (before a gate refusal): the
    agent's `attempt`, and the failures' attempt counts, go on from there."""
    jitter: RetryJitter | None = None
    """How the worker spreads the delay before each retry (None: the policy's backoff)."""
    budget: RunBudget | None = None
    """The run's retries, counted by its worker (the server then sets no attempt limit): only
    the agent's own failures spend them, not attempts a server outage or a dead worker lost.
    None: the server's retry policy counts every attempt."""
    tokens: TokenAllowance | None = None
    """The tokens the run's workflow has used and its spec's token budget, for an `llm` agent to
    refuse the run when nothing is left (`coord.models.mesh.usage`). None: nothing used and no
    budget in the spec."""
    effort: Effort | None = None
    """The model tier the run's task asks for (a plan task's `kind`, `TASK_KIND_EFFORT`); None:
    the agent's own `effort`."""
    messages: list[TeamMessage] = Field(default_factory=list, max_length=MAX_COUNT)
    """Messages from the run's team members (`AgentContext.messages`)."""
    rewind_of: str | None = None
    """The rewound copy the run belongs to (`CoordRewindOf`), for `AgentContext.rewind_of`."""
    scratchpad: str | None = None
    """Its plan's scratchpad (`<scratchpad>/<plan_id>`), relative to the worker's
    `scratchpad_root`: the worker resolves it (`AgentContext.scratchpad`), never trusting it
    to leave that root."""
    placed: Placement | None = Field(default=None, exclude_if=lambda placed: placed is None)
    """Where the run's start placed it (`SAGA_PLACEMENTS_MEMO`), which the worker checks before
    calling the agent (`claim_holds`, else `misplaced`); None, and left out of the payload: the
    workflow's worker placed it."""


class PublishRequest(BaseModel):
    """An event an agent asks its chain to publish, besides the subscription's own."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1)
    payload: JsonObject = Field(default_factory=dict)


RESERVED_RESULT_KEYS = ("publish", "metadata", "send")
"""Keys an agent's result mapping may use to ask for events, report metadata (the
`quality_score`, say) and send messages to its team (`[{"to", "message"}]`); everything else
is its data."""


class AgentResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str
    status: Literal["succeeded"] = "succeeded"
    data: JsonObject = Field(default_factory=dict)
    """Empty when the data went to the payload store: then `reference` names it."""
    reference: ResultReference | None = None
    publish: list[PublishRequest] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The agent's own (`quality_score`), plus `duration_ms` and the `attempt` that succeeded."""
    messages: list[OutgoingMessage] = Field(default_factory=list)
    """What the run asked to send to its team (`AgentContext.send`, the output's `send`): data
    the plan checks against its team's rules before anything goes."""
    may_publish: list[str] | None = Field(default_factory=list)
    """Set by the worker from the agent's declaration, never from its output: the event types
    it may publish itself besides those its subscription declares (`publishes_allowed`); None,
    no restriction of its own. A result that does not say (from a worker before the rule) is
    held to its subscription's declared types."""

    @classmethod
    def from_output(
        cls,
        agent: str,
        output: Mapping[str, Any] | None,
        duration_ms: float,
        attempt: int,
        *,
        may_publish: list[str] | None,
    ) -> "AgentResult":
        output = dict(output or {})
        publish = output.pop("publish", [])
        messages = output.pop("send", [])
        metadata = {
            **output.pop("metadata", {}),
            "duration_ms": round(duration_ms, 1),
            "attempt": attempt,
        }
        return cls(
            agent=agent,
            data=output,
            publish=publish,
            metadata=metadata,
            may_publish=may_publish,
            messages=messages,
        )
