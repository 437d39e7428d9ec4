"""The seed's retry timeline on the time-skipping server: attempts at 0s, +1s, +2s, +4s."""

import asyncio

from temporalio.testing import WorkflowEnvironment

from models.saga import SagaSpec, SagaStatus
from starter import api
from tests.agents import AttemptRecorder
from worker import build_worker


async def test_exponential_backoff_spaces_attempts_as_in_the_seed(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    recorder = AttemptRecorder(failures=3, clock=time_env.get_current_time)
    spec = SagaSpec.model_validate(
        {
            "saga_id": f"retry-{task_queue}",
            "steps": [
                {
                    "name": "Flaky",
                    "retry": {
                        "max_retries": 3,
                        "backoff_type": "exponential",
                        "initial_delay": "1s",
                        "max_delay": "30s",
                    },
                }
            ],
        }
    )
    async with build_worker(time_env.client, task_queue, recorder.registry()):
        handle = await api.start_saga(time_env.client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), timeout=60)
    assert state.status == SagaStatus.COMPLETED
    assert len(recorder.started) == 4
    gaps = [
        (later - earlier).total_seconds()
        for earlier, later in zip(recorder.started, recorder.started[1:], strict=False)
    ]
    assert [round(gap) for gap in gaps] == [1, 2, 4]


async def test_exhausted_retries_fail_the_step_after_max_retries_plus_one_attempts(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    recorder = AttemptRecorder(failures=10, clock=time_env.get_current_time)
    spec = SagaSpec.model_validate(
        {
            "saga_id": f"retry-exhausted-{task_queue}",
            "steps": [{"name": "Flaky", "retry": {"max_retries": 3, "initial_delay": "1s"}}],
        }
    )
    async with build_worker(time_env.client, task_queue, recorder.registry()):
        handle = await api.start_saga(time_env.client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), timeout=60)
    assert state.status == SagaStatus.COMPENSATED
    assert len(recorder.started) == 4
