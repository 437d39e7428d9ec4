"""The hand-written Feature Deployment saga the saga benches measure the project against, as
temporalio/samples-python writes one: the workflows in a module of their own (the sandbox
imports it afresh for every run, so it holds only them) and their activities imported passed
through (`bench.baseline_steps`)."""

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from bench.baseline_steps import (
        BASELINE_STEPS,
        COMPENSATION_RETRY,
        PRODUCTION_TIMEOUT,
        RETRY,
        STEP_TIMEOUT,
        Step,
        steps_queue,
    )


async def _run(
    step: Step,
    payload: dict[str, Any],
    timeout: timedelta = STEP_TIMEOUT,
    retry: RetryPolicy = RETRY,
    *,
    elsewhere: bool = False,
) -> dict[str, Any]:
    """A step as a regular activity: on the saga's own queue, or `elsewhere` on the queue
    another worker serves (`steps_queue`)."""
    queue = steps_queue(workflow.info().task_queue) if elsewhere else None
    return await workflow.execute_activity(
        step, payload, task_queue=queue, start_to_close_timeout=timeout, retry_policy=retry
    )


async def _run_local(
    step: Step,
    payload: dict[str, Any],
    timeout: timedelta = STEP_TIMEOUT,
    retry: RetryPolicy = RETRY,
) -> dict[str, Any]:
    return await workflow.execute_local_activity(
        step, payload, start_to_close_timeout=timeout, retry_policy=retry
    )


Runner = Callable[..., Awaitable[dict[str, Any]]]
"""How a step runs: `_run`, `_run_local`, or `_run` elsewhere."""


async def _saga(run: Runner, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The saga as temporalio/samples-python writes one: compensations kept in a list, each
    pushed before its step runs, unwound in reverse when a step fails."""
    compensations: list[Step] = []
    results: list[dict[str, Any]] = []
    step = BASELINE_STEPS
    try:
        results.append(await run(step["BuildArtifact"], payload))
        results.append(await run(step["RunTests"], payload))
        compensations.append(step["RemoveFromStaging"])
        results.append(await run(step["DeployToStaging"], payload))
        results.append(await run(step["RunE2ETests"], payload))
        compensations.append(step["RollbackProduction"])
        results.append(await run(step["DeployToProduction"], payload, PRODUCTION_TIMEOUT))
    except Exception:
        for compensation in reversed(compensations):
            await run(compensation, payload, retry=COMPENSATION_RETRY)
        raise
    return results


@workflow.defn(name="BaselineSaga")
class BaselineSaga:
    """The hand-written saga, its steps regular activities."""

    @workflow.run
    async def run(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return await _saga(_run, payload)


@workflow.defn(name="BaselineQueuesSaga")
class BaselineQueuesSaga:
    """The hand-written saga, its steps regular activities on another queue, served by another
    worker."""

    @workflow.run
    async def run(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return await _saga(partial(_run, elsewhere=True), payload)


@workflow.defn(name="BaselineLocalSaga")
class BaselineLocalSaga:
    """The hand-written saga, its steps local activities."""

    @workflow.run
    async def run(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return await _saga(_run_local, payload)
