"""What a shell or HTTP agent answers on its output."""

import json
from collections.abc import Mapping
from typing import Any

from coord.models.contract import FailureType, failure


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
