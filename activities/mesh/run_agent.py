"""The `run_agent` activity: one attempt of an agent run, in steps read top to bottom.

    placed -> share -> admit -> guard -> resolve -> run -> keep (a result) | report (a failure)

placed (`placed`): a run its saga's start placed on this worker's queue (`AgentRequest.placed`)
   for an agent this worker does not serve there (a pool, a rate limit, capabilities, or not
   served at all): `misplaced` (the agent not called); the workflow sends the run on to the
   agent's queue, where what protects the agent holds.
0. share (`share`, local_shares.py): for a local run, the agent's share of the worker's local
   activity slots: `local_share_full` (the agent not called) when its local runs hold it all;
   the workflow sends the run on as an activity task.
1. admit (`admit`, pools.py): a permit of the agent's pool, when it declares `max_concurrent`;
   `pool_full` (the agent not called) when none comes free in time.
2. guard (`guard`, breakers.py): the agent's circuit breaker: `circuit_open` (the agent not
   called) while it is open, a probe when it is half-open. When the run leaves it, the breaker
   judges how it ended and tells the agent's ledger, before the permit goes back: the next run
   sees the breaker this one may have opened.
3. resolve (`resolve`, result_refs.py): the agent's function, by name from the worker's registry
   or from the declaration the request carries inline, and its inputs, results stored by
   reference read back as their data.
4. run (`run`): the kind's function on the event, told of its run by its context (heartbeats
   and progress, from any thread), within the run's own time limit (run_tally.py). The kind
   brings its own watch: an `async def` python agent's loop is watched for blocking
   (kinds/python.py, `agent_blocked`), a shell agent is killed with its children. The run's
   metrics (activities/metrics.py) wrap resolve and run: in flight, then counted by how it
   ended, with its duration.
5. keep (`result_of`, then `ResultStore.kept` in result_refs.py): the output as the run's
   `AgentResult` (`invalid_payload` when it does not validate), its data in the payload store
   when larger than the request's `result_limit`.
6. report (`report_failure`, run_tally.py): a failed attempt is classified (its failure type,
   `retry_on`, the delay before its retry) and counted in the run's tally, which heartbeats
   carry to the next attempt; a gate's refusal is handed back to the workflow, or retried
   here. The breaker's share of the report is made by `guard` as the run leaves it, success or
   failure; the report keeper (reports.py, an interceptor around every activity) sends the
   attempt's outcome again when the server was away as it ended.

How the two sides meet: workflows never call agent code; they start this activity through
`start_agent_run` (workflows/_runtime/agent_runs.py), which sends an `AgentRequest` to the
agent's own task queue with the step's timeouts and retry policy, and reads back what this side
raises. The request's `gates_return` (set there) makes a refusal of admit or guard come back at
once, non-retryable, carrying a `GateRefusal` (this attempt, when to come back); the workflow
waits or sends the run elsewhere, and sends it again with `attempts_before`, the failures spent
so far, from which the attempt and the tally go on. `jitter` and `budget` (also set there) are
how report spreads the delay before a retry and when it stops retrying. Every other failure
comes back typed (`FailureType`) with its `attempt`, retried by the server unless
non-retryable; a success comes back as the `AgentResult`."""

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from coord.activities import metrics
from coord.activities.kinds import agent_from_config
from coord.activities.mesh.attempt_log import AttemptLog, attempt_began
from coord.activities.mesh.breakers import Breakers
from coord.activities.mesh.local_shares import LocalShares
from coord.activities.mesh.pools import AgentPools
from coord.activities.mesh.result_refs import ResultStore
from coord.activities.mesh.run_tally import RunCounter
from coord.infra.run_context import agent_run_context
from coord.models import calls as refs
from coord.models.mesh.agents import (
    AgentContext,
    AgentFn,
    AgentRegistry,
    AgentRequest,
    AgentResult,
    ProgressReporter,
)
from coord.models.mesh.attempts import MIN_POOL_WAIT, POOL_WAIT
from coord.models.mesh.batches import (
    IN_ORDER_FOR,
    BatchedFailure,
    BatchedOutcome,
    BatchedRun,
    LocalBatch,
    LocalBatchOutcomes,
    goes_on_after,
    handed_on,
    results_that_fit,
)
from coord.models.mesh.config import AgentConfig
from coord.models.mesh.placement import claim_holds
from coord.models.mesh.runs import GATE_FAILURES, NO_JITTER, GateRefusal, retry_delay
from coord.models.wire.contract import FailureType, failure, failure_type_of
from coord.models.wire.sizes import json_size
from coord.models.wire.specs import SpecError

Output = Mapping[str, Any] | None


class AgentActivities:
    def __init__(
        self,
        registry: AgentRegistry,
        breakers: Breakers | None = None,
        pools: AgentPools | None = None,
        local_shares: LocalShares | None = None,
    ) -> None:
        """`breakers`: the agents' circuit breakers (none: runs are not watched); `pools`: the
        pools of agents declaring max_concurrent (none: only the worker's slots limit them);
        `local_shares`: each agent's share of the worker's local activity slots (none: any
        agent may hold them all)."""
        self._registry = registry
        self._results = ResultStore()
        self._breakers = breakers
        self._pools = pools
        self._local_shares = local_shares
        self._attempts = AttemptLog()

    @activity.defn(name=refs.RUN_AGENTS.name)
    async def run_agents(self, batch: LocalBatch) -> LocalBatchOutcomes:
        """The first attempts of a batch's runs side by side, each as `run_agent` runs one
        within its own timeout; a failure comes back as data, and a result that would take the
        batch's marker past its bytes comes back as neither (coord.models.mesh.batches)."""
        if batch.in_order:
            return LocalBatchOutcomes(outcomes=await self._in_order(batch.runs))
        outcomes = await asyncio.gather(*(self._batched(run) for run in batch.runs))
        sizes = [None if o.result is None else json_size(o.result) for o in outcomes]
        fitting = results_that_fit(sizes)
        kept = [o if fits else BatchedOutcome() for o, fits in zip(outcomes, fitting, strict=True)]
        return LocalBatchOutcomes(outcomes=kept)

    async def _in_order(self, runs: list[BatchedRun]) -> list[BatchedOutcome]:
        """The runs one after the other, each handed the results before it, up to the first
        that fails, does not fit the batch's bytes, ends the batch (`goes_on_after`), or ends
        past IN_ORDER_FOR since the batch began."""
        outcomes: list[BatchedOutcome] = []
        handed: dict[str, Any] = {}
        sizes: list[int | None] = []
        ends = time.monotonic() + IN_ORDER_FOR.total_seconds()
        for run in runs:
            request = handed_on(run.request, handed)
            outcome = await self._batched(run.model_copy(update={"request": request}))
            if outcome.result is None:
                return [*outcomes, outcome]
            sizes.append(json_size(outcome.result))
            if not results_that_fit(sizes)[-1]:
                return [*outcomes, BatchedOutcome()]
            outcomes.append(outcome)
            if run.result_as is None or not goes_on_after(outcome.result):
                break
            if time.monotonic() >= ends:  # a lost worker would cost every run so far again
                break
            handed[run.result_as] = outcome.result.data
        return outcomes

    async def _batched(self, run: BatchedRun) -> BatchedOutcome:
        """One run of a batch, with its own context (its span, its log lines' ids)."""
        try:
            with agent_run_context(run.request, own_span=True):
                async with asyncio.timeout(run.timeout_s):
                    return BatchedOutcome(result=await self.run_agent(run.request))
        except ApplicationError as error:
            return BatchedOutcome(failure=batched_failure(error))
        except TimeoutError:
            message = f"agent {run.request.agent!r} ran past its time limit of {run.timeout_s:g}s"
            attempt = {"attempt": run.request.attempts_before + 1}
            timeout = BatchedFailure(type=FailureType.TIMEOUT, message=message, details=[attempt])
            return BatchedOutcome(failure=timeout)

    @activity.defn(name=refs.RUN_AGENT.name)
    async def run_agent(self, request: AgentRequest) -> AgentResult:
        """One attempt of the run `request` asks for, through the module's steps."""
        tally = RunCounter(request.agent, request.budget, before=request.attempts_before)
        activity.logger.info(
            "agent run",
            extra={"agent": request.agent, "correlation_id": request.event.event.correlation_id},
        )
        placed(self._registry, request)
        with share(self._local_shares, request):
            return await self._run(request, tally)

    async def _run(self, request: AgentRequest, tally: RunCounter) -> AgentResult:
        """Steps 1 to 6, once the run holds its place (a local run its share of the slots).
        The outcome carries the run's attempts as this worker saw them (`AttemptLog`), and the
        time this one waited for a permit of its pool."""
        began = attempt_began()
        try:
            async with (
                admit(self._pools, request) as waited,
                guard(self._breakers, request),
                metrics.agent_run(request, self._registry),
            ):
                started = time.monotonic()  # the run's duration leaves out its wait for a permit
                resolved = await resolve(self._registry, self._results, request)
                output = await run(resolved, request, tally)
        except Exception as error:
            try:
                report_failure(error, request, tally)
            except ApplicationError as reported:  # with the attempts, from what it came from
                timed = self._attempts.failed(request, reported, tally, began)
                raise timed from reported.__cause__
        duration_ms = (time.monotonic() - started) * 1000
        result = result_of(self._registry, request, output, duration_ms, tally.attempt)
        if waited >= MIN_POOL_WAIT.total_seconds():
            result.metadata[POOL_WAIT] = round(waited, 3)
        result = self._attempts.succeeded(request, result, tally, began)
        return await self._results.kept(result, request.result_limit)


def batched_failure(error: ApplicationError) -> BatchedFailure:
    """A failed attempt as `report_failure` raised it, as data for the workflow."""
    delay = error.next_retry_delay
    return BatchedFailure(
        type=error.type or "",
        message=error.message,
        non_retryable=error.non_retryable,
        details=list(error.details),
        retry_after_s=None if delay is None else delay.total_seconds(),
    )


def placed(registry: AgentRegistry, request: AgentRequest) -> None:
    """The first step, for a run its start placed (none else): `misplaced`, not retried, when
    this worker would not run the agent where the run came (`claim_holds`)."""
    if request.placed is None or claim_holds(request.placed, registry.placement(request.agent)):
        return
    raise failure(
        FailureType.MISPLACED,
        f"agent {request.agent!r} does not run on the workflow's queue, where its saga's start "
        "placed it: its runs go to its own queue",
        non_retryable=True,
    )


def share(
    local_shares: LocalShares | None, request: AgentRequest
) -> contextlib.AbstractContextManager[None]:
    """Step 0, for a local run: the agent's share of the worker's local activity slots
    (`local_share_full` when the agent holds it all elsewhere); nothing for an activity task."""
    return (
        local_shares.holding(request.agent)
        if local_shares is not None
        else contextlib.nullcontext()
    )


def admit(
    pools: AgentPools | None, request: AgentRequest
) -> contextlib.AbstractAsyncContextManager[float]:
    """Step 1: a permit of the request's agent's pool around the rest of the run (the permit
    goes back when it ends), giving the seconds the run waited for it; nothing when the
    worker has no pools."""
    return pools.holding(request) if pools is not None else contextlib.nullcontext(0.0)


def guard(
    breakers: Breakers | None, request: AgentRequest
) -> contextlib.AbstractAsyncContextManager[None]:
    """Step 2: the request's agent's circuit breaker around the rest of the run (it reports how
    the run ended to the agent's ledger); nothing when the worker watches no breakers."""
    return breakers.watching(request) if breakers is not None else contextlib.nullcontext()


@dataclass(frozen=True)
class Resolved:
    """What the request names, found: the function of its agent's kind, and its inputs as
    data."""

    agent: AgentFn
    inputs: dict[str, Any]
    scratchpad: Path | None = None


async def resolve(registry: AgentRegistry, results: ResultStore, request: AgentRequest) -> Resolved:
    """Step 3: the agent the request names (or the declaration it carries inline, if the
    worker's settings allow that kind from outside; else a non-retryable `agent_not_allowed`),
    and its inputs, those stored by reference read from the payload store."""
    agent = _agent(registry, request.agent, request.config)
    scratchpad = shared_scratchpad(registry.settings.scratchpad_root, request.scratchpad)
    return Resolved(agent, await results.resolved(request.inputs), scratchpad)


def shared_scratchpad(root: str | None, relative: str | None) -> Path | None:
    """The plan's scratchpad on this worker, made if missing: `relative` under the worker's
    own root, or None without a root, or when the path would leave it."""
    if root is None or relative is None:
        return None
    base = Path(root).resolve()
    directory = (base / relative).resolve()
    if not directory.is_relative_to(base) or directory == base:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _agent(registry: AgentRegistry, name: str, inline: AgentConfig | None) -> AgentFn:
    if inline is None:
        return registry.get(name)
    if refusal := registry.settings.inline_refusal(name, inline):
        raise failure(FailureType.AGENT_NOT_ALLOWED, refusal, non_retryable=True)
    try:
        return agent_from_config(name, inline, registry.settings)
    except SpecError as error:
        raise failure(FailureType.INVALID_SPEC, str(error), non_retryable=True) from None


async def run(resolved: Resolved, request: AgentRequest, tally: RunCounter) -> Output:
    """Step 4: the agent called on the request's event, ended as its own `timeout` a little
    before the run's time limit when the run counts its retries (`within_time_limit`)."""
    context = _run_context(request, tally.attempt, resolved)
    output = await tally.within_time_limit(resolved.agent(request.event, context))
    return with_outbox(output, context)


def with_outbox(output: Output, context: AgentContext) -> Output:
    """The output with what the agent asked to `send` through its context, after any its
    output's own `send` key holds."""
    if not context.outbox:
        return output
    sent = [message.model_dump() for message in context.outbox]
    document = dict(output or {})
    document["send"] = [*document.get("send", []), *sent]
    return document


def _run_context(request: AgentRequest, attempt: int, resolved: Resolved) -> AgentContext:
    """What the agent is told of its run; its progress and heartbeats become the activity's."""
    info = activity.info()
    return AgentContext(
        agent=request.agent,
        attempt=attempt,
        idempotency_key=request.idempotency_key or f"{info.workflow_id}/{info.activity_id}",
        inputs=resolved.inputs,
        scratchpad=resolved.scratchpad,
        reporter=ProgressReporter(_heartbeat_from_any_thread()),
        tokens=request.tokens,
        effort=request.effort,
        messages=request.messages,
        rewind_of=request.rewind_of,
    )


def _heartbeat_from_any_thread() -> Callable[..., None]:
    """The activity's heartbeat, callable from the thread a plain `def` agent runs in as well:
    the SDK's heartbeat must be called on the activity's event loop, so a thread hands it over.
    A local activity has no heartbeat (the server never sees it run): nothing is sent."""
    if activity.info().is_local:
        return _no_heartbeat
    loop = asyncio.get_running_loop()

    def send(*details: Any) -> None:
        if _running_loop() is loop:
            activity.heartbeat(*details)
        else:
            context = contextvars.copy_context()  # the activity's, which to_thread carries
            loop.call_soon_threadsafe(activity.heartbeat, *details, context=context)

    return send


def _no_heartbeat(*details: Any) -> None:
    """A local run's progress and heartbeats: it has none the server would keep."""


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def result_of(
    registry: AgentRegistry, request: AgentRequest, output: Output, duration_ms: float, attempt: int
) -> AgentResult:
    """Step 5: the agent's output as the run's result, with what its declaration
    lets it publish; a non-retryable `invalid_payload` when the output does not validate."""
    try:
        may_publish = registry.publishes_allowed(request.agent, request.config)
        return AgentResult.from_output(
            request.agent, output, duration_ms, attempt, may_publish=may_publish
        )
    except ValidationError as error:
        raise failure(
            FailureType.INVALID_PAYLOAD,
            f"{request.agent} returned a result that does not validate: {error}",
            non_retryable=True,
        ) from None


def report_failure(error: Exception, request: AgentRequest, tally: RunCounter) -> NoReturn:
    """Step 6, for an attempt that failed: raises what the workflow is told. A gate's refusal
    (the agent was not called) comes back at once when the workflow takes refusals back
    (`gates_return`), else is counted as turned away and retried here; any other failure is
    the agent's, classified and counted in the run's tally."""
    if not isinstance(error, ApplicationError) or error.type not in GATE_FAILURES:
        raise tally.failed(_classified(error, request, tally.attempt)) from error
    if request.gates_return:
        raise _gate_refusal(error, tally.attempt) from None
    tally.turned_away()
    raise error


def _classified(error: Exception, request: AgentRequest, attempt: int) -> ApplicationError:
    """A typed failure carrying its attempt (for the dead-letter queue), with the
    `retry_on` applied (a failure type outside a non-empty list is not retried), and the delay
    before its retry: the agent's own (Retry-After), else the policy's backoff spread by the
    request's jitter."""
    failure_type = failure_type_of(error)
    retry_on = request.retry_on
    if isinstance(error, ApplicationError):
        non_retryable, delay, message = error.non_retryable, error.next_retry_delay, error.message
    else:
        non_retryable, delay, message = False, None, str(error)
    return failure(
        failure_type,
        message,
        {"attempt": attempt},
        non_retryable=non_retryable or bool(retry_on and failure_type not in retry_on),
        retry_after=delay or _jittered(request, attempt),
    )


def _jittered(request: AgentRequest, attempt: int) -> timedelta | None:
    """The delay before the retry of failed attempt `attempt` (the run's, not the server's:
    attempts a gate turned away or an outage lost are not counted), by the policy's backoff
    spread by the request's jitter; None (the server's own) for a request that neither counts
    its attempts, nor asks for jitter, nor comes after attempts of an execution before (a local
    run's first attempt in its batch): the server's backoff would start over from its own
    first attempt."""
    policy = activity.info().retry_policy
    counted = request.budget is not None or request.attempts_before > 0
    if policy is None or (request.jitter is None and not counted):
        return None
    return retry_delay(
        attempt,
        request.jitter or NO_JITTER,
        initial=policy.initial_interval,
        coefficient=policy.backoff_coefficient,
        maximum=policy.maximum_interval,
    )


def _gate_refusal(error: ApplicationError, attempt: int) -> ApplicationError:
    """A breaker's or pool's refusal handed back to the workflow at once (not retried here):
    the workflow waits or sends the run elsewhere, and this attempt is not one of the run's."""
    delay = error.next_retry_delay or timedelta(seconds=1)
    refusal = GateRefusal(attempt=attempt, retry_after_s=delay.total_seconds())
    return failure(error.type or "", error.message, refusal.model_dump(), non_retryable=True)
