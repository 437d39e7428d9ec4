"""Agents declared in YAML (`agents:`): Python callables, command-line tools, HTTP services; and
what the worker that runs them trusts (`worker:`)."""

from datetime import timedelta
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ByteSize, ConfigDict, Field, model_validator

from coord.models.durations import Duration

SYSEXITS_DATA_ERRORS = [2, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 76, 77, 78]
"""Exit codes that say the input was wrong (usage, sysexits 64-78 but 75 EX_TEMPFAIL): retrying
the same event would fail the same way."""

AgentKind = Literal["python", "shell", "http"]
CHILD_ENV_DEFAULT = ("PATH", "LANG", "LC_ALL", "HOME", "TMPDIR")
"""The worker's variables every shell agent sees; anything more is named in `worker.child_env`."""
OUTPUT_LIMIT_DEFAULT = 1024 * 1024


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
    non_retryable_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        default_factory=lambda: list(SYSEXITS_DATA_ERRORS)
    )


class HttpAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["http"]
    url: str = Field(pattern=r"^https?://")
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    """Header name → name of the environment variable holding its value (never logged); only
    variables the worker names in `worker.secrets`."""
    timeout: Duration = timedelta(seconds=30)
    follow_redirects: bool = False
    """Follow 307/308 (which keep the POST and its body); secret headers never cross to another
    origin. Off: any 3xx is a failure naming its Location."""


AgentConfig = Annotated[PythonAgent | ShellAgent | HttpAgent, Field(discriminator="kind")]


class WorkerSettings(BaseModel):
    """The `worker:` section of an agents file: what this worker trusts. Everything is off or
    small by default; a worker runs only the agents it declares unless `inline_agents` says so."""

    model_config = ConfigDict(extra="forbid")

    inline_agents: list[AgentKind] = Field(default_factory=list)
    """Kinds of agents this worker runs from a declaration it did not load itself: one carried
    inline by a saga or chain spec, or by a dead-letter entry (anyone who can start or signal a
    workflow can write those)."""
    child_env: list[str] = Field(default_factory=list)
    """The worker's environment variables shell agents see besides CHILD_ENV_DEFAULT."""
    secrets: list[str] = Field(default_factory=list)
    """The worker's environment variables `headers_from_env` may read."""
    output_limit: ByteSize = ByteSize(OUTPUT_LIMIT_DEFAULT)
    """The most a shell agent may write to stdout or to stderr, or an HTTP agent answer."""
    scratchpad_root: str | None = None
    """The directory under which plans write their scratchpads (`scratchpad: DIR` in a plan is
    relative to it); none by default, and then a plan's scratchpad writes are refused."""

    @model_validator(mode="after")
    def _secrets_stay_out_of_children(self) -> Self:
        leaked = sorted(set(self.secrets) & {*self.child_env, *CHILD_ENV_DEFAULT})
        if leaked:
            raise ValueError(
                f"child_env: {', '.join(leaked)} is named in secrets; a secret never reaches a "
                "shell agent's environment"
            )
        return self

    def unnamed_secrets(self, config: PythonAgent | ShellAgent | HttpAgent) -> list[str]:
        if not isinstance(config, HttpAgent):
            return []
        return sorted(set(config.headers_from_env.values()) - set(self.secrets))

    def inline_refusal(self, name: str, config: PythonAgent | ShellAgent | HttpAgent) -> str | None:
        """Why this worker will not run `config` when it comes from outside (None: it will).
        The one rule `run_agent` and the CLI's pre-start check both apply."""
        if config.kind not in self.inline_agents:
            return (
                f"inline agent {name!r} (kind {config.kind}) is not allowed on this worker; "
                f"declare it in the worker's agents file, or allow the kind there with "
                f"`worker: {{inline_agents: [{config.kind}]}}`"
            )
        if unnamed := self.unnamed_secrets(config):
            return (
                f"inline agent {name!r}: headers_from_env reads {', '.join(unnamed)}, which this "
                "worker does not name under `worker: {secrets: [...]}` in its agents file"
            )
        return None


class AgentsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _headers_read_only_secrets(self) -> Self:
        for name, config in self.agents.items():
            if unnamed := self.worker.unnamed_secrets(config):
                raise ValueError(
                    f"agents.{name}.headers_from_env: {', '.join(unnamed)} is not named under "
                    "worker.secrets; add it there to let agents read it"
                )
        return self
