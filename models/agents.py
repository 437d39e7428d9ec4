"""What a workflow asks of an agent, and what the agent answers."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from models.envelope import EventEnvelope


class AgentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str
    event: EventEnvelope
    retry_on: list[str] = Field(default_factory=list)


class AgentResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str
    status: Literal["succeeded"] = "succeeded"
    data: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
