"""The retry timeline on the time-skipping server: attempts at 0s, +1s, +2s, +4s. The step's
agent runs locally: each retry waits on a workflow timer of its backoff, which the server fires
at once."""

import asyncio
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.starter import api
from coord.worker import build_worker
from tests.agents import AttemptRecorder

SEED_RETRY = {
    "max_retries": 3,
    "backoff_type": "exponential",
    "initial_delay": "1s",
    "max_delay": "30s",
    "jitter": "none",
}


async def run_flaky_step(
    env: WorkflowEnvironment,
    task_queue: str,
    recorder: AttemptRecorder,
    retry: dict[str, Any],
    before: tuple[str, ...] = (),
) -> tuple[WorkflowHandle[Any, Any], SagaState]:
    """A saga of the `Flaky` step, after the demo steps `before` (which run its first attempt
    with theirs, in one batch)."""
    steps = [{"name": name} for name in before] + [{"name": "Flaky", "retry": retry}]
    spec = SagaSpec.model_validate({"saga_id": f"retry-{task_queue}", "steps": steps})
    async with build_worker(env.client, task_queue, recorder.registry()):
        handle = await api.start_saga(env.client, spec, queue=task_queue)
        return handle, await asyncio.wait_for(api.saga_outcome(handle), timeout=60)


@pytest.mark.parametrize("before", [(), ("BuildArtifact",)], ids=["alone", "after-a-batch"])
async def test_exponential_backoff_spaces_attempts_as_in_the_seed(
    time_env: WorkflowEnvironment, task_queue: str, before: tuple[str, ...]
) -> None:
    """After a batch, the first wait is the workflow's and the later ones the worker's, which
    counted its attempts from the one after the batch (1, 1, 2 s) until it was told of it."""
    recorder = AttemptRecorder(failures=3)
    handle, state = await run_flaky_step(time_env, task_queue, recorder, SEED_RETRY, before)
    assert state.status == SagaStatus.COMPLETED
    assert recorder.attempts == [1, 2, 3, 4]
    waits = [
        event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds()
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]
    assert waits == [1, 2, 4]


async def test_exhausted_retries_fail_the_step_after_max_retries_plus_one_attempts(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    recorder = AttemptRecorder(failures=10)
    _, state = await run_flaky_step(time_env, task_queue, recorder, SEED_RETRY)
    assert state.status == SagaStatus.COMPENSATED
    assert len(recorder.attempts) == 4


async def test_no_retry_on_types_fail_after_one_attempt(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    recorder = AttemptRecorder(failures=10)
    _, state = await run_flaky_step(
        time_env, task_queue, recorder, {**SEED_RETRY, "no_retry_on": ["RuntimeError"]}
    )
    assert state.status == SagaStatus.COMPENSATED
    assert len(recorder.attempts) == 1


async def test_retry_on_list_stops_retrying_other_failure_types(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    recorder = AttemptRecorder(failures=10)
    _, state = await run_flaky_step(
        time_env, task_queue, recorder, {**SEED_RETRY, "retry_on": ["timeout", "temporary_failure"]}
    )
    assert state.status == SagaStatus.COMPENSATED
    assert len(recorder.attempts) == 1
