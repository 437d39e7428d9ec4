"""Capabilities: what agents declare they offer (no server needed)."""

import pytest

from coord.models.agent_config import MAX_CAPABILITIES, AgentsFile
from coord.models.specs import SpecError, parse_model


def agents_file(capabilities: object) -> dict[str, object]:
    return {"agents": {"db": {"kind": "python", "callable": "m:f", "capabilities": capabilities}}}


def test_every_kind_declares_capabilities() -> None:
    declared = parse_model(
        AgentsFile,
        {
            "agents": {
                "py": {"kind": "python", "callable": "m:f", "capabilities": ["sql"]},
                "sh": {"kind": "shell", "argv": ["true"], "capabilities": ["shell", "db:pg"]},
                "web": {"kind": "http", "url": "http://x", "capabilities": ["http"]},
                "llm": {
                    "kind": "llm",
                    "base_url": "http://x",
                    "model": "m",
                    "api_key_env": "K",
                    "prompt": "p",
                    "capabilities": ["review"],
                },
                "plain": {"kind": "python", "callable": "m:f"},
            },
            "worker": {"secrets": ["K"]},
        },
        "agents.yaml",
    )
    assert {name: a.capabilities for name, a in declared.agents.items()} == {
        "py": ["sql"],
        "sh": ["shell", "db:pg"],
        "web": ["http"],
        "llm": ["review"],
        "plain": [],
    }


@pytest.mark.parametrize(
    ("capabilities", "problem"),
    [
        ([""], "agents.db.python.capabilities[0]: String should match pattern"),
        (["a b"], "agents.db.python.capabilities[0]: String should match pattern"),
        (["x"] * (MAX_CAPABILITIES + 1), "agents.db.python.capabilities: List should have at most"),
        ("sql", "agents.db.python.capabilities: Input should be a valid list"),
    ],
)
def test_a_bad_capability_is_named(capabilities: object, problem: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_model(AgentsFile, agents_file(capabilities), "agents.yaml")
    assert problem in str(error.value)
