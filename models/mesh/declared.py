"""The agents a worker would serve, read from their declarations alone: the agents file
(`--agents`, $COORD_AGENTS) and the demo agents (`--demo-agents`, $COORD_DEMO_AGENTS).

Both sides read them here: the worker, which then builds each agent's code (the activities), and
whoever checks a spec before it starts (`coord saga start`, `coord validate`, the Python API),
which needs the names, kinds, capabilities and trust settings but must not import or run any
agent's code: a `python` agent's module is the user's, and loading it on the CLI's machine would
run it there."""

import os
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from coord.models.mesh.config import AgentConfig, AgentsFile, WorkerSettings
from coord.models.mesh.definitions import with_definitions
from coord.models.mesh.demo import DEMO_AGENTS
from coord.models.wire.specs import SpecError, parse_model, read_document

AGENTS_ENV = "COORD_AGENTS"
"""An agents file to use when none is given (`coord worker`, the CLI's checks)."""
DEMO_AGENTS_ENV = "COORD_DEMO_AGENTS"
"""`1`, `true` or `yes`: serve (and check against) the demo agents too."""


def demo_agents_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """$COORD_DEMO_AGENTS=1 (or true/yes) serves the demo agents, like `--demo-agents`."""
    environ = os.environ if environ is None else environ
    return environ.get(DEMO_AGENTS_ENV, "").lower() in {"1", "true", "yes"}


def unknown_agent(name: str, known: Iterable[str]) -> str:
    """The one message for a name no agent answers to, from the worker and the CLI alike."""
    listed = ", ".join(sorted(known)) or "none (demo agents: --demo-agents or COORD_DEMO_AGENTS=1)"
    return f"unknown agent {name!r}; known agents: {listed}"


def read_agents_file(path: Path, taken: Collection[str] = ()) -> AgentsFile:
    """The file's declarations, validated, each `definition:` read from its markdown file
    (`coord.models.mesh.definitions`); an agent named like one in `taken` (a demo agent the
    worker serves too) is a SpecError naming the field. A file that cannot be read is
    `read_document`'s error, which names it already."""
    document = read_document(path)
    try:
        document = with_definitions(document, path.parent)
    except SpecError as error:
        raise SpecError(f"{path}: {error}") from None
    declared = parse_model(AgentsFile, document, str(path))
    for name in declared.agents:
        if name in taken:
            raise SpecError(
                f"{path}: agents.{name}: the name is taken (by a demo agent: run the worker "
                "without --demo-agents and COORD_DEMO_AGENTS to declare it yourself)"
            )
    return declared


class KnownAgents(Protocol):
    """What a spec's agents are checked against (`coord.models.checks`): a worker's registry of
    running agents, or the declarations alone (`DeclaredAgents`), by the same rule."""

    @property
    def settings(self) -> WorkerSettings: ...

    @property
    def catalogue(self) -> Mapping[str, Sequence[str]]: ...

    def unknown(self, name: str) -> str: ...

    def __contains__(self, name: object) -> bool: ...


@dataclass(frozen=True)
class DeclaredAgents:
    """What a worker would serve, without any agent's code: the demo agents' names (`python`,
    offering no capabilities) and the agents file's declarations, with its `worker:` settings."""

    file: AgentsFile = field(default_factory=AgentsFile)
    demo: tuple[str, ...] = ()
    source: Path | None = None
    """The agents file read, if any."""

    @property
    def settings(self) -> WorkerSettings:
        return self.file.worker

    @property
    def declarations(self) -> Mapping[str, AgentConfig]:
        """The agents file's declarations (the demo agents have none)."""
        return self.file.agents

    @property
    def kinds(self) -> dict[str, str]:
        """Each agent's kind, as `coord agents` shows it."""
        return dict.fromkeys(self.demo, "python") | {
            name: config.kind for name, config in self.declarations.items()
        }

    @property
    def catalogue(self) -> dict[str, list[str]]:
        """Each agent -> the capabilities it offers (what `choose_agent` picks from)."""
        return {name: [] for name in self.demo} | {
            name: list(config.capabilities) for name, config in self.declarations.items()
        }

    def max_concurrent(self, name: str) -> int | None:
        """The pool size (across all workers) `name` is declared with; None: no pool."""
        config = self.declarations.get(name)
        return config.max_concurrent if config is not None else None

    def unknown(self, name: str) -> str:
        return unknown_agent(name, self)

    def __contains__(self, name: object) -> bool:
        return name in self.demo or name in self.declarations

    def __iter__(self) -> Iterator[str]:
        yield from self.demo
        yield from self.declarations


def declared_agents(
    agents_file: Path | None = None,
    *,
    demo_agents: bool = False,
    environ: Mapping[str, str] | None = None,
) -> DeclaredAgents:
    """The agents declared in `agents_file` (or $COORD_AGENTS) with its `worker:` settings, and
    the demo agents only when asked for (`demo_agents`, or $COORD_DEMO_AGENTS): what
    `coord worker` started here with the same options would serve."""
    environ = os.environ if environ is None else environ
    demo = DEMO_AGENTS if demo_agents or demo_agents_enabled(environ) else ()
    path = agents_file or (Path(environ[AGENTS_ENV]) if environ.get(AGENTS_ENV) else None)
    if path is None:
        return DeclaredAgents(demo=demo)
    return DeclaredAgents(read_agents_file(path, taken=demo), demo, path)
