"""A workflow's local runs taken together (coord.models.mesh.batches): one batch in flight at a
time, which takes every run that came meanwhile, so the outcomes reach the workflow one local
activity at a time, as a replay hands them over (`LocalBatches`); or runs that follow each other
run ahead, in order, in one local activity (`RunsAhead`)."""

import asyncio
from datetime import timedelta
from typing import Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.mesh.agents import AgentRequest
    from coord.models.mesh.batches import (
        MAX_BATCH_RUNS,
        BatchedOutcome,
        BatchedRun,
        LocalBatch,
        batch_timeout,
        handed_on,
    )
    from coord.workflows._runtime import calls

Waiting = tuple[BatchedRun, "asyncio.Future[BatchedOutcome]"]
"""A run in a batch, and the wait for its outcome."""
ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
"""A batch is not retried as a whole: each run that failed goes on as its own run."""
SUMMARY_AGENTS = 3
"""Agents a batch's summary names (the UI's line for it)."""


class BatchLane(Protocol):
    """Where a run's first attempt is run with others (`agent_runs.start_batched_run`)."""

    one_local: asyncio.Lock
    """Held by the local activity under way (a batch, or a run's later execution on its own)."""

    async def run(self, request: AgentRequest, timeout: timedelta) -> BatchedOutcome:
        """The outcome of `request`'s first attempt (neither result nor failure: run it alone)."""
        ...


class LocalBatches:
    """Runs waiting for the batch under way, and the batch under way."""

    def __init__(self) -> None:
        self._waiting: list[Waiting] = []
        self._taken: list[Waiting] = []
        """The runs of the batch under way."""
        self._draining = False
        self.one_local = asyncio.Lock()
        """Held by the local activity under way, a batch or a run's later execution on its own:
        one at a time, so that a replay hands their outcomes over in the recorded order (it may
        hand several that ended in one workflow task over at once)."""

    async def run(self, request: AgentRequest, timeout: timedelta) -> BatchedOutcome:
        """The outcome of `request`'s first attempt, run in the next batch. A cancel does not
        end the wait: a local execution is never cancelled (it holds the workflow task that
        would hear the cancel anyway), and its outcome is kept, as a run on its own keeps it."""
        outcome: asyncio.Future[BatchedOutcome] = asyncio.get_running_loop().create_future()
        run = BatchedRun(request=request, timeout_s=timeout.total_seconds())
        self._waiting.append((run, outcome))
        if not self._draining:
            self._draining = True
            drain = asyncio.create_task(self._drain())
            drain.add_done_callback(self._drain_ended)
        while True:
            try:
                return await asyncio.shield(outcome)
            except asyncio.CancelledError:
                if outcome.done():
                    return outcome.result()

    async def _drain(self) -> None:
        """Batches, one after the other, until no run waits."""
        while self._waiting:
            self._taken = self._waiting[:MAX_BATCH_RUNS]
            self._waiting = self._waiting[MAX_BATCH_RUNS:]
            async with self.one_local:
                outcomes = await _side_by_side([run for run, _ in self._taken])
            for (_, waiting), outcome in zip(self._taken, outcomes, strict=True):
                waiting.set_result(outcome)
            self._taken = []
        self._draining = False

    def _drain_ended(self, drain: "asyncio.Task[None]") -> None:
        """A drain cut short (the worker dropping the run from its cache, maybe before the
        drain began) cancels the waits it would have ended."""
        if not drain.cancelled() and drain.exception() is None:
            return
        for _, waiting in [*self._taken, *self._waiting]:
            if not waiting.done():
                waiting.cancel()


class RunsAhead:
    """Runs that follow each other (a saga's steps, all local), their first attempts run ahead in
    one local activity, in order, each handed the results of those before it: one marker, one
    round trip to the agents' worker, not one each. Each run then takes its outcome as its first
    attempt's (`run`), in the workflow's own order, and goes on from there as it would have; a
    run the batch did not reach runs on its own."""

    def __init__(self) -> None:
        self.one_local = asyncio.Lock()
        self._sent: dict[str, tuple[AgentRequest, BatchedOutcome]] = {}

    async def run_all(self, runs: list[BatchedRun]) -> None:
        """Runs the batch; a batch that failed as a whole reached no run (each goes on alone)."""
        outcomes = await _run_batch(LocalBatch(runs=runs, in_order=True))
        handed: dict[str, object] = {}
        for run, outcome in zip(runs, outcomes or [], strict=False):
            if run.request.idempotency_key is not None:  # a run is known by its key
                sent = handed_on(run.request, handed)
                self._sent[run.request.idempotency_key] = (sent, outcome)
            if outcome.result is not None and run.result_as is not None:
                handed[run.result_as] = outcome.result.data

    def reached(self, request: AgentRequest) -> bool:
        """Whether the batch ran `request`'s first attempt."""
        return request.idempotency_key in self._sent

    async def run(self, request: AgentRequest, timeout: timedelta) -> BatchedOutcome:
        """The outcome of the first attempt the batch ran for `request`; neither result nor
        failure when it ran another (the run then goes on alone from its first attempt)."""
        sent = self._sent.pop(request.idempotency_key or "", None)
        return sent[1] if sent is not None and sent[0] == request else BatchedOutcome()


async def _side_by_side(runs: list[BatchedRun]) -> list[BatchedOutcome]:
    """A batch's outcomes, one for each run; a batch that failed as a whole (its worker lost,
    an answer that does not decode or does not match its runs) leaves every run to go on its
    own."""
    outcomes = await _run_batch(LocalBatch(runs=runs))
    return [BatchedOutcome() for _ in runs] if outcomes is None else outcomes


async def _run_batch(batch: LocalBatch) -> list[BatchedOutcome] | None:
    """The batch's outcomes: one for each run, or, in order, for those up to the one that ended
    it; None when the batch failed as a whole (no run waits on a batch that will not answer)."""
    runs = batch.runs
    agents = list(dict.fromkeys(run.request.agent for run in runs))  # in order, or by name
    if not batch.in_order:
        agents.sort()
    named = ", ".join(agents[:SUMMARY_AGENTS]) + (", …" if len(agents) > SUMMARY_AGENTS else "")
    order = " in order" if batch.in_order else ""
    try:
        answer = await calls.execute_local(
            refs.RUN_AGENTS,
            batch,
            start_to_close_timeout=batch_timeout(batch),
            retry_policy=ONE_ATTEMPT,
            summary=f"{len(runs)} local run{'s' if len(runs) > 1 else ''}{order}: {named}",
        )
    except Exception as error:  # anything: no run waits on a batch that will not answer
        workflow.logger.warning("a batch of %d local runs failed: %s", len(runs), error)
        return None
    if len(answer.outcomes) > len(runs) or (
        not batch.in_order and len(answer.outcomes) != len(runs)
    ):
        workflow.logger.warning(
            "a batch of %d local runs answered for %d", len(runs), len(answer.outcomes)
        )
        return None
    return answer.outcomes
