"""A plan task's own `timeout` on the time-skipping server: an agent that never answers is timed
out by Temporal, retried as the task's retry policy says (the backoff between attempts skipped),
then ends `error` (`timeout`), its dependents skipped while another branch finishes. A task that
sets no timeout gets 300 s.

The time-skipping server does not skip time while an activity is scheduled or running (Temporal's
testing guide: "time doesn't skip while Activities ... are executing"), so the attempts' own
timeout is short (it passes in real time) and the skipped part is the retry backoff, an hour."""

import asyncio
import uuid
from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from coord.models.mesh.retry import agent_time_limit
from coord.models.plan.spec import PlanStatus, TaskState
from coord.models.wire.contract import FailureType
from coord.worker import build_worker
from tests.test_plan import PlanAgents, plan, start
from tests.test_plan_gates import task_of

SEED_TIMEOUT = timedelta(seconds=300)
ATTEMPT_TIMEOUT = timedelta(seconds=2)
BACKOFF = timedelta(hours=1)


async def test_a_task_past_its_timeout_is_retried_as_its_policy_says_then_skips_dependents(
    time_env: WorkflowEnvironment,
) -> None:
    task_queue = f"tq-{uuid.uuid4()}"
    retry = {"max_retries": 1, "initial_delay": "1h", "max_delay": "1h"}
    spec = plan(
        {"id": "stuck", "agent": "hold", "timeout": "2s", "retry": retry},
        {"id": "after", "depends_on": ["stuck"]},
        {"id": "other"},
    )
    agents = PlanAgents()
    try:
        async with build_worker(time_env.client, task_queue, agents.registry()):
            handle = await start(time_env.client, task_queue, spec)
            state = await asyncio.wait_for(handle.result(), 60)
    finally:
        agents.released.set()
    stuck = task_of(state, "stuck")
    assert stuck.error is not None and stuck.error.type == FailureType.TIMEOUT
    assert stuck.attempts == 2
    assert [(t.state, t.attempt) for t in stuck.transitions] == [
        (TaskState.PENDING, None),
        (TaskState.READY, None),
        (TaskState.RUNNING, 1),
        (TaskState.FAILED, 1),
        (TaskState.RUNNING, 2),
        (TaskState.FAILED, 2),
        (TaskState.ERROR, None),
    ]
    attempt_time = agent_time_limit(ATTEMPT_TIMEOUT)  # the worker ends it a little before
    assert stuck.duration is not None and stuck.duration >= BACKOFF + 2 * attempt_time
    after = task_of(state, "after")
    assert (after.state, after.skipped_because, after.attempts) == (TaskState.SKIPPED, "stuck", 0)
    assert task_of(state, "other").state == TaskState.SUCCEEDED
    assert state.status == PlanStatus.PARTIAL
    assert state.summary == "1 of 3 succeeded, 1 error, 1 skipped"
    timeouts = {
        event.activity_task_scheduled_event_attributes.activity_id: (
            event.activity_task_scheduled_event_attributes.start_to_close_timeout.ToTimedelta()
        )
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert timeouts == {"stuck/run/1": ATTEMPT_TIMEOUT, "other/run/1": SEED_TIMEOUT}
