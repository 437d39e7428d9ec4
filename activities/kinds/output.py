"""What a shell or HTTP agent is sent, and what it answers on its output."""

import json
from collections.abc import Mapping
from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext
from coord.models.wire.contract import FailureType, failure


def request_json(event: EventEnvelope, context: AgentContext) -> bytes:
    """The event JSON, with the run's `inputs` beside it when it has any (a plan task's
    dependency results by task id, a saga step's earlier results): data, never references;
    and its team's `messages` to it, when it has any."""
    document = event.model_dump(mode="json")
    if context.inputs:
        document["inputs"] = dict(context.inputs)
    if context.messages:
        document["messages"] = [message.model_dump(mode="json") for message in context.messages]
    return json.dumps(document).encode()


def json_object_output(output: bytes, who: str) -> Mapping[str, Any]:
    """A JSON object, or nothing at all; anything else is an `invalid_payload` failure."""
    if not output.strip():
        return {}
    try:
        value = json.loads(output)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise failure(
            FailureType.INVALID_PAYLOAD, f"{who} answered something other than a JSON object"
        )
    return value
