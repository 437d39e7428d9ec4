"""Agent definition files: markdown with a YAML front matter (`description`, `tools`, `model`,
`effort`, `background`) whose body is the agent's instructions, the format coding assistants
keep their sub-agents in. An agents file names one under `definition:` and adds what only the
deployment knows (the endpoint and its key); the result is an `llm` agent whose system prompt
is the body. Read when the agents file is read, relative to it; a spec's inline agents cannot
name one (a spec comes from outside, and would have the worker read its files)."""

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from coord.models.mesh.config import MAX_DESCRIPTION
from coord.models.mesh.tiers import MAX_TOOLS, Effort, ToolName
from coord.models.wire.specs import IDENTIFIER, SpecError, parse_model

FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*$\r?\n?(.*)\Z", re.DOTALL | re.MULTILINE)
DEFINITION_FIELD = "definition"
MAX_DEFINITION_BYTES = 256 * 1024


class AgentDefinition(BaseModel):
    """An agent definition's front matter."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=IDENTIFIER, max_length=128)
    """Informative only: the agents file's key names the agent."""
    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    tools: list[ToolName] = Field(default_factory=list, max_length=MAX_TOOLS)
    model: str | None = Field(default=None, min_length=1)
    effort: Effort | None = None
    background: bool = False

    def declaration(self, instructions: str) -> dict[str, Any]:
        """The `llm` declaration's fields it gives (the deployment adds the endpoint)."""
        fields = self.model_dump(exclude={"name"}, exclude_defaults=True)
        return {"kind": "llm", **fields, "system": instructions}


def parse_definition(text: str, source: str) -> tuple[AgentDefinition, str]:
    """The front matter, validated, and the body (the instructions); a SpecError naming
    `source` and the field when either is wrong."""
    found = FRONT_MATTER.match(text)
    if found is None:
        raise SpecError(
            f"{source}: no front matter: the file starts with a `---` line, then "
            "YAML fields, then a `---` line, then the instructions"
        )
    try:
        fields = yaml.safe_load(found.group(1))
    except yaml.YAMLError as error:
        raise SpecError(f"{source}: front matter: not valid YAML: {error}") from None
    if fields is not None and not isinstance(fields, dict):
        raise SpecError(f"{source}: front matter: expected fields (`description: ...`)")
    definition = parse_model(AgentDefinition, fields or {}, source)
    body = found.group(2).strip()
    if not body:
        raise SpecError(f"{source}: the body (the agent's instructions) is empty")
    return definition, body


def read_definition(path: Path) -> tuple[AgentDefinition, str]:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_DEFINITION_BYTES + 1)
    except OSError as error:
        raise SpecError(f"{path}: cannot read: {error.strerror}") from None
    if len(data) > MAX_DEFINITION_BYTES:
        raise SpecError(f"{path}: larger than {MAX_DEFINITION_BYTES} bytes")
    return parse_definition(data.decode(errors="replace"), str(path))


def with_definitions(document: Any, base: Path) -> Any:
    """The agents file's document with each `agents.<name>.definition: FILE.md` replaced by
    the declaration the file gives (`AgentDefinition.declaration`) under the entry's own fields
    (which win); FILE is relative to `base`, the agents file's directory."""
    if not isinstance(document, dict) or not isinstance(document.get("agents"), dict):
        return document
    agents = {name: _defined(name, entry, base) for name, entry in document["agents"].items()}
    return {**document, "agents": agents}


def _defined(name: str, entry: Any, base: Path) -> Any:
    if not isinstance(entry, Mapping) or DEFINITION_FIELD not in entry:
        return entry
    named = entry[DEFINITION_FIELD]
    if not isinstance(named, str) or not named:
        raise SpecError(f"agents.{name}.definition: expected the path of a markdown file")
    try:
        definition, instructions = read_definition(base / named)
    except SpecError as error:
        raise SpecError(f"agents.{name}.definition: {error}") from None
    return {**definition.declaration(instructions), **entry}
