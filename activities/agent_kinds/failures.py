"""The seed's error taxonomy as typed ApplicationErrors: `timeout` and `temporary_failure` are
retried by the step's or subscription's policy; `invalid_payload` and `unauthorized` are not."""

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ApplicationError

TIMEOUT = "timeout"
TEMPORARY_FAILURE = "temporary_failure"
INVALID_PAYLOAD = "invalid_payload"
UNAUTHORIZED = "unauthorized"
NOT_RETRYABLE = {INVALID_PAYLOAD, UNAUTHORIZED}


def failure(kind: str, message: str, *, retry_after: timedelta | None = None) -> ApplicationError:
    return ApplicationError(
        message, type=kind, non_retryable=kind in NOT_RETRYABLE, next_retry_delay=retry_after
    )


def json_object_output(output: bytes, who: str) -> Mapping[str, Any]:
    """What a shell or HTTP agent answers: a JSON object, or nothing at all."""
    if not output.strip():
        return {}
    try:
        value = json.loads(output)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise failure(INVALID_PAYLOAD, f"{who} answered something other than a JSON object")
    return value
