"""Agents declared in YAML, by kind: all run by the one `run_agent` activity."""

import asyncio
import importlib
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

from activities.agent_kinds.http import run_http
from activities.agent_kinds.shell import run_shell
from activities.context import AgentFn

if TYPE_CHECKING:
    from activities.agents import AgentRegistry
from models.agent_config import AgentConfig, AgentsFile, HttpAgent, PythonAgent, ShellAgent
from models.specs import SpecError, load_spec


def agent_from_config(name: str, config: AgentConfig) -> AgentFn:
    if isinstance(config, ShellAgent):
        return partial(run_shell, config)
    if isinstance(config, HttpAgent):
        return partial(run_http, config)
    return _imported(name, config)


def _imported(name: str, config: PythonAgent) -> AgentFn:
    """Resolved when the file is loaded, so a wrong path stops the worker, not a run."""
    module_name, _, attribute = config.callable.partition(":")
    place = f"agents.{name}.callable"
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise SpecError(f"{place}: cannot import {config.callable!r}: {error}") from None
    if not asyncio.iscoroutinefunction(target):
        raise SpecError(f"{place}: {config.callable!r} is not an async function")
    return cast(AgentFn, target)


def load_agents(path: Path, registry: "AgentRegistry") -> "AgentRegistry":
    for name, config in load_spec(AgentsFile, path).agents.items():
        registry.register(name)(agent_from_config(name, config))
    return registry
