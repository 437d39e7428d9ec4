"""Agent definitions at work, against a real local chat-completions server: the tools whitelist
(what the model is offered, a call outside it refused and never run, a call inside it run on
the worker and answered), an effort's tier (its model and timeout), a definition file loaded by
the worker and run by a plan whose tasks' kinds pick the tiers (on the real dev server), and
`coord validate` on a definition."""

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from coord.activities.kinds import load_agents
from coord.activities.mesh.run_agent import AgentActivities
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentRegistry, AgentRequest, AgentResult
from coord.models.plan.spec import PlanSpec, PlanStatus
from coord.starter import api
from coord.worker import build_worker
from tests import tools
from tests.agents import registry
from tests.chat_server import Answer, ChatServer, chat_server, completion, tool_calls
from tests.conftest import ROOT
from tests.workers import COORD, run

KEY_ENV = "LLM_TEST_KEY"
VERDICT = '{"passed": true, "notes": "fine"}'
OFFERED = {
    "count_words": {
        "callable": "coord.activities.kinds.examples:count_words",
        "description": "The number of words in a text",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
    "exec": {"callable": "tests.tools:run_command", "description": "Run a command"},
}
TIERS = {
    "quick": {"model": "cheap-model", "timeout": "3s"},
    "normal": {"model": "standard-model"},
    "thorough": {"model": "strong-model", "timeout": "30s"},
}


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "sk-test-" + uuid.uuid4().hex
    monkeypatch.setenv(KEY_ENV, value)
    return value


def worker(chat: ChatServer, **fields: Any) -> AgentRegistry:
    """A worker offering the tools and tiers above, declaring one llm agent, `reviewer`."""
    declaration = {
        "kind": "llm",
        "base_url": chat.url,
        "api_key_env": KEY_ENV,
        "prompt": "Review $task.",
        **fields,
    }
    settings = {"secrets": [KEY_ENV], "tools": OFFERED, "tiers": TIERS}
    return registry(settings, reviewer=declaration)


async def ask(agents: AgentRegistry) -> AgentResult:
    """One run of `reviewer` through the real `run_agent` activity."""
    event = EventEnvelope.new("ReviewRequested", "/test", payload={"task": "build-api"})
    request = AgentRequest(agent="reviewer", event=event)
    return await ActivityEnvironment().run(AgentActivities(agents).run_agent, request)


async def refusal(agents: AgentRegistry) -> ApplicationError:
    with pytest.raises(ApplicationError) as raised:
        await ask(agents)
    return raised.value


def offered(sent: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in sent.get("tools", [])]


async def test_a_tool_outside_the_whitelist_is_refused_and_never_run() -> None:
    """The worker offers `exec`, but the agent's whitelist names only `count_words`: the model
    is shown only that one, and its call of `exec` fails the run without running anything."""
    tools.CALLS.clear()
    asked = tool_calls(("count_words", {"text": "a b"}), ("exec", {"command": "rm -rf /"}))
    with chat_server(asked, completion(VERDICT)) as chat:
        error = await refusal(worker(chat, model="m", tools=["count_words"]))
    assert (error.type, error.non_retryable) == ("tool_not_allowed", True)
    assert error.message == (
        "llm agent 'reviewer': the model called exec, not in its tools whitelist "
        "(count_words); nothing was run"
    )
    assert tools.CALLS == [], "the refused tool never ran"
    [sent] = chat.received
    assert offered(sent.body) == ["count_words"]
    assert sent.body["tools"][0]["function"]["description"] == "The number of words in a text"


async def test_a_whitelisted_tool_runs_on_the_worker_and_its_result_goes_back() -> None:
    asked = tool_calls(("count_words", {"text": "one two three"}))
    with chat_server(asked, completion(VERDICT)) as chat:
        result = await ask(worker(chat, model="m", tools=["count_words"]))
    assert result.data == {"passed": True, "notes": "fine"}
    assert result.metadata["usage"]["total_tokens"] == 34, "both completions' tokens"
    first, second = chat.received
    assert [m["role"] for m in second.body["messages"]] == ["user", "assistant", "tool"]
    answered = second.body["messages"][2]
    assert (answered["tool_call_id"], json.loads(answered["content"])) == (
        "call-0",
        {"words": 3},
    )
    assert offered(first.body) == offered(second.body) == ["count_words"]


async def test_an_agent_without_tools_is_offered_none() -> None:
    with chat_server(completion(VERDICT)) as chat:
        await ask(worker(chat, model="m"))
    [sent] = chat.received
    assert "tools" not in sent.body


async def test_an_effort_runs_on_its_tiers_model_and_timeout() -> None:
    """`effort: quick` asks the quick tier's model, within its 3 s (a bound a loaded machine's
    first request meets; the slow answer comes twice as late)."""
    with chat_server(completion(VERDICT, model="cheap-model")) as chat:
        result = await ask(worker(chat, effort="quick"))
    assert chat.received[0].body["model"] == "cheap-model"
    assert result.metadata["model"] == "cheap-model"
    slow = Answer(body=completion(VERDICT).body, delay=6)
    with chat_server(slow) as chat:
        error = await refusal(worker(chat, effort="quick"))
    assert (error.type, error.message) == (
        "timeout",
        f"llm agent 'reviewer': {chat.url} did not answer within 3s",
    )


async def test_an_agents_own_model_overrides_its_tier() -> None:
    with chat_server(completion(VERDICT)) as chat:
        await ask(worker(chat, effort="quick", model="pinned-model"))
    assert chat.received[0].body["model"] == "pinned-model"


def deployment(tmp_path: Path, chat: ChatServer) -> Path:
    """An agents file naming the example's seed-style definition, with this test's endpoint."""
    definition = (ROOT / "examples" / "agents" / "code-reviewer.md").read_text()
    (tmp_path / "code-reviewer.md").write_text(definition)
    path = tmp_path / "agents.yaml"
    path.write_text(
        json.dumps(
            {
                "worker": {"secrets": [KEY_ENV], "tools": OFFERED, "tiers": TIERS},
                "agents": {
                    "code-reviewer": {
                        "definition": "code-reviewer.md",
                        "base_url": chat.url,
                        "api_key_env": KEY_ENV,
                    }
                },
            }
        )
    )
    return path


async def test_a_definition_file_runs_in_a_plan_whose_task_kinds_pick_the_tiers(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The seed-style `code-reviewer.md` (effort thorough) loaded by the worker: a mechanical
    task runs it on the quick tier's model, an integration task on the normal tier's, a task
    without a kind on its own effort's (thorough); its instructions are the system prompt."""
    answers = {
        model: [completion(json.dumps({"passed": True, "notes": model}), model=model)]
        for model in ("cheap-model", "standard-model", "strong-model")
    }
    with chat_server(by_model=answers) as chat:
        agents = load_agents(deployment(tmp_path, chat), AgentRegistry())
        spec = PlanSpec.model_validate(
            {
                "plan_id": f"tiers-{uuid.uuid4().hex[:8]}",
                "tasks": [
                    {"id": "fmt", "agent": "code-reviewer", "kind": "mechanical"},
                    {"id": "wire", "agent": "code-reviewer", "kind": "integration"},
                    {"id": "design", "agent": "code-reviewer", "input": {"area": "api"}},
                ],
            }
        )
        async with build_worker(client, task_queue, agents):
            handle = await api.start_plan(client, spec, queue=task_queue)
            state = await asyncio.wait_for(api.plan_outcome(handle), 60)
    assert state.status == PlanStatus.COMPLETED
    assert {task.id: task.result for task in state.tasks} == {
        "fmt": {"passed": True, "notes": "cheap-model"},
        "wire": {"passed": True, "notes": "standard-model"},
        "design": {"passed": True, "notes": "strong-model"},
    }
    design = next(r for r in chat.received if r.body["model"] == "strong-model")
    system, user = design.body["messages"]
    assert system["content"].startswith("# Code reviewer\n\nYou review the result")
    assert user["content"] == '{"area": "api"}\n\nWhat it depends on: {}'
    assert offered(design.body) == ["count_words"], "the definition's whitelist"


async def test_validate_checks_a_definition_and_the_agents_file_naming_it(tmp_path: Path) -> None:
    example = ROOT / "examples" / "agents" / "code-reviewer.md"
    wrong = tmp_path / "wrong.md"
    wrong.write_text("---\neffort: hard\n---\nDo it.\n")
    code, out, err = await run(
        COORD,
        "validate",
        "--agents",
        str(ROOT / "examples" / "agent-definitions.yaml"),
        str(example),
        str(ROOT / "examples" / "agent-definitions.yaml"),
        str(wrong),
        env={"COORD_DEMO_AGENTS": "", "COORD_AGENTS": ""},
    )
    assert code == 1, err
    assert out.startswith(f"{wrong}: effort: Input should be 'quick', 'normal' or 'thorough'")
    assert err == "2 of 3 files valid\n"
