"""LLM agents: one chat completion on an OpenAI-compatible endpoint, through the official `openai`
package; the answer, a JSON object, is the agent's result.

The package's own retries are off: Temporal's retry policy retries, with the server's Retry-After
as the next delay, by the http kind's status taxonomy. Its HTTP client is the worker's own: no
proxy or .netrc from the environment, no redirects, only the headers a chat completion needs
(none of what the package would pick up from OPENAI_* variables), and no answer read past
`worker.output_limit`. The API key comes from the variable the declaration names (one the worker
names under `worker.secrets`) when the request is sent; whatever the server says is shown with
the key redacted, so it reaches no message, log or history."""

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, TypeVar

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel, Field, ValidationError

from coord.activities import metrics
from coord.activities.kinds.genai import chat_span, record_usage
from coord.activities.kinds.http import secret_from_env, status_failure
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, TeamMessage
from coord.models.mesh.config import LlmAgent, PromptTemplate, WorkerSettings
from coord.models.mesh.usage import refusal
from coord.models.wire.contract import FailureType, Health, failure

EXCERPT_CHARS = 200
"""How much of what a server or model said a failure message shows."""
SENT_HEADERS = frozenset({"host", "accept", "content-type", "content-length", "user-agent"})
FENCED_JSON = re.compile(r"```(?:json)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
REDACTED = "[redacted]"
HEARTBEAT_SECONDS = 1.0
T = TypeVar("T")


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class AnswerMessage(BaseModel):
    content: str | None = None


class AnswerChoice(BaseModel):
    message: AnswerMessage
    finish_reason: str | None = None


class ChatAnswer(BaseModel):
    """What the agent reads of a chat completion; servers differ in the rest, which is ignored."""

    choices: list[AnswerChoice] = Field(min_length=1)
    usage: Usage | None = None
    model: str | None = None


class RefusedAnswer(openai.OpenAIError):
    """An answer the worker will not read (too large, or compressed past the limit's reach).
    An OpenAIError, so the package passes it through rather than wrapping it."""


async def run_llm(
    config: LlmAgent, settings: WorkerSettings, event: EventEnvelope, context: AgentContext
) -> Mapping[str, Any]:
    who = f"llm agent {context.agent!r}"
    if over := refusal(context.tokens, config.budget):
        raise failure(FailureType.BUDGET_EXCEEDED, f"{who}: {over}", non_retryable=True)
    messages = _messages(config, event, context, who)
    key = _api_key(config, who)
    limit = int(settings.output_limit)
    context.progress(f"Asking {config.model}")
    with chat_span(config.model, config.base_url, event.event.correlation_id) as span:
        result = await _ask(config, messages, key, limit, who, context)
        record_usage(span, result.get("metadata", {}))
    metrics.llm_tokens(context.agent, config.model, result["metadata"]["usage"])
    return result


async def _ask(
    config: LlmAgent,
    messages: list[ChatCompletionMessageParam],
    key: str,
    limit: int,
    who: str,
    context: AgentContext,
) -> dict[str, Any]:
    seconds = config.timeout.total_seconds()
    async with _client(config, key, limit) as client:
        asking = client.chat.completions.with_raw_response.create(
            model=config.model,
            messages=messages,
            temperature=openai.omit if config.temperature is None else config.temperature,
            max_tokens=openai.omit if config.max_tokens is None else config.max_tokens,
            response_format=(
                {"type": "json_object"} if config.response_format == "json" else openai.omit
            ),
        )
        try:
            async with asyncio.timeout(seconds):
                raw = await _beating(asking, context)
        except (TimeoutError, openai.OpenAIError) as error:
            raise _failure(error, config, who, key) from None
    return _result(raw.http_response, config.model, who, key)


async def _beating(call: Awaitable[T], context: AgentContext) -> T:
    """Heartbeat while the model thinks, so a step's heartbeat_timeout holds and a cancel
    reaches the run; the call is cancelled with it."""
    asking = asyncio.ensure_future(call)
    try:
        while not asking.done():
            await asyncio.wait({asking}, timeout=HEARTBEAT_SECONDS)
            context.heartbeat()
        return asking.result()
    finally:
        asking.cancel()
        await asyncio.wait({asking})


def prompt_fields(
    payload: Mapping[str, Any], inputs: Mapping[str, Any], messages: Sequence[TeamMessage] = ()
) -> dict[str, str]:
    """What a prompt's placeholders name: `$payload` and `$inputs` (each as JSON), then each
    field of the payload and each input by name (an input wins over a payload field of the same
    name). Strings go in as they are, anything else as JSON. A team member's run also has
    `$messages`: what its team sent it, as JSON (a payload field or input of that name wins)."""
    sent = {"messages": [m.model_dump(mode="json") for m in messages]} if messages else {}
    named = {"payload": dict(payload), "inputs": dict(inputs), **sent, **payload, **inputs}
    return {name: text if isinstance(text, str) else _json(text) for name, text in named.items()}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _messages(
    config: LlmAgent, event: EventEnvelope, context: AgentContext, who: str
) -> list[ChatCompletionMessageParam]:
    fields = prompt_fields(event.payload, context.inputs, context.messages)
    try:
        prompt = PromptTemplate(config.prompt).substitute(fields)
    except KeyError as missing:
        raise failure(
            FailureType.INVALID_PAYLOAD,
            f"{who}: the prompt's ${missing.args[0]} is neither a field of the event payload nor "
            f"an input; there are: {_excerpt(', '.join(sorted(fields)), '')}",
        ) from None
    user: ChatCompletionMessageParam = {"role": "user", "content": prompt}
    if config.system is None:
        return [user]
    return [{"role": "system", "content": config.system}, user]


def _api_key(config: LlmAgent, who: str) -> str:
    key = secret_from_env(config.api_key_env, f"{who}'s api_key_env")
    if not key.strip():
        raise failure(FailureType.UNAUTHORIZED, f"{who}: ${config.api_key_env} is empty")
    return key


def _client(config: LlmAgent, key: str, limit: int) -> openai.AsyncOpenAI:
    seconds = config.timeout.total_seconds()
    http_client = httpx.AsyncClient(
        transport=WorkerTransport(key, limit),
        timeout=seconds,
        follow_redirects=False,
        trust_env=False,
    )
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=config.base_url,
        timeout=seconds,
        max_retries=0,
        http_client=http_client,
    )


class WorkerTransport(httpx.AsyncBaseTransport):
    """Sends only the headers a chat completion needs, with the declared key, and asks for an
    uncompressed answer so that the limit counts what is read."""

    def __init__(self, key: str, limit: int) -> None:
        self._inner = httpx.AsyncHTTPTransport(trust_env=False)
        self._key, self._limit = key, limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Sends a copy: the package reads its own markers back from the request it built."""
        headers = {name: value for name, value in request.headers.items() if name in SENT_HEADERS}
        headers |= {"Authorization": f"Bearer {self._key}", "Accept-Encoding": "identity"}
        sent = httpx.Request(
            request.method,
            request.url,
            headers=headers,
            stream=request.stream,
            extensions=request.extensions,
        )
        response = await self._inner.handle_async_request(sent)
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding != "identity":
            await response.aclose()
            raise RefusedAnswer(f"{request.url} answered in {encoding}; identity was asked for")
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = CappedStream(response.stream, self._limit, str(request.url))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedStream(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, limit: int, url: str) -> None:
        self._stream, self._limit, self._url = stream, limit, url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._stream:
            read += len(chunk)
            if read > self._limit:
                raise RefusedAnswer(
                    f"{self._url} answered past the worker's {self._limit}-byte limit"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def _failure(error: Exception, config: LlmAgent, who: str, key: str) -> Exception:
    """The http kind's taxonomy: statuses by `status_failure` (429 and 5xx temporary, with
    Retry-After; 401/403 unauthorized; others invalid_payload), timeouts `timeout`, no
    connection `temporary_failure`; each marked with its `Health` reason where it has one."""
    if isinstance(error, TimeoutError | openai.APITimeoutError):
        return failure(
            FailureType.TIMEOUT,
            f"{who}: {config.base_url} did not answer within {config.timeout}",
            health=Health.TIMEOUT,
        )
    if isinstance(error, openai.APIStatusError):
        return status_failure(error.response, f" to {who}: {_server_said(error.body, key)}")
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        return failure(
            FailureType.TEMPORARY_FAILURE,
            f"{who}: {config.base_url}: {_excerpt(str(cause) or type(cause).__name__, key)}",
            health=Health.CONNECTION,
        )
    return failure(FailureType.INVALID_PAYLOAD, f"{who}: {_excerpt(str(error), key)}")


def _server_said(body: object, key: str) -> str:
    """The error's message (the body's `message` when it has one), redacted and bounded."""
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        body = body["message"]
    return _excerpt(body if isinstance(body, str) else _json(body), key)


def _result(response: httpx.Response, declared: str, who: str, key: str) -> dict[str, Any]:
    """The answer's JSON object, with the completion's usage and model (the declared one when
    the server names none) in its metadata."""
    try:
        answer = ChatAnswer.model_validate_json(response.content)
    except ValidationError:
        raise failure(
            FailureType.INVALID_PAYLOAD,
            f"{who}: {response.request.url} answered something other than a chat completion: "
            f"{_excerpt(response.text, key)!r}",
        ) from None
    choice = answer.choices[0]
    data = _json_object(choice.message.content or "", choice.finish_reason, who, key)
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise failure(FailureType.INVALID_PAYLOAD, f"{who} answered metadata that is not an object")
    usage = (answer.usage or Usage()).model_dump()
    model = answer.model or declared
    return {**data, "metadata": {**metadata, "usage": usage, "model": model}}


def _json_object(content: str, finish_reason: str | None, who: str, key: str) -> dict[str, Any]:
    """The answer as a JSON object: all of it, or else its first fenced (```json) block."""
    fenced = FENCED_JSON.search(content)
    for candidate in (content, fenced.group(1) if fenced else None):
        if candidate is None:
            continue
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    cut = " (cut off: finish_reason length; raise max_tokens)" if finish_reason == "length" else ""
    raise failure(
        FailureType.INVALID_PAYLOAD,
        f"{who} answered something other than a JSON object{cut}: {_excerpt(content, key)!r}",
    )


def _excerpt(text: str, key: str) -> str:
    """At most EXCERPT_CHARS of `text`, the key replaced wherever it appears."""
    text = text.replace(key, REDACTED) if key else text
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"
