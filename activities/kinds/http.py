"""HTTP agents: POST the event JSON (and the run's inputs); the status code says whether a retry
can help.

Secret headers (`headers_from_env`) go only to the declared URL's origin: redirects are not
followed unless the declaration allows it, and then only 307/308 (which keep the POST and its
body), without the secret headers once the origin changes."""

import asyncio
import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from temporalio import activity

from coord.activities.kinds.output import json_object_output, request_json
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext
from coord.models.mesh.config import HttpAgent, WorkerSettings
from coord.models.wire.contract import FailureType, Health, failure
from coord.models.wire.durations import format_duration

RETRYABLE_STATUSES = {408, 429}
FOLLOWABLE_REDIRECTS = {307, 308}
MAX_REDIRECTS = 5
LONGEST_RETRY_DELAY = timedelta(hours=1)
"""The cap on a Retry-After when the activity's retry policy names no maximum interval."""


async def run_http(
    config: HttpAgent, settings: WorkerSettings, event: EventEnvelope, context: AgentContext
) -> Mapping[str, Any]:
    secrets = {
        header: secret_from_env(name, f"header {header}")
        for header, name in config.headers_from_env.items()
    }
    headers = {"Content-Type": "application/json", "Idempotency-Key": context.idempotency_key}
    # trust_env=False: no proxy or .netrc credentials picked up from the worker's environment.
    async with httpx.AsyncClient(
        timeout=config.timeout.total_seconds(), follow_redirects=False, trust_env=False
    ) as client:
        request = client.build_request(
            "POST", config.url, content=request_json(event, context), headers={**headers, **secrets}
        )
        try:
            async with asyncio.timeout(config.timeout.total_seconds()):
                return await _post(client, request, config, secrets, int(settings.output_limit))
        except (TimeoutError, httpx.TimeoutException):
            raise failure(
                FailureType.TIMEOUT,
                f"{config.url} did not answer within {format_duration(config.timeout)}",
                health=Health.TIMEOUT,
            ) from None
        except httpx.TransportError as error:
            raise failure(
                FailureType.TEMPORARY_FAILURE, f"{request.url}: {error}", health=Health.CONNECTION
            ) from None


def secret_from_env(variable: str, needed_by: str) -> str:
    """A secret's value, read when the request is sent; the message names only the variable."""
    value = os.environ.get(variable)
    if value is None:
        raise failure(FailureType.UNAUTHORIZED, f"{needed_by} needs ${variable}, which is not set")
    return value


async def _post(
    client: httpx.AsyncClient,
    request: httpx.Request,
    config: HttpAgent,
    secrets: Mapping[str, str],
    limit: int,
) -> Mapping[str, Any]:
    """Send, following allowed redirects; a secret header never crosses to another origin."""
    origin = request.url.copy_with(path="/", query=None, fragment=None)
    for _ in range(MAX_REDIRECTS + 1):
        response = await client.send(request, stream=True)
        try:
            if response.is_success:
                return json_object_output(await _read_capped(response, limit), str(request.url))
            following = response.next_request if _followable(response, config) else None
            if following is None:
                raise _classified(response)
        finally:
            await response.aclose()
        request = following
        if request.url.copy_with(path="/", query=None, fragment=None) != origin:
            for header in secrets:
                request.headers.pop(header, None)
    raise failure(
        FailureType.INVALID_PAYLOAD, f"{config.url} redirected more than {MAX_REDIRECTS} times"
    )


def _followable(response: httpx.Response, config: HttpAgent) -> bool:
    return config.follow_redirects and response.status_code in FOLLOWABLE_REDIRECTS


async def _read_capped(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise failure(
                FailureType.INVALID_PAYLOAD,
                f"{response.url} answered past the worker's {limit}-byte limit",
            )
    return bytes(body)


def _classified(response: httpx.Response) -> Exception:
    status, url = response.status_code, response.request.url
    if response.is_redirect or 300 <= status < 400:
        location = response.headers.get("Location", "no Location")
        return failure(
            FailureType.INVALID_PAYLOAD,
            f"{url} answered {status} redirecting to {location}; redirects are not followed "
            "(a declaration may set follow_redirects: true for 307/308)",
        )
    return status_failure(response)


def status_failure(response: httpx.Response, detail: str = "") -> Exception:
    """The failure an unsuccessful status means: 408, 429 and 5xx are temporary (Retry-After the
    next delay; 429 and 5xx say the server is unwell, `Health`), 401/403 unauthorized, anything
    else invalid_payload. `detail` ends the message."""
    status, url = response.status_code, response.request.url
    if status in RETRYABLE_STATUSES or status >= 500:
        delay = retry_after(response.headers.get("Retry-After"), _longest_retry_delay())
        return failure(
            FailureType.TEMPORARY_FAILURE,
            f"{url} answered {status}{detail}",
            retry_after=delay,
            health=_status_health(status),
        )
    if status in (401, 403):
        return failure(FailureType.UNAUTHORIZED, f"{url} answered {status}{detail}")
    return failure(FailureType.INVALID_PAYLOAD, f"{url} answered {status}{detail}")


def _status_health(status: int) -> Health | None:
    """5xx and 429 say the server is unwell or overwhelmed; a 408 says the request was slow."""
    if status >= 500:
        return Health.HTTP_5XX
    return Health.HTTP_429 if status == 429 else None


def retry_after(value: str | None, longest: timedelta) -> timedelta | None:
    """Retry-After as delay-seconds or an HTTP-date, no longer than `longest`; None when absent,
    unreadable or already past (the retry policy's own backoff applies)."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        seconds = min(float(value), longest.total_seconds())
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, OverflowError):
            return None
        moment = when if when.tzinfo else when.replace(tzinfo=UTC)
        seconds = min((moment - datetime.now(UTC)).total_seconds(), longest.total_seconds())
    return timedelta(seconds=seconds) if seconds > 0 else None


def _longest_retry_delay() -> timedelta:
    """The retry policy's maximum interval: a server cannot hold a retry back longer."""
    policy = activity.info().retry_policy
    if policy is not None and policy.maximum_interval is not None:
        return policy.maximum_interval
    return LONGEST_RETRY_DELAY
