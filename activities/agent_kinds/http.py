"""HTTP agents: POST the event JSON; the status code says whether a retry can help."""

import asyncio
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from activities.agent_kinds.failures import (
    INVALID_PAYLOAD,
    TEMPORARY_FAILURE,
    TIMEOUT,
    UNAUTHORIZED,
    failure,
    json_object_output,
)
from activities.context import AgentContext
from models.agent_config import HttpAgent
from models.envelope import EventEnvelope

RETRYABLE_STATUSES = {408, 429}


async def run_http(
    config: HttpAgent, event: EventEnvelope, context: AgentContext
) -> Mapping[str, Any]:
    headers = {"Content-Type": "application/json", "Idempotency-Key": context.idempotency_key}
    for header, variable in config.headers_from_env.items():
        value = os.environ.get(variable)
        if value is None:
            raise failure(UNAUTHORIZED, f"header {header} needs ${variable}, which is not set")
        headers[header] = value
    request = urllib.request.Request(
        config.url, data=event.model_dump_json().encode(), headers=headers, method="POST"
    )
    status, retry_after, body = await asyncio.to_thread(_post, request, config.timeout)
    if 200 <= status < 300:
        return json_object_output(body, config.url)
    raise _classified(status, retry_after, config.url)


def _post(request: urllib.request.Request, timeout: timedelta) -> tuple[int, str | None, bytes]:
    try:
        with urllib.request.urlopen(request, timeout=timeout.total_seconds()) as response:
            return response.status, None, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Retry-After"), b""
    except TimeoutError:
        raise failure(TIMEOUT, f"{request.full_url} did not answer within {timeout}") from None
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError):
            raise failure(TIMEOUT, f"{request.full_url} did not answer within {timeout}") from None
        raise failure(TEMPORARY_FAILURE, f"{request.full_url}: {error.reason}") from None


def _classified(status: int, retry_after: str | None, url: str) -> Exception:
    if status in RETRYABLE_STATUSES or status >= 500:
        delay = (
            timedelta(seconds=int(retry_after)) if retry_after and retry_after.isdigit() else None
        )
        return failure(TEMPORARY_FAILURE, f"{url} answered {status}", retry_after=delay)
    if status in (401, 403):
        return failure(UNAUTHORIZED, f"{url} answered {status}")
    return failure(INVALID_PAYLOAD, f"{url} answered {status}")
