"""A team of python agents that talk (a plan's `team`): `scout` sends a code word to the
`closer` (and two notes to the long-lived `keeper`, one to someone outside the team), `helper`
works alone, `closer` answers with what it heard, `keeper` answers each message it is handed
with what it remembers."""

from collections.abc import Mapping
from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry

CODE_WORD = "tangerine"


async def scout(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    context.send("c", f"the code word is {CODE_WORD}")
    context.send("mallory", "the code word leaks")
    for note in event.payload.get("notes", []):
        context.send("keeper", note)
    return {"scouted": True}


async def helper(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return {"helped": True}


async def closer(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    heard = [message.message for message in context.messages]
    code = next((words.rsplit(" ", 1)[-1] for words in heard if "code word" in words), None)
    return {"code": code, "heard": [(m.sender, m.seq) for m in context.messages]}


async def keeper(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    remembered = [run["seq"] for run in context.inputs.get("memory", [])]
    return {"got": [m.message for m in context.messages], "remembered": remembered}


def team_registry() -> AgentRegistry:
    registry = AgentRegistry()
    for agent in (scout, helper, closer, keeper):
        registry.register(agent.__name__)(agent)
    return registry
