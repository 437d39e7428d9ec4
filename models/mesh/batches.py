"""Local runs taken together: the first attempts of several short in-process agent runs, run side
by side in one local activity (`run_agents`), whose outcomes come back in one marker.

A workflow task stays open while a local activity runs, and the signals arriving meanwhile wait
for it to end. One local run at a time keeps the recorded order of outcomes the one a replay
sees, but under a burst it holds the workflow's tasks open back to back, the runs queued behind
each other. A batch keeps the one-at-a-time order (one local activity in flight) and runs the
queued runs side by side: a burst costs about one round trip and one marker, not one each.

A batch carries first attempts only. A run whose first attempt fails goes on as its own run
from its second attempt, with its retry policy's wait, its detours and its failure taxonomy; a
run whose result does not fit the batch's share of a workflow task's bytes is run again on its
own (agents are called at least once, as any retried activity is).

Runs that follow each other (a saga's steps, each handed the results of those before it) run
ahead in order (`LocalBatch.in_order`): each is handed the results of those before it in the
batch (`handed_on`), and the batch stops at the first that does not succeed, does not fit, or
reports what it used (the next run is sent what is left of a budget): the runs after it go on
their own, as they would have without the batch. It also stops after the run that takes it past
`IN_ORDER_FOR`: its results are recorded only once it ends (a workflow task open that long
records the outcomes of the local activities ended so far each time its worker hands it back),
so a worker or server lost meanwhile costs every run of the batch again. Slow agents then run
one to a batch; instant ones still go together."""

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coord.models.mesh.agents import AgentRequest, AgentResult
from coord.models.mesh.usage import reported_usage
from coord.models.wire.sizes import BYTES_PER_WORKFLOW_TASK
from coord.models.wire.specs import MAX_COUNT

__all__ = [
    "BATCH_MARGIN",
    "BATCH_RESULT_BYTES",
    "IN_ORDER_FOR",
    "MAX_BATCH_RUNS",
    "BatchedFailure",
    "BatchedOutcome",
    "BatchedRun",
    "LocalBatch",
    "LocalBatchOutcomes",
    "batch_timeout",
    "goes_on_after",
    "handed_on",
    "results_that_fit",
]

MAX_BATCH_RUNS = 50
"""Runs in one batch at most: those queued beyond wait for the next."""
BATCH_RESULT_BYTES = BYTES_PER_WORKFLOW_TASK
"""The JSON bytes of a batch's results at most: they come back in one marker, which the workflow
decodes in one activation, so a batch takes no more than a workflow task's byte budget (the one
the chain takes its events by)."""
IN_ORDER_FOR = timedelta(seconds=1)
"""How long an in-order batch runs before it ends after the run under way: what a worker or
server lost while it runs costs again, at most."""
BATCH_MARGIN = timedelta(seconds=1)
"""How much longer a batch may take than its slowest run's timeout (each run's own timeout is
kept inside the batch)."""


class BatchedRun(BaseModel):
    """One run's first attempt, with the timeout its execution alone would have had."""

    model_config = ConfigDict(extra="forbid")

    request: AgentRequest
    timeout_s: float = Field(gt=0)
    result_as: str | None = None
    """In an in-order batch, the name under which the runs after it are handed its result
    (`inputs.steps`, as a saga's steps are)."""


class LocalBatch(BaseModel):
    """What `run_agents` is asked to run side by side."""

    model_config = ConfigDict(extra="forbid")

    runs: list[BatchedRun] = Field(min_length=1, max_length=MAX_BATCH_RUNS)
    in_order: bool = False
    """One after the other, each handed the results of those before (`handed_on`), until one
    does not succeed; else side by side."""


class BatchedFailure(BaseModel):
    """A failed first attempt as the agent's worker classified it (the ApplicationError a
    `run_agent` raises): its type, message, whether it may be retried, its details (the
    attempt) and the agent's own wait before a retry."""

    model_config = ConfigDict(extra="forbid")

    type: str
    message: str
    non_retryable: bool = False
    details: list[Any] = Field(default_factory=list, max_length=MAX_COUNT)
    retry_after_s: float | None = None


class BatchedOutcome(BaseModel):
    """One run's outcome in its batch: a result, a failure, or neither (run it on its own)."""

    model_config = ConfigDict(extra="forbid")

    result: AgentResult | None = None
    failure: BatchedFailure | None = None

    @property
    def again(self) -> bool:
        """Neither result nor failure came back: the run goes on its own from its first
        attempt (its result did not fit, or the batch as a whole failed)."""
        return self.result is None and self.failure is None


class LocalBatchOutcomes(BaseModel):
    """The outcomes of a batch's runs, in the batch's order: of each run, or, in order, of the
    runs up to the one that ended the batch."""

    model_config = ConfigDict(extra="forbid")

    outcomes: list[BatchedOutcome] = Field(max_length=MAX_BATCH_RUNS)


def batch_timeout(batch: LocalBatch) -> timedelta:
    """The batch's start-to-close: its slowest run's timeout (in order, the sum of its runs'),
    and a margin."""
    timeouts = [run.timeout_s for run in batch.runs]
    return timedelta(seconds=sum(timeouts) if batch.in_order else max(timeouts)) + BATCH_MARGIN


def handed_on(request: AgentRequest, results: dict[str, Any]) -> AgentRequest:
    """`request` handed the results of the runs before it in an in-order batch, by name, after
    those it already holds (what a saga's step request holds once those steps succeeded)."""
    if not results:
        return request
    steps = {**request.inputs.get("steps", {}), **results}
    return request.model_copy(update={"inputs": {**request.inputs, "steps": steps}})


def results_that_fit(sizes: list[int | None], budget: int = BATCH_RESULT_BYTES) -> list[bool]:
    """Which results come back in the batch's marker, in order, each while the bytes of those
    before it and its own fit `budget` (None: a run without a result, which takes none)."""
    fits, spent = [], 0
    for size in sizes:
        fit = size is None or spent + size <= budget
        spent += size if fit and size is not None else 0
        fits.append(fit)
    return fits


def goes_on_after(result: AgentResult) -> bool:
    """Whether an in-order batch goes on after a run that ended in `result`: its data is here
    to hand on (not in the payload store), and it reported no use (the next run is sent what is
    left of a budget)."""
    return result.reference is None and reported_usage(result.metadata) is None
