"""The agent registry and the `run_agent` activity.

Workflows never call agent code directly: they ask `run_agent` to run an agent by name (or by
the declaration a spec carries inline), so one activity serves every kind of agent."""

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from coord.activities.kinds import agent_from_config
from coord.activities.mesh.breakers import Breakers
from coord.activities.mesh.pools import AgentPools
from coord.activities.mesh.result_refs import ResultStore
from coord.activities.mesh.run_tally import RunCounter
from coord.models import calls as refs
from coord.models.mesh.agents import (
    AgentContext,
    AgentFn,
    AgentRegistry,
    AgentRequest,
    AgentResult,
    ProgressReporter,
)
from coord.models.mesh.config import AgentConfig
from coord.models.mesh.runs import GATE_FAILURES, NO_JITTER, GateRefusal, retry_delay
from coord.models.wire.contract import FailureType, failure, failure_type_of
from coord.models.wire.specs import SpecError


def resolve(registry: AgentRegistry, name: str, inline: AgentConfig | None) -> AgentFn:
    """The agent a request names, or the inline declaration it carries if the worker's settings
    allow that kind from outside; else a non-retryable `agent_not_allowed`."""
    if inline is None:
        return registry.get(name)
    if refusal := registry.settings.inline_refusal(name, inline):
        raise failure(FailureType.AGENT_NOT_ALLOWED, refusal, non_retryable=True)
    try:
        return agent_from_config(name, inline, registry.settings)
    except SpecError as error:
        raise failure(FailureType.INVALID_SPEC, str(error), non_retryable=True) from None


class AgentActivities:
    def __init__(
        self,
        registry: AgentRegistry,
        breakers: Breakers | None = None,
        pools: AgentPools | None = None,
    ) -> None:
        """`breakers`: the agents' circuit breakers (none: runs are not watched); `pools`: the
        pools of agents declaring max_concurrent (none: only the worker's slots limit them)."""
        self._registry = registry
        self._results = ResultStore()
        self._breakers = breakers
        self._pools = pools

    @activity.defn(name=refs.RUN_AGENT.name)
    async def run_agent(self, request: AgentRequest) -> AgentResult:
        counter = RunCounter(request.agent, request.budget, before=request.attempts_before)
        attempt = counter.attempt
        activity.logger.info(
            "agent run",
            extra={"agent": request.agent, "correlation_id": request.event.event.correlation_id},
        )
        try:
            async with self._pooled(request), self._watching(request):
                started = time.monotonic()  # the run's duration leaves out its wait for a permit
                agent = resolve(self._registry, request.agent, request.config)
                output = await counter.within_time_limit(
                    agent(request.event, await self._context(request, attempt))
                )
        except ApplicationError as error:
            if error.type not in GATE_FAILURES:
                raise counter.failed(_classified(error, request, attempt)) from error
            if request.gates_return:  # the breaker's or the pool's: nothing was called
                raise _gate_refusal(error, attempt) from None
            counter.turned_away()
            raise
        except Exception as error:
            raise counter.failed(_classified(error, request, attempt)) from error
        duration_ms = (time.monotonic() - started) * 1000
        try:
            may_publish = self._registry.publishes_allowed(request.agent, request.config)
            result = AgentResult.from_output(
                request.agent, output, duration_ms, attempt, may_publish=may_publish
            )
        except ValidationError as error:
            raise failure(
                FailureType.INVALID_PAYLOAD,
                f"{request.agent} returned a result that does not validate: {error}",
                non_retryable=True,
            ) from None
        return await self._results.kept(result, request.result_limit)

    def _pooled(self, request: AgentRequest) -> contextlib.AbstractAsyncContextManager[None]:
        if self._pools is None:
            return contextlib.nullcontext()
        return self._pools.holding(request)

    def _watching(self, request: AgentRequest) -> contextlib.AbstractAsyncContextManager[None]:
        if self._breakers is None:
            return contextlib.nullcontext()
        return self._breakers.watching(request)

    async def _context(self, request: AgentRequest, attempt: int) -> AgentContext:
        """What the agent is told of its run; inputs stored by reference arrive as their data."""
        info = activity.info()
        return AgentContext(
            agent=request.agent,
            attempt=attempt,
            idempotency_key=request.idempotency_key or f"{info.workflow_id}/{info.activity_id}",
            inputs=await self._results.resolved(request.inputs),
            reporter=ProgressReporter(_heartbeat_from_any_thread()),
            tokens=request.tokens,
        )


def _heartbeat_from_any_thread() -> Callable[..., None]:
    """The activity's heartbeat, callable from the thread a plain `def` agent runs in as well:
    the SDK's heartbeat must be called on the activity's event loop, so a thread hands it over."""
    loop = asyncio.get_running_loop()

    def send(*details: Any) -> None:
        if _running_loop() is loop:
            activity.heartbeat(*details)
        else:
            context = contextvars.copy_context()  # the activity's, which to_thread carries
            loop.call_soon_threadsafe(activity.heartbeat, *details, context=context)

    return send


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _classified(error: Exception, request: AgentRequest, attempt: int) -> ApplicationError:
    """A typed failure carrying its attempt (for the dead-letter queue), with the seed's
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
    its attempts nor asks for jitter."""
    policy = activity.info().retry_policy
    if policy is None or (request.jitter is None and request.budget is None):
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
