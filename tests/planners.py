"""Planner agents the tests run (in the worker's registry, or declared `kind: python` in an
agents file by `tests.planners:<name>`), and the worker agent they give tasks to."""

from collections.abc import Mapping
from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext


async def work(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """Answers with its task, its input and the results it was given (by task id)."""
    task = event.event.type.removesuffix("Requested")
    return {"task": task, **event.payload, "given": sorted(context.inputs)}


async def graph(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """Splits the goal into research, then writing, then a review, for `work`; the first task
    carries the agents the planner was told of."""
    goal = event.payload["goal"]
    return {
        "level": "coordinator",
        "why": "three steps, each after the one before",
        "tasks": [
            {
                "id": "research",
                "agent": "work",
                "input": {"goal": goal, "agents": sorted(context.inputs["agents"])},
            },
            {"id": "write", "agent": "work", "depends_on": ["research"]},
            {"id": "review", "agent": "work", "depends_on": ["write"]},
        ],
    }


async def ghost(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """A graph whose second task names an agent no worker declares."""
    return {
        "tasks": [
            {"id": "a", "agent": "work"},
            {"id": "b", "agent": "ghost", "depends_on": ["a"]},
        ]
    }


async def choose(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """The mode switch: a goal of several parts (`x and y`) is a coordinator's graph, one task
    per part; anything else it answers itself (the direct level)."""
    goal: str = event.payload["goal"]
    assert set(context.inputs["levels"]) == {"direct", "single", "team", "coordinator"}
    parts = [part.strip() for part in goal.split(" and ")]
    if len(parts) == 1:
        return {"level": "direct", "why": "one simple question", "answer": {"text": goal.upper()}}
    tasks = [{"id": f"part{i}", "agent": "work", "input": {"part": p}} for i, p in enumerate(parts)]
    return {"level": "coordinator", "why": f"{len(parts)} independent parts", "tasks": tasks}
