"""Model tiers and tools: what a deployment offers its `llm` agents (`worker.tiers`,
`worker.tools`), and how one run's model and timeout are chosen from an agent's `model` and
`effort` and the kind of task it runs.

The reference's model-selection strategy: mechanical work (one or two files, a clear spec) goes
to a fast, cheap model; integration work (several files, patterns to match) to the standard
one; architecture, design and review to the strongest. A deployment names the model and timeout
of each effort (`quick`, `normal`, `thorough`); an agent says which effort it needs, a plan task
which kind of work it is, and an agent's own `model` or `timeout` always wins."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coord.models.wire.durations import Duration
from coord.models.wire.specs import JsonObject

Effort = Literal["quick", "normal", "thorough"]
DEFAULT_EFFORT: Effort = "normal"
"""The tier of an agent that names neither a model nor an effort."""
TaskKind = Literal["mechanical", "integration", "review"]
TASK_KIND_EFFORT: Mapping[TaskKind, Effort] = {
    "mechanical": "quick",
    "integration": "normal",
    "review": "thorough",
}
"""Which tier each kind of task runs on: cheap for mechanical work, standard for integration,
strongest for review and design."""
LLM_TIMEOUT_DEFAULT = timedelta(seconds=60)
"""A chat completion's time limit when neither the agent nor its tier says one."""
MAX_TOOLS = 64
MAX_TOOL_DESCRIPTION = 1024
ToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
"""What the chat-completions protocol accepts as a function's name."""


class ModelTier(BaseModel):
    """One effort's model, and how long one of its chat completions may take."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=256)
    timeout: Duration | None = None
    """None: LLM_TIMEOUT_DEFAULT, unless the agent says its own."""


class ToolDeclaration(BaseModel):
    """A function the worker offers to `llm` agents whose `tools` whitelist names it: the model
    sees its name, description and parameters; the worker calls it with the arguments the model
    gives (a JSON object, data like any answer) and sends its result back as JSON."""

    model_config = ConfigDict(extra="forbid")

    callable: str = Field(pattern=r"^[\w.]+:\w+$", description="package.module:function")
    description: str = Field(default="", max_length=MAX_TOOL_DESCRIPTION)
    parameters: JsonObject = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """The JSON Schema of its arguments, as the model is shown it."""


Tiers = dict[Effort, ModelTier]
Tools = dict[str, ToolDeclaration]


@dataclass(frozen=True)
class ModelChoice:
    """The model one run asks, how long each of its chat completions may take, and the tier
    they came from (None: the agent's own model and timeout)."""

    model: str
    timeout: timedelta
    tier: Effort | None


def choose_model(
    model: str | None,
    timeout: timedelta | None,
    effort: Effort | None,
    tiers: Mapping[Effort, ModelTier],
    asked: Effort | None = None,
) -> ModelChoice | str:
    """The run's model and timeout: the agent's own `model` and `timeout` where it declares
    them, else its tier's: the one the run's task asks (`asked`, from a plan task's kind), else
    the agent's `effort`, else DEFAULT_EFFORT. A problem (no model to ask) as a string."""
    wanted = asked or effort or DEFAULT_EFFORT
    tier = tiers.get(wanted)
    if model is None and tier is None:
        return (
            f"no model: the agent declares no `model` and the worker's tiers define no "
            f"`{wanted}` tier (worker.tiers.{wanted}: {{model: ...}})"
        )
    chosen = model or (tier.model if tier else "")
    limit = timeout or (tier.timeout if tier else None) or LLM_TIMEOUT_DEFAULT
    return ModelChoice(chosen, limit, None if tier is None or model else wanted)


def tool_problem(tools: list[str], offered: Mapping[str, Any]) -> str | None:
    """Why a whitelist names a tool the worker does not offer (None: it names none such)."""
    unknown = sorted(set(tools) - set(offered))
    if not unknown:
        return None
    listed = ", ".join(sorted(offered)) or "none"
    return (
        f"{', '.join(unknown)}: not a tool this worker offers (worker.tools); it offers: {listed}"
    )


def tool_schema(name: str, tool: ToolDeclaration) -> dict[str, Any]:
    """How a tool is shown to the model (a chat-completions `function` tool)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }
