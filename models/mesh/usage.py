"""What a correlation's language-model runs cost, and the budget that bounds it.

An `llm` agent reports its chat completion's usage in its result's metadata (`usage`:
`prompt_tokens`, `completion_tokens`, `total_tokens`; and `model`); any agent that reports the
same shape is counted the same way. The workflow that runs the agents keeps a `TokenUsage` in its
record and adds every successful run's usage to it; before each run it sends the agent what the
record has used with the spec's budget (`TokenAllowance`), and the `llm` kind refuses the run,
without calling the model, when the smaller of that budget and its own declaration's has nothing
left (`refusal`). Pure: the workflows and the worker both import it."""

from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_TOKENS = 10**15
"""Any count past this is not a count (a report this large is ignored, a total stops here)."""
MAX_MODELS = 32
"""Models a record counts by name; the runs of any further model are counted as OTHER_MODELS,
so an agent reporting a new model name on every run cannot grow the record."""
MAX_MODEL_NAME = 128
OTHER_MODELS = "(other)"
UNNAMED_MODEL = "(unnamed)"


class RunResult(Protocol):
    """What is read of a run's result (an `AgentResult`, which the agent SDK defines on top of
    this module): its metadata."""

    @property
    def metadata(self) -> dict[str, Any]: ...


class TokenBudget(BaseModel):
    """`budget: {tokens: N}`, in a spec (chain, plan, saga) or an `llm` agent's declaration:
    the most tokens (prompt and completion) the runs of one correlation's workflow may use."""

    model_config = ConfigDict(extra="forbid")

    tokens: int = Field(ge=0, le=MAX_TOKENS)
    """0 refuses every `llm` run."""


class ReportedUsage(BaseModel):
    """A run's `metadata.usage` as chat completions say it (counts only, strictly ints)."""

    model_config = ConfigDict(strict=True)

    prompt_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
    completion_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
    total_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)


class TokenCount(BaseModel):
    """Tokens in (the prompts), out (the completions) and in all, over `runs` runs."""

    input: int = 0
    output: int = 0
    total: int = 0
    runs: int = 0

    def count(self, reported: ReportedUsage) -> None:
        """One run's reported usage (a total it does not report is its input and output)."""
        total = reported.total_tokens or reported.prompt_tokens + reported.completion_tokens
        self.include(
            TokenCount(
                input=reported.prompt_tokens,
                output=reported.completion_tokens,
                total=total,
                runs=1,
            )
        )

    def include(self, other: "TokenCount") -> None:
        """Another count's tokens and runs added to these (each sum stops at MAX_TOKENS)."""
        self.input = min(self.input + other.input, MAX_TOKENS)
        self.output = min(self.output + other.output, MAX_TOKENS)
        self.total = min(self.total + other.total, MAX_TOKENS)
        self.runs += other.runs


class TokenAllowance(BaseModel):
    """What a run is sent (`AgentRequest.tokens`): the tokens its workflow's record has used so
    far and the spec's budget. The agent's side works out what is left, with its declaration's
    budget as well (`left`)."""

    model_config = ConfigDict(extra="forbid")

    used: int = Field(ge=0, le=MAX_TOKENS)
    budget: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    """The spec's; None: the spec sets none."""

    def left(self, declared: TokenBudget | None = None) -> int | None:
        """The smaller budget (the spec's or the declaration's) less what was used; None when
        neither sets one. At most 0 means nothing is left."""
        budgets = [b for b in (self.budget, declared.tokens if declared else None) if b is not None]
        return min(budgets) - self.used if budgets else None


class TokenUsage(TokenCount):
    """A workflow's record of what its agent runs reported using, in all and by model."""

    by_model: dict[str, TokenCount] = Field(default_factory=dict)

    def add(self, result: RunResult) -> None:
        """Counts the run's reported usage; a result that reports none, or one that is not
        counts (not an object of non-negative ints), adds nothing."""
        reported = reported_usage(result.metadata)
        if reported is None:
            return
        self.count(reported)
        self._model(result.metadata.get("model")).count(reported)

    def merge(self, other: "TokenUsage") -> None:
        """Another record's usage added to this one (a correlation's chain, sagas and plans)."""
        self.include(other)
        for name, count in other.by_model.items():
            self._model(name).include(count)

    def _model(self, model: object) -> TokenCount:
        """The count of `model` (a bounded name), or of OTHER_MODELS once MAX_MODELS are named."""
        name = model[:MAX_MODEL_NAME] if isinstance(model, str) and model.strip() else UNNAMED_MODEL
        if name not in self.by_model and len(self.by_model) >= MAX_MODELS - 1:
            name = OTHER_MODELS
        return self.by_model.setdefault(name, TokenCount())

    def allowance(self, budget: TokenBudget | None) -> TokenAllowance | None:
        """What the next run is sent: None when nothing was used and the spec sets no budget
        (the run then holds to its declaration's budget alone, from nothing used), so that
        workflows without language models send their requests as they always did."""
        if budget is None and self.total == 0:
            return None
        return TokenAllowance(used=self.total, budget=None if budget is None else budget.tokens)

    def describe(self) -> str:
        """`1,234 tokens (1,000 in, 234 out) in 3 runs of gpt-4o`; with several models, each
        model's total after it (`; gpt-4o: 1,000, o3: 234`)."""
        line = _counted(self)
        if len(self.by_model) == 1:
            return f"{line} of {next(iter(self.by_model))}"
        models = ", ".join(f"{name}: {count.total:,}" for name, count in self.by_model.items())
        return f"{line}; {models}" if models else line


@dataclass(frozen=True)
class TokenMeter:
    """A workflow's record of its tokens with its spec's budget, handed to each agent run it
    awaits (`RunSettings.tokens`): every execution of the run is sent the allowance, and the
    run's result is counted into the record when it succeeds."""

    usage: TokenUsage
    budget: TokenBudget | None = None

    def allowance(self) -> TokenAllowance | None:
        return self.usage.allowance(self.budget)

    def add(self, result: RunResult) -> None:
        self.usage.add(result)


def _counted(count: TokenCount) -> str:
    runs = "1 run" if count.runs == 1 else f"{count.runs:,} runs"
    return f"{count.total:,} tokens ({count.input:,} in, {count.output:,} out) in {runs}"


def reported_usage(metadata: dict[str, Any]) -> ReportedUsage | None:
    """The usage a run's metadata reports, if it is counts at all."""
    usage = metadata.get("usage")
    if not isinstance(usage, dict):
        return None
    try:
        return ReportedUsage.model_validate(usage)
    except ValidationError:
        return None


def refusal(allowance: TokenAllowance | None, declared: TokenBudget | None) -> str | None:
    """Why a run may not start for its budget (None: it may): the smaller budget, the spec's or
    the declaration's, has nothing left. A run that starts with something left may use more
    than that; the next one is refused."""
    allowance = allowance or TokenAllowance(used=0)
    left = allowance.left(declared)
    if left is None or left > 0:
        return None
    spec = allowance.budget
    spec_wins = declared is None or (spec is not None and spec <= declared.tokens)
    whose = "the spec's" if spec_wins else "its declaration's"
    return (
        f"the correlation's token budget is spent: {allowance.used:,} used of "
        f"{allowance.used + left:,} ({whose} budget)"
    )
