"""Agents declared in YAML, by kind: all run by the one `run_agent` activity."""

from functools import partial
from pathlib import Path

from coord.activities.kinds.http import run_http
from coord.activities.kinds.llm import run_llm
from coord.activities.kinds.python import python_agent
from coord.activities.kinds.shell import run_shell
from coord.models.mesh.agents import AgentFn, AgentRegistry
from coord.models.mesh.config import (
    AgentConfig,
    AgentsFile,
    HttpAgent,
    LlmAgent,
    ShellAgent,
    WorkerSettings,
)
from coord.models.wire.specs import SpecError, load_spec


def agent_from_config(name: str, config: AgentConfig, settings: WorkerSettings) -> AgentFn:
    if isinstance(config, ShellAgent):
        return partial(run_shell, config, settings)
    if isinstance(config, HttpAgent):
        return partial(run_http, config, settings)
    if isinstance(config, LlmAgent):
        return partial(run_llm, config, settings)
    return python_agent(name, config)


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
