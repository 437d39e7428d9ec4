"""The `llm` agent kind against a real local chat-completions server: the prompt it sends, the
answer it reads, the failures it types (retried as Temporal's policy and the server's Retry-After
say, on the real dev server), and an API key that stays with the worker."""

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from coord.activities.kinds import load_agents
from coord.activities.mesh.run_agent import AgentActivities
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentRegistry, AgentRequest, AgentResult
from coord.models.mesh.config import WorkerSettings
from coord.models.plan.spec import PlanSpec, PlanStatus
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.specs import SpecError
from coord.starter import api
from coord.worker import build_worker
from tests.agents import registry
from tests.chat_server import Answer, ChatServer, api_error, chat_server, completion

KEY_ENV = "LLM_TEST_KEY"
VERDICT = '{"passed": true, "notes": "fine"}'


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "sk-test-" + uuid.uuid4().hex
    monkeypatch.setenv(KEY_ENV, value)
    return value


def declaration(base_url: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "llm",
        "base_url": base_url,
        "model": "test-model",
        "api_key_env": KEY_ENV,
        "prompt": "Review $task.",
        **fields,
    }


def reviewer(chat: ChatServer, **fields: Any) -> AgentRegistry:
    """A worker declaring one llm agent, `reviewer`, whose key it names as a secret."""
    return registry({"secrets": [KEY_ENV]}, reviewer=declaration(chat.url, **fields))


def request(config: dict[str, Any] | None = None, **inputs: Any) -> AgentRequest:
    """A run of `reviewer` on an event whose payload is `{"task": "build-api"}`; with `config`,
    the agent is declared inline."""
    event = EventEnvelope.new("ReviewRequested", "/test", payload={"task": "build-api"})
    return AgentRequest.model_validate(
        {"agent": "reviewer", "event": event, "inputs": inputs, "config": config}
    )


async def ask(agents: AgentRegistry, run: AgentRequest | None = None) -> AgentResult:
    """One run of the real `run_agent` activity."""
    return await ActivityEnvironment().run(AgentActivities(agents).run_agent, run or request())


async def refusal(agents: AgentRegistry, run: AgentRequest | None = None) -> ApplicationError:
    with pytest.raises(ApplicationError) as raised:
        await ask(agents, run)
    return raised.value


async def test_a_json_answer_becomes_the_result(key: str) -> None:
    with chat_server(completion(VERDICT)) as chat:
        agents = reviewer(
            chat,
            system="You review code.",
            prompt="Review ${task} for $stage: $result (was $$5)",
            temperature=0.2,
            max_tokens=300,
        )
        result = await ask(agents, request(stage="spec_compliance", result={"files": 3}))
    assert result.data == {"passed": True, "notes": "fine"}
    assert result.metadata["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 5,
        "total_tokens": 17,
    }
    assert result.metadata["model"] == "test-model"
    [sent] = chat.received
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "test-model"
    assert sent.body["messages"] == [
        {"role": "system", "content": "You review code."},
        {"role": "user", "content": 'Review build-api for spec_compliance: {"files": 3} (was $5)'},
    ]
    assert sent.body["response_format"] == {"type": "json_object"}
    assert (sent.body["temperature"], sent.body["max_tokens"]) == (0.2, 300)
    assert sent.headers["authorization"] == f"Bearer {key}"


async def test_optional_fields_are_not_sent(key: str) -> None:
    with chat_server(completion(VERDICT)) as chat:
        await ask(reviewer(chat, response_format="none"))
    [sent] = chat.received
    assert not {"temperature", "max_tokens", "response_format"} & set(sent.body)
    assert [m["role"] for m in sent.body["messages"]] == ["user"]


@pytest.mark.parametrize(
    "content",
    [
        'Here is my verdict:\n```json\n{"passed": false, "notes": "no tests"}\n```\nThanks.',
        '```\n{"passed": false, "notes": "no tests"}\n```',
        '{"passed": false, "notes": "no tests"}',
    ],
    ids=["fenced-json-in-prose", "bare-fence", "plain"],
)
async def test_a_fenced_json_answer_is_read(key: str, content: str) -> None:
    with chat_server(completion(content)) as chat:
        result = await ask(reviewer(chat))
    assert result.data == {"passed": False, "notes": "no tests"}


async def test_an_answer_that_quotes_a_fence_is_read_whole(key: str) -> None:
    verdict = {"passed": False, "notes": 'add ```json\n{"x": 1}\n``` to the docs'}
    with chat_server(completion(json.dumps(verdict))) as chat:
        result = await ask(reviewer(chat))
    assert result.data == verdict


@pytest.mark.parametrize(
    "content", ["I think it looks fine!", "[1, 2, 3]", "", "x" * 5000], ids=str.__len__
)
async def test_an_answer_that_is_not_a_json_object_is_invalid_payload(
    key: str, content: str
) -> None:
    with chat_server(completion(content)) as chat:
        error = await refusal(reviewer(chat))
    assert (error.type, error.non_retryable) == ("invalid_payload", True)
    assert error.message.startswith(
        "llm agent 'reviewer' answered something other than a JSON object: "
    )
    assert content[:50] in error.message and len(error.message) < 400, "a bounded excerpt"


@pytest.mark.parametrize(
    ("answer", "kind", "retryable", "delay"),
    [
        (api_error(400, "model 'gpt-9' does not exist"), "invalid_payload", False, None),
        (api_error(401, "bad key"), "unauthorized", False, None),
        (api_error(403, "not for you"), "unauthorized", False, None),
        (api_error(429, "slow down", **{"Retry-After": "7"}), "temporary_failure", True, 7),
        (api_error(503, "overloaded"), "temporary_failure", True, None),
    ],
    ids=lambda value: str(value.status) if isinstance(value, Answer) else None,
)
async def test_statuses_are_classified_as_the_http_kind_does(
    key: str, answer: Answer, kind: str, retryable: bool, delay: int | None
) -> None:
    with chat_server(answer) as chat:
        error = await refusal(reviewer(chat))
    expected_delay = None if delay is None else timedelta(seconds=delay)
    assert (error.type, error.non_retryable, error.next_retry_delay) == (
        kind,
        not retryable,
        expected_delay,
    )
    assert isinstance(answer.body, dict)
    said = answer.body["error"]["message"]
    assert error.message == (
        f"{chat.url}/chat/completions answered {answer.status} to llm agent 'reviewer': {said}"
    )
    assert len(chat.received) == 1, "the openai package's own retries are off"


async def test_no_answer_in_time_is_a_timeout(key: str) -> None:
    with chat_server(Answer(body=completion(VERDICT).body, delay=2)) as chat:
        error = await refusal(reviewer(chat, timeout="300ms"))
    assert (error.type, error.non_retryable) == ("timeout", False)
    assert "did not answer within 0.3s" in error.message


async def test_it_heartbeats_its_progress_while_the_model_thinks(key: str) -> None:
    beats: list[tuple[Any, ...]] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    with chat_server(Answer(body=completion(VERDICT).body, delay=2.5)) as chat:
        result = await env.run(AgentActivities(reviewer(chat)).run_agent, request())
    assert result.data == {"passed": True, "notes": "fine"}
    assert len(beats) >= 3, "one as it asks, then about one a second while it waits"
    assert {json.dumps(detail.model_dump()) for (detail,) in beats} == {
        '{"progress": "Asking test-model"}'
    }


async def test_no_server_is_a_temporary_failure(key: str) -> None:
    agents = registry({"secrets": [KEY_ENV]}, reviewer=declaration("http://127.0.0.1:9/v1"))
    error = await refusal(agents)
    assert (error.type, error.non_retryable) == ("temporary_failure", False)


@pytest.mark.parametrize("status", [200, 500])
async def test_an_answer_past_the_output_limit_is_refused(key: str, status: int) -> None:
    huge = completion("x" * 10_000)
    with chat_server(Answer(status, huge.body)) as chat:
        agents = registry(
            {"secrets": [KEY_ENV], "output_limit": "4KiB"}, reviewer=declaration(chat.url)
        )
        error = await refusal(agents)
    assert (error.type, error.non_retryable) == ("invalid_payload", True)
    assert error.message.endswith("answered past the worker's 4096-byte limit")


async def test_a_field_the_prompt_needs_is_missing(key: str) -> None:
    with chat_server(completion(VERDICT)) as chat:
        error = await refusal(reviewer(chat, prompt="Review $task at ${stage-name}."))
    assert (error.type, error.non_retryable) == ("invalid_payload", True)
    assert error.message == (
        "llm agent 'reviewer': the prompt's $stage-name is neither a field of the event payload "
        "nor an input; there are: inputs, payload, task"
    )
    assert chat.received == [], "nothing was asked"


def test_a_prompt_with_a_stray_dollar_is_refused_at_load(tmp_path: Path) -> None:
    agents = tmp_path / "agents.yaml"
    agents.write_text(
        "worker: {secrets: [KEY]}\nagents:\n  x: {kind: llm, base_url: 'http://127.0.0.1:1/v1', "
        "model: m, api_key_env: KEY, prompt: 'It costs $5 to review $task'}\n"
    )
    with pytest.raises(SpecError) as refused:
        load_agents(agents, AgentRegistry())
    assert str(refused.value) == (
        f"{agents}: agents.x.prompt: a `$` starts a placeholder ($name or ${{name}}); "
        "`$$` is a dollar sign"
    )


def test_a_key_not_named_in_worker_secrets_is_refused_at_load(tmp_path: Path) -> None:
    agents = (
        "agents:\n  reviewer:\n    kind: llm\n    base_url: https://api.openai.com/v1\n"
        "    model: gpt-4o-mini\n    api_key_env: TEMPORAL_API_KEY\n    prompt: Review $task\n"
    )
    unnamed = tmp_path / "agents.yaml"
    unnamed.write_text(agents)
    with pytest.raises(SpecError) as refused:
        load_agents(unnamed, AgentRegistry())
    assert str(refused.value) == (
        f"{unnamed}: agents.reviewer.api_key_env: TEMPORAL_API_KEY is not named under "
        "worker.secrets; add it there to let agents read it"
    )
    named = tmp_path / "named.yaml"
    named.write_text("worker:\n  secrets: [TEMPORAL_API_KEY]\n" + agents)
    assert list(load_agents(named, AgentRegistry())) == ["reviewer"]


async def test_an_inline_llm_agent_runs_only_where_the_worker_allows_the_kind_and_the_key(
    key: str,
) -> None:
    with chat_server(completion(VERDICT)) as chat:
        inline = request(declaration(chat.url))
        refused = await refusal(AgentRegistry(), inline)
        unnamed = await refusal(AgentRegistry(WorkerSettings(inline_agents=["llm"])), inline)
        assert chat.received == [], "neither refused run asked anything"
        allowing = AgentRegistry(WorkerSettings(inline_agents=["llm"], secrets=[KEY_ENV]))
        result = await ask(allowing, inline)
    assert (refused.type, refused.non_retryable) == ("agent_not_allowed", True)
    assert "inline agent 'reviewer' (kind llm) is not allowed" in refused.message
    assert "inline_agents: [llm]" in refused.message
    assert unnamed.type == "agent_not_allowed"
    assert f"api_key_env reads {KEY_ENV}, which this worker does not name" in unnamed.message
    assert result.data == {"passed": True, "notes": "fine"}


async def test_the_worker_environment_reaches_the_endpoint_only_as_the_declared_key(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The openai package would send OPENAI_ORG_ID, OPENAI_PROJECT_ID and OPENAI_CUSTOM_HEADERS
    from the worker's environment to whatever base_url a declaration names."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-worker")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-worker")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Worker: private\nAuthorization: Bearer other")
    with chat_server(completion(VERDICT)) as chat:
        await ask(reviewer(chat))
    [sent] = chat.received
    assert sent.headers["authorization"] == f"Bearer {key}"
    assert set(sent.headers) == {
        "host",
        "accept",
        "accept-encoding",
        "content-type",
        "content-length",
        "user-agent",
        "authorization",
    }
    assert "worker" not in str(sent.headers.values())


async def test_the_key_stays_out_of_messages_and_logs(
    key: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A server that echoes the key back: what it says is shown redacted."""
    caplog.set_level(logging.DEBUG)
    with chat_server(api_error(401, f"Incorrect API key provided: {key}")) as chat:
        error = await refusal(reviewer(chat))
    assert chat.received[0].headers["authorization"] == f"Bearer {key}"
    assert (error.type, error.non_retryable) == ("unauthorized", True)
    assert error.message.endswith("Incorrect API key provided: [redacted]")
    assert {"openai._base_client", "httpx"} <= {r.name for r in caplog.records}, "they did log"
    out, err = capfd.readouterr()
    assert key not in caplog.text + out + err + error.message


# On the real dev server: Temporal's retries, the server's Retry-After, and the history.

FAST_RETRY = {"max_retries": 2, "initial_delay": "100ms", "max_delay": "10s"}


async def review_saga(
    client: Client, task_queue: str, agents: AgentRegistry
) -> tuple[SagaState, WorkflowHandle[Any, SagaState]]:
    spec = SagaSpec.model_validate(
        {
            "saga_id": f"llm-{uuid.uuid4().hex[:8]}",
            "input": {"task": "build-api"},
            "steps": [{"name": "Review", "agent": "reviewer", "retry": FAST_RETRY}],
        }
    )
    async with build_worker(client, task_queue, agents):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    return state, handle


def readable(history: WorkflowHistory) -> str:
    """The history as JSON with every payload decoded (they are base64 in it), so a search
    finds what results, inputs and failure details carry."""
    text = history.to_json()
    found: list[str] = [text]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                if name == "data" and isinstance(value, str):
                    found.append(base64.b64decode(value).decode(errors="replace"))
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(text))
    return "\n".join(found)


def gap(chat: ChatServer) -> float:
    first, second = chat.received
    return second.at - first.at


async def test_a_429_is_retried_after_the_servers_retry_after(
    client: Client, task_queue: str, key: str, capfd: pytest.CaptureFixture[str]
) -> None:
    busy = api_error(429, "rate limited", **{"Retry-After": "2"})
    with chat_server(busy, completion(VERDICT)) as chat:
        state, handle = await review_saga(client, task_queue, reviewer(chat))
    assert state.status == SagaStatus.COMPLETED, state.failure_reason
    assert len(chat.received) == 2
    assert 2.0 <= gap(chat) < 8.0, "the server's 2 s, not the policy's 100 ms"
    history = readable(await handle.fetch_history())
    assert '"passed":true' in history, "the answer is the step's result"
    out, err = capfd.readouterr()
    assert key not in history + out + err


async def test_a_500_is_retried_by_the_policy(client: Client, task_queue: str, key: str) -> None:
    with chat_server(api_error(500, "oops"), completion(VERDICT)) as chat:
        state, _ = await review_saga(client, task_queue, reviewer(chat))
    assert state.status == SagaStatus.COMPLETED, state.failure_reason
    assert len(chat.received) == 2 and gap(chat) < 2.0, "the policy's 100 ms backoff"


@pytest.mark.parametrize(
    ("answer", "failure_type"),
    [
        (lambda key: completion("Looks good to me."), "invalid_payload"),
        (lambda key: api_error(401, f"Incorrect API key provided: {key}"), "unauthorized"),
    ],
    ids=["not-json", "401-echoing-the-key"],
)
async def test_failures_no_retry_can_fix_are_not_retried(
    client: Client,
    task_queue: str,
    key: str,
    answer: Callable[[str], Answer],
    failure_type: str,
) -> None:
    with chat_server(answer(key), completion(VERDICT)) as chat:
        state, handle = await review_saga(client, task_queue, reviewer(chat))
    assert state.status == SagaStatus.COMPENSATED, "nothing ran, so nothing to undo"
    assert state.failure_reason is not None and "llm agent 'reviewer'" in state.failure_reason
    assert len(chat.received) == 1, "not retried"
    history = readable(await handle.fetch_history())
    assert f'"type": "{failure_type}"' in history
    assert key not in history


# In a plan: an llm worker and an llm reviewer, declared inline, through a review fix round.

WRITER = {"model": "writer-model", "prompt": "Write a summary of $topic. Your inputs: $inputs"}
CRITIC = {
    "model": "critic-model",
    "system": 'Answer {"passed": bool, "notes": str}.',
    "prompt": "Review stage $stage of task $task: $result",
}


def summary(text: str) -> Answer:
    return completion(json.dumps({"summary": text}), model="writer-model")


def verdict(passed: bool, notes: str) -> Answer:
    return completion(json.dumps({"passed": passed, "notes": notes}), model="critic-model")


async def test_a_plan_with_an_llm_worker_and_an_llm_reviewer(
    client: Client, task_queue: str, key: str
) -> None:
    """`draft` is written, rejected at spec_compliance with notes, rewritten with the notes in
    its inputs, passes both stages; `announce` gets the draft's result by its task id."""
    writer = [summary("Retries happen."), summary("Retries wait for Retry-After.")]
    critic = [verdict(False, "mention Retry-After"), verdict(True, "ok"), verdict(True, "clean")]
    announcer = [completion('{"post": "shipped"}', model="announcer-model")]
    with chat_server(
        by_model={"writer-model": writer, "critic-model": critic, "announcer-model": announcer}
    ) as chat:
        spec = PlanSpec.model_validate(
            {
                "plan_id": f"llm-review-{uuid.uuid4().hex[:8]}",
                "agents": {
                    "writer": declaration(chat.url, **WRITER),
                    "critic": declaration(chat.url, **CRITIC),
                    "announcer": declaration(
                        chat.url, model="announcer-model", prompt="Announce ${draft}"
                    ),
                },
                "tasks": [
                    {
                        "id": "draft",
                        "agent": "writer",
                        "input": {"topic": "retries"},
                        "review": {"reviewer": "critic"},
                    },
                    {"id": "announce", "agent": "announcer", "depends_on": ["draft"]},
                ],
            }
        )
        allowing = AgentRegistry(WorkerSettings(inline_agents=["llm"], secrets=[KEY_ENV]))
        async with build_worker(client, task_queue, allowing):
            handle = await api.start_plan(client, spec, queue=task_queue)
            state = await asyncio.wait_for(api.plan_outcome(handle), 60)
    assert state.status == PlanStatus.COMPLETED
    draft, announce = state.tasks
    assert draft.result == {"summary": "Retries wait for Retry-After."}
    assert [(r.stage, r.verdicts[0].passed, r.verdicts[0].notes) for r in draft.reviews] == [
        ("spec_compliance", False, "mention Retry-After"),
        ("spec_compliance", True, "ok"),
        ("code_quality", True, "clean"),
    ]
    first, second = chat.prompts("writer-model")
    assert first == "Write a summary of retries. Your inputs: {}"
    assert "mention Retry-After" in second, "the fix round's notes reach the model"
    assert chat.prompts("critic-model")[0] == (
        'Review stage spec_compliance of task draft: {"summary": "Retries happen."}'
    )
    assert chat.prompts("announcer-model") == [
        'Announce {"summary": "Retries wait for Retry-After."}'
    ]
    assert announce.result == {"post": "shipped"}
    assert key not in readable(await handle.fetch_history())
