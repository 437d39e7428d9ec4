"""A team of python agents that talk (a plan's `team`): `scout` sends a code word to the
`closer` (and notes to the long-lived `keeper`, one to someone outside the team), `helper`
works alone, `closer` answers with what it heard, `keeper` answers each message it is handed
with what it remembers, and `relay` (long-lived) passes each `to|words` message on."""

from collections.abc import Mapping
from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import WorkerSettings

CODE_WORD = "tangerine"


PAD_FILE = "scout-notes.txt"
"""What the scout leaves in the team's scratchpad, when its plan keeps one."""


def pad_note(context: AgentContext) -> str | None:
    """What the scout left in the team's scratchpad (None: no scratchpad, or nothing there)."""
    if context.scratchpad is None or not (context.scratchpad / PAD_FILE).exists():
        return None
    return (context.scratchpad / PAD_FILE).read_text()


async def scout(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    if context.scratchpad is not None:
        (context.scratchpad / PAD_FILE).write_text("left by the scout")
    if event.payload.get("tell_c", True):
        context.send("c", f"the code word is {CODE_WORD}")
    context.send("mallory", "the code word leaks")
    for note in event.payload.get("notes", []):
        context.send(event.payload.get("notes_to", "keeper"), note)
    return {"scouted": True}


async def helper(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return {"helped": True}


async def closer(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    heard = [message.message for message in context.messages]
    code = next((words.rsplit(" ", 1)[-1] for words in heard if "code word" in words), None)
    heard_from = [(m.sender, m.seq) for m in context.messages]
    return {"code": code, "heard": heard_from, "pad": pad_note(context)}


async def keeper(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    remembered = [run["seq"] for run in context.inputs.get("memory", [])]
    got = [m.message for m in context.messages]
    return {"got": got, "remembered": remembered, "pad": pad_note(context)}


async def relay(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """Passes each message `to|words` on to `to`."""
    for message in context.messages:
        to, _, words = message.message.partition("|")
        context.send(to, words)
    return {"relayed": len(context.messages)}


def team_registry(scratchpad_root: str | None = None) -> AgentRegistry:
    registry = AgentRegistry(WorkerSettings(scratchpad_root=scratchpad_root))
    for agent in (scout, helper, closer, keeper, relay):
        registry.register(agent.__name__)(agent)
    return registry
