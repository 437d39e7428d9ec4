"""Agents declared in YAML, by kind: all run by the one `run_agent` activity."""

import asyncio
import importlib
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, cast

from coord.activities.agent_kinds.http import run_http
from coord.activities.agent_kinds.llm import run_llm
from coord.activities.agent_kinds.shell import run_shell
from coord.models.agent_config import (
    AgentConfig,
    AgentsFile,
    HttpAgent,
    LlmAgent,
    ShellAgent,
    WorkerSettings,
)
from coord.models.agents import AgentContext, AgentFn, AgentRegistry
from coord.models.envelope import EventEnvelope
from coord.models.specs import SpecError, load_spec


def agent_from_config(name: str, config: AgentConfig, settings: WorkerSettings) -> AgentFn:
    if isinstance(config, ShellAgent):
        return partial(run_shell, config, settings)
    if isinstance(config, HttpAgent):
        return partial(run_http, config, settings)
    if isinstance(config, LlmAgent):
        return partial(run_llm, config, settings)
    return _imported(name, config.callable)


def _imported(name: str, dotted: str) -> AgentFn:
    """Resolved when the file is loaded, so a wrong path stops the worker, not a run."""
    module_name, _, attribute = dotted.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise SpecError(f"agents.{name}.callable: cannot import {dotted!r}: {error}") from None
    if not callable(target):
        raise SpecError(f"agents.{name}.callable: {dotted!r} is not a function")
    if asyncio.iscoroutinefunction(target):
        return cast(AgentFn, target)
    return partial(_in_thread, target)


async def _in_thread(
    target: Callable[[EventEnvelope, AgentContext], Mapping[str, Any] | None],
    event: EventEnvelope,
    context: AgentContext,
) -> Mapping[str, Any] | None:
    """A plain `def` agent runs in the default thread pool: if it blocks (on I/O, a sleep, a
    long computation), the worker's event loop, and every other agent's heartbeat, go on."""
    return await asyncio.to_thread(target, event, context)


def load_agents(path: Path, registry: AgentRegistry) -> AgentRegistry:
    """The file's agents join the registry, and its `worker:` section becomes the registry's
    settings (what the worker trusts)."""
    declared = load_spec(AgentsFile, path)
    registry.settings = declared.worker
    for name, config in declared.agents.items():
        if name in registry:
            raise SpecError(
                f"{path}: agents.{name}: the name is taken (by a demo agent: run the worker "
                "without --demo-agents and COORD_DEMO_AGENTS to declare it yourself)"
            )
        try:
            registry.register(name, config.kind, config)(
                agent_from_config(name, config, declared.worker)
            )
        except SpecError as error:
            raise SpecError(f"{path}: {error}") from None
    return registry
