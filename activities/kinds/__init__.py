"""Agents declared in YAML, by kind: all run by the one `run_agent` activity."""

from functools import partial
from pathlib import Path

from coord.activities.kinds.demo import register_demo_agents
from coord.activities.kinds.http import run_http
from coord.activities.kinds.python import python_agent
from coord.activities.kinds.shell import run_shell
from coord.infra.extras import MissingExtra, needs_extra
from coord.models.mesh.agents import AgentFn, AgentRegistry
from coord.models.mesh.config import AgentConfig, HttpAgent, LlmAgent, ShellAgent, WorkerSettings
from coord.models.mesh.declared import DeclaredAgents, read_agents_file
from coord.models.wire.specs import SpecError


def agent_from_config(name: str, config: AgentConfig, settings: WorkerSettings) -> AgentFn:
    if isinstance(config, ShellAgent):
        return partial(run_shell, config, settings)
    if isinstance(config, HttpAgent):
        return partial(run_http, config, settings)
    if isinstance(config, LlmAgent):
        return _llm_agent(name, config, settings)
    return python_agent(name, config)


def _llm_agent(name: str, config: LlmAgent, settings: WorkerSettings) -> AgentFn:
    """The `llm` kind's code, imported only when an agent of that kind is declared: its client
    library (openai) comes with the `llm` extra, and without it the declaration is refused in
    one line naming the extra."""
    try:
        with needs_extra("llm", f"agent {name!r} (kind llm)"):
            from coord.activities.kinds.llm import llm_agent
    except MissingExtra as missing:
        raise SpecError(f"agents.{name}: {missing}") from None
    return llm_agent(name, config, settings)


def serve(declared: DeclaredAgents, registry: AgentRegistry | None = None) -> AgentRegistry:
    """The registry of the agents `declared` names, each with its code: the demo agents, then
    the agents file's (a `python` agent's module is imported here, so a wrong path stops the
    worker, not a run); the file's `worker:` section becomes the registry's settings."""
    registry = AgentRegistry() if registry is None else registry
    registry.settings = declared.settings
    if declared.demo:
        register_demo_agents(registry)
    for name, config in declared.declarations.items():
        try:
            registry.register(name, config.kind, config)(
                agent_from_config(name, config, declared.settings)
            )
        except SpecError as error:
            raise SpecError(f"{declared.source}: {error}") from None
    return registry


def load_agents(path: Path, registry: AgentRegistry) -> AgentRegistry:
    """The file's agents join `registry` (after those it holds, whose names they may not take),
    and its `worker:` section becomes the registry's settings (what the worker trusts)."""
    declared = DeclaredAgents(read_agents_file(path, taken=set(registry)), source=path)
    return serve(declared, registry)
