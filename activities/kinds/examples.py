"""A Python agent for `examples/agents.yaml`, and a tool for `llm` agents."""

from collections.abc import Mapping
from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext


async def summarize(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    words = sum(len(str(value).split()) for value in event.payload.values())
    return {"summary": f"{event.event.type}: {words} words", "metadata": {"quality_score": 1.0}}


def count_words(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    """A tool for `examples/agent-definitions.yaml`: any function of one mapping (the arguments
    the model gave) returning JSON will do."""
    return {"words": len(str(arguments.get("text", "")).split())}
