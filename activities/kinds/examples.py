"""A Python agent for `examples/agents.yaml`: any async function of (event, context) will do."""

from collections.abc import Mapping
from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext


async def summarize(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    words = sum(len(str(value).split()) for value in event.payload.values())
    return {"summary": f"{event.event.type}: {words} words", "metadata": {"quality_score": 1.0}}
