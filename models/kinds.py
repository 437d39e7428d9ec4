"""The kinds of spec file a user writes (saga, chain, aggregator, plan, vote, agents), told apart
by their shape; each one's JSON Schema; and every problem a file has, found offline: what
`coord schema` and `coord validate` do (docs/specs.md)."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel

from coord.models.aggregator.spec import AggregatorSpec
from coord.models.chain.spec import ChainSpec
from coord.models.checks import agent_problems
from coord.models.mesh.config import AgentsFile
from coord.models.mesh.declared import DeclaredAgents, read_agents_file
from coord.models.mesh.definitions import read_definition
from coord.models.mesh.tiers import choose_model, tool_problem
from coord.models.plan.spec import PlanSpec
from coord.models.saga.spec import SagaSpec
from coord.models.vote.spec import VoteSpec
from coord.models.wire.schema import json_schema
from coord.models.wire.specs import SpecError, load_spec, read_document

SpecKind = Literal["saga", "chain", "aggregator", "plan", "vote", "agents"]
SPEC_KINDS: tuple[SpecKind, ...] = get_args(SpecKind)
MODELS: Mapping[SpecKind, type[BaseModel]] = {
    "saga": SagaSpec,
    "chain": ChainSpec,
    "aggregator": AggregatorSpec,
    "plan": PlanSpec,
    "vote": VoteSpec,
    "agents": AgentsFile,
}
MARKS: Mapping[SpecKind, str] = {
    "saga": "saga_id",
    "chain": "subscriptions",
    "aggregator": "aggregator_id",
    "plan": "plan_id",
    "vote": "vote_id",
}
"""The top-level field only that kind of spec has (and must have). An agents file has none of
them: it holds only `agents:` and `worker:`."""
AGENTS_FILE_FIELDS = frozenset({"agents", "worker"})
DEFINITION_SUFFIX = ".md"
"""A file `coord validate` reads as an agent definition (markdown with a front matter)."""
TITLES: Mapping[SpecKind, str] = {
    "saga": "Event Coordinator saga spec",
    "chain": "Event Coordinator reactive chain spec",
    "aggregator": "Event Coordinator aggregator spec",
    "plan": "Event Coordinator plan spec (coordinator mode)",
    "vote": "Event Coordinator consensus vote spec",
    "agents": "Event Coordinator agents file (agents: and worker:)",
}


def schema_of(kind: SpecKind) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a `kind` spec file, from its model."""
    return json_schema(MODELS[kind], TITLES[kind])


def kind_of(document: Any) -> SpecKind:
    """The kind of spec a document is, by its shape (the top-level field only that kind has); a
    SpecError saying why when it shows none or several, which `--kind` then settles."""
    if not isinstance(document, dict):
        raise SpecError("not a spec: a spec file holds a mapping of fields (YAML or JSON)")
    marked = [kind for kind, mark in MARKS.items() if mark in document]
    if not marked and document and set(document) <= AGENTS_FILE_FIELDS:
        return "agents"
    if len(marked) == 1:
        return marked[0]
    fields = ", ".join(f"{MARKS[kind]} ({kind})" for kind in marked)
    found = f"it has {fields}" if marked else "it has none of " + ", ".join(MARKS.values())
    raise SpecError(f"cannot tell which kind of spec this is: {found}; give --kind")


def file_problems(
    path: Path,
    agents: DeclaredAgents,
    kind: SpecKind | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[str]:
    """Every problem of the spec file at `path` (`<path>: <field>: <problem>` each), found
    without a server: it reads, it is of a kind (`kind`, else told by its shape), it validates
    (with the loader every `coord` command uses, `overrides` replacing the top-level fields its
    kind has, as `start` options do), and the agents it runs are among `agents` by the rule the
    worker runs them by (`check_agents`); an agents file's names do not take the demo agents'
    that `agents` serves. A markdown file is an agent definition (`definition_problems`). No
    agent's code is imported."""
    if path.suffix.lower() == DEFINITION_SUFFIX:
        return definition_problems(path, agents)
    try:
        spec = _load(path, kind or kind_of_file(path), agents, overrides or {})
    except SpecError as error:
        return problem_lines(error)
    if isinstance(spec, SagaSpec | ChainSpec | PlanSpec | VoteSpec):
        return [f"{path}: {problem}" for problem in agent_problems(spec, agents)]
    return []


def definition_problems(path: Path, agents: DeclaredAgents) -> list[str]:
    """An agent definition's problems: its front matter and body; and, when an agents file is
    given, whether that worker offers its tools and a model for it (`worker.tools`,
    `worker.tiers`)."""
    try:
        definition, _ = read_definition(path)
    except SpecError as error:
        return problem_lines(error)
    if agents.source is None:
        return []
    settings, problems = agents.settings, []
    if unknown := tool_problem(definition.tools, settings.tools):
        problems.append(f"{path}: tools: {unknown}")
    if isinstance(
        choice := choose_model(definition.model, None, definition.effort, settings.tiers), str
    ):
        problems.append(f"{path}: model: {choice}")
    return problems


def problem_lines(error: SpecError) -> list[str]:
    """Its problems, each on one line (a YAML parser's message spans several, pointing at the
    place)."""
    return [
        " ".join(line.strip() for line in problem.splitlines() if line.strip())
        for problem in error.problems
    ]


def kind_of_file(path: Path) -> SpecKind:
    """`kind_of` the file's document; the SpecError names the file."""
    document = read_document(path)
    try:
        return kind_of(document)
    except SpecError as error:
        raise SpecError(f"{path}: {error}") from None


def _load(
    path: Path, kind: SpecKind, agents: DeclaredAgents, overrides: Mapping[str, Any]
) -> BaseModel:
    """As the CLI loads a spec (`load_spec`), and an agents file as the worker does."""
    if kind == "agents":
        return read_agents_file(path, taken=agents.demo)
    model = MODELS[kind]
    return load_spec(model, path, {k: v for k, v in overrides.items() if k in model.model_fields})
