"""LLM agents: one chat completion on an OpenAI-compatible endpoint, through the official `openai`
package; the answer, a JSON object, is the agent's result. When the model calls tools instead
(only those of the agent's whitelist are offered, and a call of any other fails the run
`tool_not_allowed`), the worker runs them and asks again, up to `max_tool_rounds` times.

The package's own retries are off: Temporal's retry policy retries, with the server's Retry-After
as the next delay, by the http kind's status taxonomy. Its HTTP client is the worker's own: no
proxy or .netrc from the environment, no redirects, only the headers a chat completion needs
(none of what the package would pick up from OPENAI_* variables), and no answer read past
`worker.output_limit`. The API key comes from the variable the declaration names (one the worker
names under `worker.secrets`) when the request is sent; whatever the server says is shown with
the key redacted, so it reaches no message, log or history."""

import asyncio
import inspect
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar, cast

import httpx
import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
)
from pydantic import BaseModel, Field, ValidationError

from coord.activities import metrics
from coord.activities.kinds.genai import chat_span, record_usage
from coord.activities.kinds.http import secret_from_env, status_failure
from coord.activities.kinds.python import imported
from coord.infra.heartbeats import beating
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentFn, TeamMessage
from coord.models.mesh.config import LlmAgent, PromptTemplate, WorkerSettings
from coord.models.mesh.tiers import ModelChoice, tool_problem, tool_schema
from coord.models.mesh.usage import refusal
from coord.models.wire.contract import FailureType, Health, failure
from coord.models.wire.durations import format_duration
from coord.models.wire.specs import SpecError

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

    def plus(self, other: "Usage | None") -> "Usage":
        if other is None:
            return self
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


class FunctionCall(BaseModel):
    name: str
    arguments: str = "{}"


class ToolCall(BaseModel):
    id: str
    function: FunctionCall


class AnswerMessage(BaseModel):
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class AnswerChoice(BaseModel):
    message: AnswerMessage
    finish_reason: str | None = None


class ChatAnswer(BaseModel):
    """What the agent reads of a chat completion; servers differ in the rest, which is ignored."""

    choices: list[AnswerChoice] = Field(min_length=1)
    usage: Usage | None = None
    model: str | None = None


@dataclass(frozen=True)
class Asking:
    """One run's conversation settings: the model and timeout chosen, the tools offered (by
    name, with their functions), the key and the answer limit."""

    choice: ModelChoice
    tools: Mapping[str, Callable[..., Any]]
    schemas: list[ChatCompletionToolParam]
    key: str
    limit: int
    who: str


class RefusedAnswer(openai.OpenAIError):
    """An answer the worker will not read (too large, or compressed past the limit's reach).
    An OpenAIError, so the package passes it through rather than wrapping it."""


def llm_agent(name: str, config: LlmAgent, settings: WorkerSettings) -> AgentFn:
    """The agent's run, its whitelisted tools imported now, so a wrong path or a tool the
    worker does not offer stops the worker (or refuses an inline agent), not a run."""
    if problem := tool_problem(config.tools, settings.tools):
        raise SpecError(f"agents.{name}.tools: {problem}")
    tools = {
        tool: imported(f"worker.tools.{tool}.callable", settings.tools[tool].callable)
        for tool in config.tools
    }
    return partial(run_llm, config, settings, tools)


async def run_llm(
    config: LlmAgent,
    settings: WorkerSettings,
    tools: Mapping[str, Callable[..., Any]],
    event: EventEnvelope,
    context: AgentContext,
) -> Mapping[str, Any]:
    who = f"llm agent {context.agent!r}"
    if over := refusal(context.tokens, config.budget):
        raise failure(FailureType.BUDGET_EXCEEDED, f"{who}: {over}", non_retryable=True)
    choice = config.choice(settings.tiers, context.effort)
    if isinstance(choice, str):
        raise failure(FailureType.INVALID_SPEC, f"{who}: {choice}", non_retryable=True)
    messages = _messages(config, event, context, who)
    schemas = [cast(ChatCompletionToolParam, tool_schema(n, settings.tools[n])) for n in tools]
    asking = Asking(choice, tools, schemas, _api_key(config, who), int(settings.output_limit), who)
    context.progress(f"Asking {choice.model}")
    with chat_span(choice.model, config.base_url, event.event.correlation_id) as span:
        result = await _converse(config, asking, messages, context)
        record_usage(span, result.get("metadata", {}))
    metrics.llm_tokens(context.agent, choice.model, result["metadata"]["usage"])
    return result


async def _converse(
    config: LlmAgent,
    asking: Asking,
    messages: list[ChatCompletionMessageParam],
    context: AgentContext,
) -> dict[str, Any]:
    """Chat completions until the model answers without calling a tool: each call it makes is
    checked against the whitelist (any other refuses the run, `tool_not_allowed`, before a tool
    of that answer runs), run on the worker, and its result sent back. At most
    `max_tool_rounds` completions; their usage is summed."""
    usage = Usage()
    for _ in range(config.max_tool_rounds):
        answer = await _ask(config, asking, messages, context)
        usage = usage.plus(answer.usage)
        message = answer.choices[0].message
        if not message.tool_calls:
            return _result(answer, usage, asking.choice.model, asking.who, asking.key)
        _refuse_unlisted(message.tool_calls, config.tools, asking.who)
        messages.append(_assistant(message))
        for call in message.tool_calls:
            messages.append(await _call_tool(call, asking, context))
    raise failure(
        FailureType.INVALID_PAYLOAD,
        f"{asking.who}: still calling tools after {config.max_tool_rounds} chat completions "
        "(max_tool_rounds)",
    )


def _refuse_unlisted(calls: list[ToolCall], whitelist: list[str], who: str) -> None:
    unlisted = sorted({call.function.name for call in calls} - set(whitelist))
    if unlisted:
        allowed = ", ".join(whitelist) or "none"
        raise failure(
            FailureType.TOOL_NOT_ALLOWED,
            f"{who}: the model called {_excerpt(', '.join(unlisted), '')}, not in its tools "
            f"whitelist ({allowed}); nothing was run",
            non_retryable=True,
        )


def _assistant(message: AnswerMessage) -> ChatCompletionAssistantMessageParam:
    """The model's tool calls, sent back before their results as the protocol asks."""
    return {
        "role": "assistant",
        "content": message.content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in message.tool_calls or []
        ],
    }


async def _call_tool(
    call: ToolCall, asking: Asking, context: AgentContext
) -> ChatCompletionToolMessageParam:
    """The tool called with the model's arguments (one JSON object, passed as one dict: data,
    never keyword arguments), heartbeating while it runs, its result sent back as JSON, at
    most the worker's output limit. A plain `def` runs in a thread; what a tool raises fails
    the run."""
    who, name = asking.who, call.function.name
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise failure(
            FailureType.INVALID_PAYLOAD,
            f"{who}: the model called {name} with arguments that are not a JSON object: "
            f"{_excerpt(call.function.arguments, asking.key)!r}",
        )
    function = asking.tools[name]
    context.progress(f"Calling {name}")
    if inspect.iscoroutinefunction(function):
        answer = await _beating(function(arguments), context)
    else:
        answer = await _beating(asyncio.to_thread(function, arguments), context)
    content = _json(answer)
    if len(content.encode()) > asking.limit:
        raise failure(
            FailureType.INVALID_PAYLOAD,
            f"{who}: tool {name} answered past the worker's {asking.limit}-byte limit",
        )
    return {"role": "tool", "tool_call_id": call.id, "content": content}


async def _ask(
    config: LlmAgent,
    asking: Asking,
    messages: list[ChatCompletionMessageParam],
    context: AgentContext,
) -> ChatAnswer:
    timeout = asking.choice.timeout
    async with _client(config.base_url, timeout, asking.key, asking.limit) as client:
        request = client.chat.completions.with_raw_response.create(
            model=asking.choice.model,
            messages=messages,
            temperature=openai.omit if config.temperature is None else config.temperature,
            max_tokens=openai.omit if config.max_tokens is None else config.max_tokens,
            response_format=(
                {"type": "json_object"} if config.response_format == "json" else openai.omit
            ),
            tools=asking.schemas or openai.omit,
        )
        try:
            async with asyncio.timeout(timeout.total_seconds()):
                raw = await _beating(request, context)
        except (TimeoutError, openai.OpenAIError) as error:
            raise _failure(error, config.base_url, timeout, asking.who, asking.key) from None
    return _read(raw.http_response, asking.who, asking.key)


async def _beating(call: Awaitable[T], context: AgentContext) -> T:
    """Heartbeat while the model thinks, so a step's heartbeat_timeout holds and a cancel
    reaches the run; the call is cancelled with it."""
    return await beating(call, HEARTBEAT_SECONDS, context.heartbeat)


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


def _client(base_url: str, timeout: timedelta, key: str, limit: int) -> openai.AsyncOpenAI:
    seconds = timeout.total_seconds()
    http_client = httpx.AsyncClient(
        transport=WorkerTransport(key, limit),
        timeout=seconds,
        follow_redirects=False,
        trust_env=False,
    )
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=base_url,
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


def _failure(error: Exception, base_url: str, timeout: timedelta, who: str, key: str) -> Exception:
    """The http kind's taxonomy: statuses by `status_failure` (429 and 5xx temporary, with
    Retry-After; 401/403 unauthorized; others invalid_payload), timeouts `timeout`, no
    connection `temporary_failure`; each marked with its `Health` reason where it has one."""
    if isinstance(error, TimeoutError | openai.APITimeoutError):
        return failure(
            FailureType.TIMEOUT,
            f"{who}: {base_url} did not answer within {format_duration(timeout)}",
            health=Health.TIMEOUT,
        )
    if isinstance(error, openai.APIStatusError):
        return status_failure(error.response, f" to {who}: {_server_said(error.body, key)}")
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        return failure(
            FailureType.TEMPORARY_FAILURE,
            f"{who}: {base_url}: {_excerpt(str(cause) or type(cause).__name__, key)}",
            health=Health.CONNECTION,
        )
    return failure(FailureType.INVALID_PAYLOAD, f"{who}: {_excerpt(str(error), key)}")


def _server_said(body: object, key: str) -> str:
    """The error's message (the body's `message` when it has one), redacted and bounded."""
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        body = body["message"]
    return _excerpt(body if isinstance(body, str) else _json(body), key)


def _read(response: httpx.Response, who: str, key: str) -> ChatAnswer:
    try:
        return ChatAnswer.model_validate_json(response.content)
    except ValidationError:
        raise failure(
            FailureType.INVALID_PAYLOAD,
            f"{who}: {response.request.url} answered something other than a chat completion: "
            f"{_excerpt(response.text, key)!r}",
        ) from None


def _result(answer: ChatAnswer, usage: Usage, asked: str, who: str, key: str) -> dict[str, Any]:
    """The answer's JSON object, with the run's usage (every completion's) and the answering
    model (the one asked when the server names none) in its metadata."""
    choice = answer.choices[0]
    data = _json_object(choice.message.content or "", choice.finish_reason, who, key)
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise failure(FailureType.INVALID_PAYLOAD, f"{who} answered metadata that is not an object")
    model = answer.model or asked
    return {**data, "metadata": {**metadata, "usage": usage.model_dump(), "model": model}}


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
