"""Agent definitions without a server: a markdown definition's front matter and body, the
declarations it becomes in an agents file, the model and timeout a run gets from its agent's
`model`, `effort` and its task's kind, the tools whitelist checked against what the worker
offers, and `background`."""

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from coord.models.kinds import file_problems
from coord.models.mesh.config import AgentsFile, LlmAgent, PythonAgent, WorkerSettings
from coord.models.mesh.declared import DeclaredAgents, read_agents_file
from coord.models.mesh.definitions import parse_definition
from coord.models.mesh.tiers import (
    TASK_KIND_EFFORT,
    ModelChoice,
    ModelTier,
    Tiers,
    choose_model,
)
from coord.models.plan.spec import PlanSpec
from coord.models.wire.specs import SpecError
from tests.conftest import ROOT

SEED_STYLE = """---
description: Agent description
tools: [read, write, exec, web_search]
model: zai/glm-5.1
effort: thorough
background: true
---
# Agent instructions...
"""
TIERS: Tiers = {
    "quick": ModelTier(model="cheap", timeout=timedelta(seconds=30)),
    "normal": ModelTier(model="standard"),
    "thorough": ModelTier(model="strong", timeout=timedelta(minutes=5)),
}
ENDPOINT = {"base_url": "http://127.0.0.1:1/v1", "api_key_env": "KEY"}


def test_a_seed_style_definition_reads_as_its_fields_and_instructions() -> None:
    definition, body = parse_definition(SEED_STYLE, "agent.md")
    assert definition.model_dump() == {
        "name": None,
        "description": "Agent description",
        "tools": ["read", "write", "exec", "web_search"],
        "model": "zai/glm-5.1",
        "effort": "thorough",
        "background": True,
    }
    assert body == "# Agent instructions..."
    assert definition.declaration(body) == {
        "kind": "llm",
        "description": "Agent description",
        "tools": ["read", "write", "exec", "web_search"],
        "model": "zai/glm-5.1",
        "effort": "thorough",
        "background": True,
        "system": "# Agent instructions...",
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("# no front matter\n", "agent.md: no front matter"),
        ("---\neffort: hard\n---\nDo it.\n", "agent.md: effort: Input should be 'quick'"),
        ("---\ncolour: red\n---\nDo it.\n", "agent.md: colour: Extra inputs are not permitted"),
        ("---\ntools: [rm -rf]\n---\nDo it.\n", "agent.md: tools[0]: String should match"),
        ("---\ndescription: x\n---\n\n", "agent.md: the body (the agent's instructions) is empty"),
        ("---\n[a, b]\n---\nDo it.\n", "agent.md: front matter: expected fields"),
    ],
    ids=["no-front-matter", "effort", "unknown-field", "tool-name", "empty-body", "not-fields"],
)
def test_a_wrong_definition_is_refused_naming_the_field(text: str, problem: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_definition(text, "agent.md")
    assert str(refused.value).startswith(problem)


def test_the_agents_own_model_and_timeout_win_then_the_tasks_kind_then_its_effort() -> None:
    assert choose_model(None, None, None, TIERS) == ModelChoice(
        "standard", timedelta(seconds=60), "normal"
    ), "no effort: the normal tier, and the 60 s default where the tier says no timeout"
    assert choose_model(None, None, "quick", TIERS) == ModelChoice(
        "cheap", timedelta(seconds=30), "quick"
    )
    asked = TASK_KIND_EFFORT["review"]
    assert choose_model(None, None, "quick", TIERS, asked) == ModelChoice(
        "strong", timedelta(minutes=5), "thorough"
    ), "the task's kind picks the tier over the agent's effort"
    assert choose_model("mine", timedelta(seconds=9), "quick", TIERS, asked) == ModelChoice(
        "mine", timedelta(seconds=9), None
    )
    assert choose_model("mine", None, "quick", {}) == ModelChoice(
        "mine", timedelta(seconds=60), None
    )
    assert choose_model(None, None, "quick", {}) == (
        "no model: the agent declares no `model` and the worker's tiers define no `quick` tier "
        "(worker.tiers.quick: {model: ...})"
    )


def test_plan_task_kinds_map_to_the_cheap_standard_and_strong_tiers() -> None:
    assert TASK_KIND_EFFORT == {
        "mechanical": "quick",
        "integration": "normal",
        "review": "thorough",
    }
    plan = PlanSpec.model_validate(
        {"plan_id": "p", "tasks": [{"id": "fmt", "agent": "a", "kind": "mechanical"}]}
    )
    assert plan.tasks[0].kind == "mechanical"
    with pytest.raises(ValidationError, match=r"tasks\.0\.kind"):
        PlanSpec.model_validate(
            {"plan_id": "p", "tasks": [{"id": "fmt", "agent": "a", "kind": "chores"}]}
        )


def agents_file(worker: dict[str, Any], **agents: dict[str, Any]) -> AgentsFile:
    return AgentsFile.model_validate({"worker": {"secrets": ["KEY"], **worker}, "agents": agents})


def test_an_llm_agent_without_a_model_needs_its_tier_and_its_tools_offered() -> None:
    tools = {"count": {"callable": "coord.activities.kinds.examples:count_words"}}
    fine = agents_file(
        {"tiers": {"normal": {"model": "m"}}, "tools": tools},
        a={"kind": "llm", **ENDPOINT, "tools": ["count"]},
    )
    assert isinstance(fine.agents["a"], LlmAgent)
    with pytest.raises(ValidationError) as no_tier:
        agents_file({}, a={"kind": "llm", **ENDPOINT, "effort": "quick"})
    assert "agents.a.model: no model: the agent declares no `model` and the worker's tiers " in (
        str(no_tier.value)
    )
    with pytest.raises(ValidationError) as unknown_tool:
        agents_file({"tools": tools}, a={"kind": "llm", **ENDPOINT, "model": "m", "tools": ["rm"]})
    assert (
        "agents.a.tools: rm: not a tool this worker offers (worker.tools); it offers: count"
        in str(unknown_tool.value)
    )


def test_background_work_takes_one_slot_per_worker_unless_its_pool_says_otherwise() -> None:
    python = {"kind": "python", "callable": "m:f"}
    assert PythonAgent.model_validate({**python, "background": True}).worker_slots == 1
    assert PythonAgent.model_validate({**python}).worker_slots is None
    both = {**python, "background": True, "max_concurrent_per_worker": 3}
    assert PythonAgent.model_validate(both).worker_slots == 3


def test_a_definition_named_by_an_agents_file_becomes_an_llm_agent(tmp_path: Path) -> None:
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "critic.md").write_text(SEED_STYLE.replace("exec, web_search", "exec"))
    tools = {name: {"callable": "tests.tools:run_command"} for name in ("read", "write", "exec")}
    path = tmp_path / "agents.yaml"
    path.write_text(
        "worker: {secrets: [KEY], tools: " + str(tools).replace("'", '"') + "}\n"
        "agents:\n  critic: {definition: defs/critic.md, base_url: 'http://127.0.0.1:1/v1', "
        "api_key_env: KEY, model: own-model}\n"
    )
    critic = read_agents_file(path).agents["critic"]
    assert isinstance(critic, LlmAgent)
    assert (critic.model, critic.effort, critic.tools) == ("own-model", "thorough", list(tools))
    assert (critic.system, critic.description, critic.background) == (
        "# Agent instructions...",
        "Agent description",
        True,
    )
    assert critic.prompt == "$payload\n\nWhat it depends on: $inputs"


def test_a_wrong_definition_stops_the_agents_file_naming_both_files(tmp_path: Path) -> None:
    (tmp_path / "critic.md").write_text("---\neffort: hard\n---\nDo it.\n")
    path = tmp_path / "agents.yaml"
    path.write_text("agents:\n  critic: {definition: critic.md}\n")
    with pytest.raises(SpecError) as refused:
        read_agents_file(path)
    assert str(refused.value).startswith(
        f"{path}: agents.critic.definition: {tmp_path / 'critic.md'}: effort: Input should be"
    )


def test_an_inline_agent_may_not_name_a_definition_file() -> None:
    inline = LlmAgent.model_validate(
        {"kind": "llm", **ENDPOINT, "model": "m", "definition": "/etc/agent.md"}
    )
    refusal = WorkerSettings(inline_agents=["llm"], secrets=["KEY"]).inline_refusal("x", inline)
    assert refusal == (
        "inline agent 'x': `definition` names a file on the worker; only the worker's agents "
        "file may"
    )


def test_validate_reads_a_markdown_file_as_a_definition(tmp_path: Path) -> None:
    example = ROOT / "examples" / "agents" / "code-reviewer.md"
    assert file_problems(example, DeclaredAgents()) == []
    deployment = DeclaredAgents(
        read_agents_file(ROOT / "examples" / "agent-definitions.yaml"),
        source=ROOT / "examples" / "agent-definitions.yaml",
    )
    assert file_problems(example, deployment) == []
    bare = DeclaredAgents(AgentsFile(), source=tmp_path / "agents.yaml")
    assert file_problems(example, bare) == [
        f"{example}: tools: count_words: not a tool this worker offers (worker.tools); it "
        "offers: none",
        f"{example}: model: no model: the agent declares no `model` and the worker's tiers "
        "define no `thorough` tier (worker.tiers.thorough: {model: ...})",
    ]


@pytest.mark.parametrize(
    ("agent", "problem"),
    [
        ("{url: 'http://x'}", "agents.a.kind: Field required; one of python, shell, http, llm"),
        ("{kind: htp}", "agents.a.kind: 'htp' is not one of python, shell, http, llm"),
    ],
)
def test_an_agent_without_a_kind_or_with_a_wrong_one_is_refused_at_its_kind(
    tmp_path: Path, agent: str, problem: str
) -> None:
    """Pydantic says `agents.a: Unable to extract tag using discriminator 'kind'`."""
    path = tmp_path / "agents.yaml"
    path.write_text(f"agents:\n  a: {agent}\n")
    with pytest.raises(SpecError) as refused:
        read_agents_file(path)
    assert str(refused.value) == f"{path}: {problem}"
