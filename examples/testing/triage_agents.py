"""A user's own agents, written against the agent SDK's one import (`coord.agents`) and declared
in agents.yaml beside them: `triage` reads a bug report and says how bad it is, `page_on_call`
tells the on-call engineer about a critical one."""

from coord.agents import AgentContext, EventEnvelope, FailureType, failure

URGENT = ("crash", "data loss", "outage", "security")


async def triage(event: EventEnvelope, context: AgentContext) -> dict[str, object]:
    """`{"title", "severity"}`: `critical` when the report mentions an urgent word, else
    `minor`. A report without a title fails `invalid_payload`: no retry would fix it, so the
    chain parks the event in the dead-letter queue for a person."""
    title = event.payload.get("title")
    if not isinstance(title, str) or not title.strip():
        raise failure(FailureType.INVALID_PAYLOAD, "a bug report needs a title")
    context.progress(f"Triaging {title!r}")
    text = f"{title} {event.payload.get('body', '')}".lower()
    severity = "critical" if any(word in text for word in URGENT) else "minor"
    return {"title": title, "severity": severity}


async def page_on_call(event: EventEnvelope, context: AgentContext) -> dict[str, object]:
    return {"paged": "on-call", "about": event.payload.get("title")}
