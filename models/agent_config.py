"""Agents declared in YAML (`agents:`): Python callables, command-line tools, HTTP services."""

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from models.durations import Duration

SYSEXITS_DATA_ERRORS = [2, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 76, 77, 78]
"""Exit codes that say the input was wrong (usage, sysexits 64-78 but 75 EX_TEMPFAIL): retrying
the same event would fail the same way."""


class PythonAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["python"]
    callable: str = Field(pattern=r"^[\w.]+:\w+$", description="package.module:function")


class ShellAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["shell"]
    argv: list[str] = Field(min_length=1)
    cwd: str | None = None
    timeout: Duration = timedelta(minutes=5)
    env: dict[str, str] = Field(default_factory=dict)
    non_retryable_exit_codes: list[int] = Field(default_factory=lambda: list(SYSEXITS_DATA_ERRORS))


class HttpAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["http"]
    url: str = Field(pattern=r"^https?://")
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    """Header name → name of the environment variable holding its value (never logged)."""
    timeout: Duration = timedelta(seconds=30)


AgentConfig = Annotated[PythonAgent | ShellAgent | HttpAgent, Field(discriminator="kind")]


class AgentsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agents: dict[str, AgentConfig]
