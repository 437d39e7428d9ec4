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


async def plan_by_parts(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """A planner for `coord run GOAL --planner planner` (`examples/planner-agents.yaml`): a goal
    of several parts (`x and y`) is a coordinator's graph, one task per part for `doc-writer`
    when the worker has it (else the first agent it was told of); a goal of one part it answers
    itself. A real planner is an `llm` agent whose prompt asks for the same JSON."""
    goal = str(event.payload["goal"])
    parts = [part.strip() for part in goal.split(" and ") if part.strip()]
    if len(parts) < 2:
        return {"level": "direct", "why": "one part: no agent needed", "answer": {"goal": goal}}
    agents = sorted(context.inputs.get("agents", {}))
    agent = "doc-writer" if "doc-writer" in agents else agents[0]
    tasks = [
        {"id": f"part{i}", "agent": agent, "summary": part[:60], "input": {"part": part}}
        for i, part in enumerate(parts)
    ]
    return {"level": "coordinator", "why": f"{len(parts)} independent parts", "tasks": tasks}
