"""A chain's run handed to a workflow of its own (`ChainRun`, coord.workflows.chain.run): what it
is started with, and the outcome it reports back to its chain by the chain's workflow id, so
that the outcome reaches whichever run of the chain is current when the agent (or vote) ends."""

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coord.models.chain.spec import Subscription
from coord.models.mesh.agents import AgentRequest, AgentResult
from coord.models.mesh.apart import Place, apart, event_payloads
from coord.models.mesh.assignment import Assignment
from coord.models.mesh.config import AgentConfig
from coord.models.mesh.runs import MAX_DETOURS, RunDetour, kept
from coord.models.vote.spec import VoteSpec, VoteState
from coord.models.wire.specs import MAX_ITEMS


class RunFailure(BaseModel):
    """How a run failed for good: what its chain parks (and publishes as `on_failure`)."""

    model_config = ConfigDict(extra="forbid")

    failure_type: str
    message: str
    attempts: int = Field(default=1, ge=0)


class Detoured(BaseModel):
    """A detour of the run (a wait at its agent's gate, a reroute, a fallback), with the agent
    picked when it was routed again by capability: what the chain keeps in its record."""

    model_config = ConfigDict(extra="forbid")

    detour: RunDetour
    assignment: Assignment | None = None


def noted(
    detours: list[Detoured], detour: RunDetour, assignment: Assignment | None
) -> list[Detoured]:
    """`detours` with one more, newest last, bounded as a run's record is (`kept`): waits in a
    row for the same reason add up in one entry; the oldest are dropped past MAX_DETOURS."""
    if assignment is None and detours and detours[-1].assignment is None:
        merged = kept([detours[-1].detour], detour)
        if len(merged) == 1:
            return [*detours[:-1], Detoured(detour=merged[0])]
    return [*detours, Detoured(detour=detour, assignment=assignment)][-MAX_DETOURS:]


class RunOutcome(BaseModel):
    """A run's outcome, the `run_outcome` signal to its chain: exactly one of an agent's
    `result`, a vote's record (`vote`) or a `failure`, after the run's `detours`. `seq` is the
    run's number in its chain (its queue number), which names the run the chain holds in
    flight."""

    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=0)
    result: AgentResult | None = None
    vote: VoteState | None = None
    failure: RunFailure | None = None
    detours: list[Detoured] = Field(default_factory=list, max_length=MAX_ITEMS)

    @model_validator(mode="after")
    def _one_outcome(self) -> Self:
        given = [name for name in ("result", "vote", "failure") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of result, vote or failure, not {given or 'none'}")
        return self


class ChainRunInput(BaseModel):
    """What a `ChainRun` is started with: its chain, its number there, the subscription (its
    timeouts and retries) and either the agent's request or the vote to hold."""

    model_config = ConfigDict(extra="forbid")

    chain_id: str = Field(min_length=1)
    seq: int = Field(ge=0)
    subscription: Subscription
    summary: str
    inline_agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """The chain spec's own agent declarations, for a run that goes to another agent."""
    request: AgentRequest | None = None
    vote: VoteSpec | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        if (self.request is None) == (self.vote is None):
            raise ValueError("give exactly one of request or vote")
        return self


def started_apart(run_input: ChainRunInput) -> list[Any]:
    """The arguments a `ChainRun` is started with: its input, with the event payloads of
    APART_BYTES or more it carries (its request's, as a run's activity sends them; its vote's
    proposal) sent apart (coord.models.mesh.apart), so that the payload store keeps one object
    for a payload however many `ChainRun`s carry it; the workflow joins them back."""
    return apart(run_input, _payloads_of)


def _payloads_of(run_input: ChainRunInput) -> list[tuple[Place, Any]]:
    if run_input.request is not None:
        return event_payloads(run_input.request, ["request"])
    assert run_input.vote is not None  # ChainRunInput holds exactly one
    return [(["vote", "proposal"], run_input.vote.proposal)]
