"""Where an agent run goes, so that a run pays only for what its agent needs.

An agent's own task queue (`agent_task_queue`) is what a pool, a rate limit or a worker of its
own elsewhere need: there its workers' slots and the server's rate limit hold it, and a run no
worker takes fails `agent_unavailable`. An agent the workflow's own worker serves, with neither
pool nor rate, needs none of that: its runs stay on the workflow's queue, where the worker that
schedules one is handed it at once with its workflow task (eager dispatch), or, for a short
in-process agent, run as a local activity of the workflow (no activity task at all: a marker in
the history). What the breaker, retries, timeouts, idempotency key and failure types do is the
same in all three places: the same `run_agent` runs the agent."""

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from coord.models.mesh.config import AgentDeclarationBase
from coord.models.wire.specs import MAX_NAME

MAX_PLACED = 256
"""Agents asked about in one look-up: a spec's steps, compensations and fallbacks."""


class Placement(StrEnum):
    AGENT_QUEUE = "agent_queue"
    """The agent's own task queue (pool, rate limit, or not served by the workflow's worker)."""
    HOME = "home"
    """The workflow's own task queue, handed over eagerly to the worker that schedules it."""
    LOCAL = "local"
    """A local activity of the workflow, on the worker running it."""


class PlacementAsk(BaseModel):
    """The agents a workflow asks its worker about, by name."""

    model_config = ConfigDict(extra="forbid")

    agents: list[str] = Field(max_length=MAX_PLACED)


class ChainPlacementAsk(PlacementAsk):
    """The agents, and a correlation whose chain the workflow would signal: whether it runs is
    answered too (`PlacementAnswer.chain_runs`)."""

    chain_of: str = Field(max_length=MAX_NAME)


class PlacementAnswer(BaseModel):
    """Where each agent asked about runs, and whether the chain asked about runs: None when
    not asked or not answered (the workflow then signals the chain, and learns from the
    signal). Answers recorded before said it only when every agent asked about ran locally."""

    agents: dict[str, Placement]
    chain_runs: bool | None = None


def placement(kind: str, declaration: AgentDeclarationBase | None) -> Placement:
    """Where a run of an agent the workflow's worker serves goes: its own queue when it is
    paced (pool, rate limit) or offers capabilities (routing weighs the load it reads from the
    agent's queue, which a run elsewhere would not add to); else a local activity when it is
    short and in-process (`python` unless declared `execution: remote`, any kind declared
    `execution: local`), else the workflow's queue."""
    if declaration is not None and (declaration.paced or declaration.capabilities):
        return Placement.AGENT_QUEUE
    execution = declaration.execution if declaration is not None else None
    if execution == "local" or (execution is None and kind == "python"):
        return Placement.LOCAL
    return Placement.HOME


def claim_holds(claimed: Placement, here: Placement) -> bool:
    """Whether a run placed `claimed` by its start may run where it came, for an agent this
    worker places `here`: on the workflow's queue, unless the agent needs its own queue (its
    pool, rate limit or routing hold there only) or is not served here; its own queue always."""
    if claimed == Placement.HOME:
        return here != Placement.AGENT_QUEUE
    return claimed == Placement.AGENT_QUEUE


def claimable(answer: PlacementAnswer) -> bool:
    """Whether a start may say where the runs go (`SAGA_PLACEMENTS_MEMO`): with the chain's
    answer, and every agent on the workflow's queue or its own. A local run is never taken from
    a start: which agents run inside the workflow's task is the worker's own choice (an agent
    too slow for it would hold the task), and a local run's marker is what replay follows."""
    return answer.chain_runs is not None and all(
        where != Placement.LOCAL for where in answer.agents.values()
    )
