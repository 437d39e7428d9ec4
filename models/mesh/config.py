"""Agents declared in YAML (`agents:`): Python callables, command-line tools, HTTP services,
language models behind chat-completion endpoints; and what the worker that runs them trusts
(`worker:`)."""

from datetime import timedelta
from string import Template
from typing import Annotated, Any, Literal, Self, get_args
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from coord.models.mesh.ledger import BreakerConfig
from coord.models.mesh.tiers import (
    MAX_TOOLS,
    Effort,
    ModelChoice,
    Tiers,
    ToolName,
    Tools,
    choose_model,
    tool_problem,
)
from coord.models.mesh.usage import TokenBudget
from coord.models.ops.retention import GcSettings, RetentionSettings
from coord.models.wire.durations import Duration
from coord.models.wire.specs import IDENTIFIER, untagged

SYSEXITS_DATA_ERRORS = [2, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 76, 77, 78]
"""Exit codes that say the input was wrong (usage, sysexits 64-78 but 75 EX_TEMPFAIL): retrying
the same event would fail the same way."""

AgentKind = Literal["python", "shell", "http", "llm"]
CHILD_ENV_DEFAULT = ("PATH", "LANG", "LC_ALL", "HOME", "TMPDIR")
"""The worker's variables every shell agent sees; anything more is named in `worker.child_env`."""
OUTPUT_LIMIT_DEFAULT = 1024 * 1024
SCHEDULE_TO_START_DEFAULT = timedelta(seconds=60)
"""How long a run of a named agent waits on the agent's task queue for a worker to take it
before it fails `agent_unavailable` (a step's, subscription's or task's
`schedule_to_start_timeout`)."""


BLOCKED_AFTER_DEFAULT = timedelta(seconds=10)
"""The heartbeat timeout: a loop that has not turned for that long is not slow, it is
stuck (an awaiting agent's loop turns at least every 0.1 s)."""
MIN_BLOCKED_AFTER = timedelta(seconds=1)
"""Below this, a busy machine's scheduling delays would read as a blocked loop."""

LOCAL_TIMEOUT_MAX = timedelta(seconds=10)
"""The longest `timeout` of an agent declared `execution: local`: a local activity runs within its
workflow's task, which a long one would keep busy (retried as a timer past it)."""

MAX_CAPABILITIES = 64
"""Capabilities one agent offers, or one step, subscription or task requires."""
MAX_CAPABILITY_NAME = 128

Capability = Annotated[str, Field(pattern=IDENTIFIER, max_length=MAX_CAPABILITY_NAME)]
"""A name like `sql`, `code-review` or `db:postgres`: what an agent can do, and what a step,
subscription or task may ask for instead of naming an agent."""
MAX_PUBLISHED_TYPES = 1000
MAX_DESCRIPTION = 4096
MAX_TOOL_ROUNDS = 64
MAX_CONCURRENT = 10_000
MAX_RATE_LIMIT = 100_000.0


class AgentDeclarationBase(BaseModel):
    """What every agent declaration has besides how it runs: the mesh fields (capabilities, and
    what the coordinator needs to route to, protect and pace the agent)."""

    model_config = ConfigDict(extra="forbid")

    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    """What the agent is for, in a sentence: shown to people, never to a model."""
    background: bool = False
    """Background work: each worker serving the agent takes one run of it at a time (unless
    `max_concurrent_per_worker` or `max_concurrent` says otherwise), so its runs wait on its
    queue rather than crowd the worker's slots; the callers never wait on it any more than on
    another agent (every run is already asynchronous to its workflow)."""
    capabilities: list[Capability] = Field(default_factory=list, max_length=MAX_CAPABILITIES)
    """What this agent offers to runs that name a capability instead of an agent."""
    max_concurrent: int | None = Field(default=None, ge=1, le=MAX_CONCURRENT)
    """The agent's pool: its runs at once across every worker serving it. Each worker takes at
    most this many runs of it (its activity slot limit, unless `max_concurrent_per_worker`
    says otherwise), and each run holds one of the pool's permits, granted by the agent's
    ledger, while it calls the agent; none: no pool, only the worker's slots (SDK default 100)."""
    max_concurrent_per_worker: int | None = Field(default=None, ge=1, le=MAX_CONCURRENT)
    """The runs of it one worker takes at once (its activity slot limit); none: max_concurrent.
    Lower it to spread the pool over several workers."""
    rate_limit: float | None = Field(default=None, gt=0, le=MAX_RATE_LIMIT)
    """Runs started per second, across all workers serving the agent: the server's rate limit
    on the agent's task queue (`max_task_queue_activities_per_second`); none, unlimited."""
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    """The agent's circuit breaker (`{failures: 5, recovery: 30s}`; `{enabled: false}`: none)."""
    execution: Literal["local", "remote"] | None = None
    """How a saga, chain or plan runs it when the workflow's own worker serves it: `local`, a local
    activity (a `timeout` of at most 10s); `remote`, an activity task on the workflow's queue;
    unset: `local` for python agents, `remote` for the others. A pool, a rate limit or
    capabilities keep its runs on its own queue either way (docs/agents.md, "Where a run
    goes")."""
    publishes: list[str] | None = Field(default=None, max_length=MAX_PUBLISHED_TYPES)
    """The event types the agent may publish itself (its result's `publish`) in a chain,
    besides those the subscription declares. Unset: an `llm` agent may publish none; any other
    kind is held only by what its subscription declares (`publishes_allowed`)."""

    @property
    def paced(self) -> bool:
        """Whether its runs are held to a pool or a rate: those go through its own task queue,
        where the worker's slots and the server's rate limit hold them."""
        return bool(self.max_concurrent or self.max_concurrent_per_worker or self.rate_limit)

    @model_validator(mode="after")
    def _local_is_short(self) -> Self:
        limit = getattr(self, "timeout", None)
        if self.execution == "local" and limit is not None and limit > LOCAL_TIMEOUT_MAX:
            most, has = LOCAL_TIMEOUT_MAX.total_seconds(), limit.total_seconds()
            raise ValueError(
                f"execution: local needs a timeout of at most {most:g}s (it has {has:g}s): "
                "a local activity holds its workflow's task"
            )
        return self

    @property
    def worker_slots(self) -> int | None:
        """One worker's slot limit for it: the first line of its pool; one for background
        work that says nothing else."""
        limit = self.max_concurrent_per_worker or self.max_concurrent
        return limit or (1 if self.background else None)


class PythonAgent(AgentDeclarationBase):
    kind: Literal["python"]
    callable: str = Field(pattern=r"^[\w.]+:\w+$", description="package.module:function")
    blocked_after: Duration = BLOCKED_AFTER_DEFAULT
    """For an `async def`, which runs on an event loop of its own: how long that loop may go
    without turning (a blocking call) before the run fails `agent_blocked`."""

    @field_validator("blocked_after")
    @classmethod
    def _watchable(cls, limit: timedelta) -> timedelta:
        if limit < MIN_BLOCKED_AFTER:
            raise ValueError(f"must be at least {MIN_BLOCKED_AFTER.total_seconds():g}s")
        return limit


class ShellAgent(AgentDeclarationBase):
    kind: Literal["shell"]
    argv: list[str] = Field(min_length=1)
    cwd: str | None = None
    timeout: Duration = timedelta(minutes=5)
    env: dict[str, str] = Field(default_factory=dict)
    non_retryable_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        default_factory=lambda: list(SYSEXITS_DATA_ERRORS)
    )


def _usable_url(url: str) -> str:
    """A URL a request can go to: refused when the agents load, since sending it would fail
    every attempt (no retry makes it a URL), and a wrong host would look like an outage."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as error:
        raise ValueError(f"{url!r} is not a usable URL: {error}") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"{url!r} names no host")
    if any(character.isspace() for character in host):
        raise ValueError(f"{url!r}: {host!r} is not a host name")
    return url


HttpUrl = Annotated[str, Field(pattern=r"^https?://"), AfterValidator(_usable_url)]
"""An `http://` or `https://` URL with a host (and a port, if any, that is a number)."""


class HttpAgent(AgentDeclarationBase):
    kind: Literal["http"]
    url: HttpUrl
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    """Header name → name of the environment variable holding its value (never logged); only
    variables the worker names in `worker.secrets`."""
    timeout: Duration = timedelta(seconds=30)
    follow_redirects: bool = False
    """Follow 307/308 (which keep the POST and its body); secret headers never cross to another
    origin. Off: any 3xx is a failure naming its Location."""


PROMPT_DEFAULT = "$payload\n\nWhat it depends on: $inputs"
"""An `llm` agent's prompt unless it says one: the run's task (a plan task's input, a chain's
event payload) and what it depends on (a plan task's dependencies' results), as JSON."""


class PromptTemplate(Template):
    """`$name` or `${name}` placeholders, nothing else: a name is looked up, never evaluated
    (no attribute access, no indexing, no calls). A braced name may be any task id (`${build-1}`,
    `${api.v2}`): a dot is part of the name, not a lookup."""

    braceidpattern = r"(?a:[_a-z0-9][_a-z0-9.:-]*)"


class LlmAgent(AgentDeclarationBase):
    """A language model behind an OpenAI-compatible chat-completions endpoint; its answer, a JSON
    object, is the agent's result."""

    kind: Literal["llm"]
    base_url: HttpUrl
    """The API root, e.g. `https://api.openai.com/v1` (requests go to its `/chat/completions`)."""
    model: str | None = Field(default=None, min_length=1)
    """The model to ask; none: the worker's tier for the run's effort (`worker.tiers`)."""
    effort: Effort | None = None
    """`quick`, `normal` or `thorough`: the tier (model and timeout) of `worker.tiers` the agent
    runs on when it names no `model` or `timeout` itself (none: a plan task's kind, else
    `normal`)."""
    tools: list[ToolName] = Field(default_factory=list, max_length=MAX_TOOLS)
    """The whitelist: the worker's tools (`worker.tools`) the model is offered and may call;
    a call of any other is refused (`tool_not_allowed`), never executed."""
    max_tool_rounds: int = Field(default=8, ge=1, le=MAX_TOOL_ROUNDS)
    """The most chat completions one run makes when the model calls tools."""
    api_key_env: str = Field(min_length=1)
    """The environment variable holding the API key (never logged); only one the worker names in
    `worker.secrets`."""
    definition: str | None = Field(default=None, min_length=1)
    """A markdown agent definition (front matter: description, tools, model, effort,
    background; body: the system prompt) that fills the fields this declaration leaves out;
    its path relative to the agents file, read with it. Only an agents file may name one."""
    system: str | None = None
    prompt: str = Field(default=PROMPT_DEFAULT, min_length=1)
    """A template filled from the event payload and the run's inputs (see `PromptTemplate`)."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    timeout: Duration | None = None
    """One chat completion's time limit; none: its tier's, else 60 s."""
    response_format: Literal["json", "none"] = "json"
    """`json` asks the endpoint for a JSON object; `none` sends no `response_format` (for servers
    that reject it: the prompt must then ask for JSON)."""
    budget: TokenBudget | None = None
    """`{tokens: N}`: the most tokens the runs of one correlation's workflow may use before a run
    of this agent is refused (`budget_exceeded`); a spec's own `budget` holds too, and the
    smaller wins."""

    @field_validator("prompt")
    @classmethod
    def _prompt_is_a_template(cls, prompt: str) -> str:
        if not PromptTemplate(prompt).is_valid():
            raise ValueError("a `$` starts a placeholder ($name or ${name}); `$$` is a dollar sign")
        return prompt

    def choice(self, tiers: Tiers, asked: Effort | None = None) -> ModelChoice | str:
        """The model and timeout of a run (`choose_model`), or why there is none."""
        return choose_model(self.model, self.timeout, self.effort, tiers, asked)


AGENT_KINDS = tuple(
    get_args(declared.model_fields["kind"].annotation)[0]
    for declared in (PythonAgent, ShellAgent, HttpAgent, LlmAgent)
)


def _kind_given(declaration: Any) -> Any:
    """A declaration without `kind:` is refused naming the kinds it may be: pydantic's own
    refusal names no kind (its error types, which coord.models.wire.specs words, are kept)."""
    if isinstance(declaration, dict) and "kind" not in declaration:
        kinds = ", ".join(map(repr, AGENT_KINDS))
        context = {"discriminator": "'kind'", "expected_tags": kinds}
        raise PydanticCustomError("union_tag_not_found", "no kind: one of {expected_tags}", context)
    return declaration


AgentConfig = Annotated[
    PythonAgent | ShellAgent | HttpAgent | LlmAgent,
    Field(discriminator="kind"),
    BeforeValidator(_kind_given),
    untagged(AGENT_KINDS),
]


def publishes_allowed(kind: str, declaration: AgentDeclarationBase | None) -> list[str] | None:
    """The event types an agent's declaration lets it publish itself (`AgentResult.may_publish`):
    its `publishes`, else none for an `llm` agent (its answer is data a prompt can steer), else
    None: no restriction of its own (python, shell and http agents publish as they always did,
    unless their subscription declares `publishes.events`)."""
    if declaration is not None and declaration.publishes is not None:
        return list(declaration.publishes)
    return [] if kind == "llm" else None


def secret_variables(config: AgentConfig) -> list[str]:
    """The worker's environment variables a declaration reads secrets from."""
    if isinstance(config, HttpAgent):
        return list(config.headers_from_env.values())
    if isinstance(config, LlmAgent):
        return [config.api_key_env]
    return []


def secret_field(config: AgentConfig) -> str:
    """The declaration's field naming those variables, for messages."""
    return "api_key_env" if isinstance(config, LlmAgent) else "headers_from_env"


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
    """The worker's environment variables `headers_from_env` and `api_key_env` may read."""
    output_limit: ByteSize = ByteSize(OUTPUT_LIMIT_DEFAULT)
    """The most a shell agent may write to stdout or to stderr, or an HTTP or LLM agent answer."""
    scratchpad_root: str | None = None
    """The directory under which plans write their scratchpads (`scratchpad: DIR` in a plan is
    relative to it); none by default, and then a plan's scratchpad writes are refused."""
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    """How long stored payloads, results, dead letters and scratchpads are kept (README
    "Retention"); `COORD_RETENTION_<KIND>` overrides one."""
    gc: GcSettings = Field(default_factory=GcSettings)
    """The worker's periodic sweep of what has outlived its retention; off by default."""
    tiers: Tiers = Field(default_factory=dict)
    """Each effort's model and timeout (`quick: {model: ..., timeout: 30s}`), for `llm` agents
    that name no model of their own and for plan tasks that say their kind."""
    tools: Tools = Field(default_factory=dict)
    """The functions `llm` agents may call, by name, each offered only to an agent whose
    `tools` whitelist names it."""

    @model_validator(mode="after")
    def _secrets_stay_out_of_children(self) -> Self:
        leaked = sorted(set(self.secrets) & {*self.child_env, *CHILD_ENV_DEFAULT})
        if leaked:
            raise ValueError(
                f"child_env: {', '.join(leaked)} is named in secrets; a secret never reaches a "
                "shell agent's environment"
            )
        return self

    def unnamed_secrets(self, config: AgentConfig) -> list[str]:
        return sorted(set(secret_variables(config)) - set(self.secrets))

    def inline_refusal(self, name: str, config: AgentConfig) -> str | None:
        """Why this worker will not run `config` when it comes from outside (None: it will).
        The one rule `run_agent` and the CLI's pre-start check both apply."""
        if isinstance(config, LlmAgent) and config.definition is not None:
            return (
                f"inline agent {name!r}: `definition` names a file on the worker; only the "
                "worker's agents file may"
            )
        if config.kind not in self.inline_agents:
            return (
                f"inline agent {name!r} (kind {config.kind}) is not allowed on this worker; "
                f"declare it in the worker's agents file, or allow the kind there with "
                f"`worker: {{inline_agents: [{config.kind}]}}`"
            )
        if unnamed := self.unnamed_secrets(config):
            return (
                f"inline agent {name!r}: {secret_field(config)} reads {', '.join(unnamed)}, which "
                "this worker does not name under `worker: {secrets: [...]}` in its agents file"
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
                    f"agents.{name}.{secret_field(config)}: {', '.join(unnamed)} is not named "
                    "under worker.secrets; add it there to let agents read it"
                )
        return self

    @model_validator(mode="after")
    def _models_and_tools_are_there(self) -> Self:
        for name, config in self.agents.items():
            if not isinstance(config, LlmAgent):
                continue
            if isinstance(choice := config.choice(self.worker.tiers), str):
                raise ValueError(f"agents.{name}.model: {choice}")
            if unknown := tool_problem(config.tools, self.worker.tools):
                raise ValueError(f"agents.{name}.tools: {unknown}")
        return self
