"""What a workflow asks of an agent, and what the agent answers."""

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coord.models.agent_config import AgentConfig
from coord.models.envelope import EventEnvelope
from coord.models.specs import JsonObject


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
    earlier results by step name, the result a compensation undoes."""


class PublishRequest(BaseModel):
    """An event an agent asks its chain to publish, besides the subscription's own."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1)
    payload: JsonObject = Field(default_factory=dict)


RESERVED_RESULT_KEYS = ("publish", "metadata")
"""Keys an agent's result mapping may use to ask for events and report metadata (the seed's
`quality_score`, say); everything else is its data."""


class AgentResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str
    status: Literal["succeeded"] = "succeeded"
    data: JsonObject = Field(default_factory=dict)
    publish: list[PublishRequest] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_output(
        cls, agent: str, output: Mapping[str, Any] | None, duration_ms: float
    ) -> "AgentResult":
        output = dict(output or {})
        publish = output.pop("publish", [])
        metadata = {**output.pop("metadata", {}), "duration_ms": round(duration_ms, 1)}
        return cls(agent=agent, data=output, publish=publish, metadata=metadata)
