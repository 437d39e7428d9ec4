"""A chain's run handed to a workflow of its own (`ChainRun`, coord.workflows.chain_run): what it
is started with, and the outcome it reports back to its chain by the chain's workflow id, so
that the outcome reaches whichever run of the chain is current when the agent (or vote) ends."""

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coord.models.agents import AgentRequest, AgentResult
from coord.models.chain import Subscription
from coord.models.vote import VoteSpec, VoteState


class RunFailure(BaseModel):
    """How a run failed for good: what its chain parks (and publishes as `on_failure`)."""

    model_config = ConfigDict(extra="forbid")

    failure_type: str
    message: str
    attempts: int = Field(default=1, ge=0)


class RunOutcome(BaseModel):
    """A run's outcome, the `run_outcome` signal to its chain: exactly one of an agent's
    `result`, a vote's record (`vote`) or a `failure`. `seq` is the run's number in its chain
    (its queue number), which names the run the chain holds in flight."""

    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=0)
    result: AgentResult | None = None
    vote: VoteState | None = None
    failure: RunFailure | None = None

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
    request: AgentRequest | None = None
    vote: VoteSpec | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        if (self.request is None) == (self.vote is None):
            raise ValueError("give exactly one of request or vote")
        return self
