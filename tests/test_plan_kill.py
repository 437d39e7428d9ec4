"""A worker SIGKILLed mid-plan: a new worker process finishes the plan from its history, every
task's agent completing once and the record showing each task's way through the states."""

import asyncio
import uuid
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import Client

from coord.models.plan.spec import PlanSpec, PlanStatus, TaskState
from coord.workflows.plan.graph import TaskGraph
from tests.test_worker_kill import completed_activities, wait_running
from tests.workers import worker_process

HEARTBEAT = {"heartbeat_timeout": "1s", "timeout": "30s"}
"""Agents running when the worker dies are retried once their heartbeat is missed, not after
their whole timeout."""


async def test_a_worker_killed_mid_plan_the_next_one_finishes_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    slow = {"inject": {"slow": {"backend-architect": 3}}}
    spec = PlanSpec.model_validate(
        {
            "plan_id": f"kill-{uuid.uuid4().hex[:8]}",
            "max_workers": 2,
            "tasks": [
                {"id": "story", "agent": "product-strategist", **HEARTBEAT},
                {
                    "id": "api",
                    "agent": "backend-architect",
                    "depends_on": ["story"],
                    "input": slow,
                    **HEARTBEAT,
                },
                {"id": "ux", "agent": "ux-designer", "depends_on": ["story"], **HEARTBEAT},
                {"id": "tests", "agent": "test-engineer", "depends_on": ["api", "ux"], **HEARTBEAT},
            ],
        }
    )
    log = tmp_path / "workers.log"
    async with worker_process(client, task_queue, log) as first:
        handle = await client.start_workflow(
            TaskGraph.run, spec.model_dump(mode="json"), id=spec.workflow_id, task_queue=task_queue
        )
        await wait_running(client, handle, "api:")
        await first.kill()
    async with worker_process(client, task_queue, log):
        state = await asyncio.wait_for(handle.result(), 90)
    assert state.status == PlanStatus.COMPLETED
    assert state.summary == "4 of 4 succeeded"
    completed = await completed_activities(client, handle)
    assert completed == Counter(
        {
            "story: product-strategist": 1,
            "api: backend-architect": 1,
            "ux: ux-designer": 1,
            "tests: test-engineer": 1,
        }
    )
    record = {task.id: task for task in state.tasks}
    # The attempt the dead worker lost is not one of the agent's: it spent none of its retries.
    assert record["api"].attempts == 1
    assert [(t.state, t.attempt) for t in record["api"].transitions] == [
        (TaskState.PENDING, None),
        (TaskState.READY, None),
        (TaskState.RUNNING, 1),
        (TaskState.SUCCEEDED, None),
    ]


@pytest.mark.slow
async def test_a_worker_killed_mid_review_the_next_one_finishes_the_gate(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The worker dies while the reviewer judges round 1: the next worker reviews it again
    (a retry of the same review, not a new round), fixes the task once with the notes, and
    passes both stages; each review round is recorded once."""
    inject = {"reject": ["reviewer"], "slow": {"reviewer": 2}}
    gate_heartbeat = {"heartbeat_timeout": "2s", "timeout": "30s"}
    spec = PlanSpec.model_validate(
        {
            "plan_id": f"kill-review-{uuid.uuid4().hex[:8]}",
            "tasks": [
                {
                    "id": "fix",
                    "agent": "developer",
                    "review": {"reviewer": "reviewer"},
                    "input": {"inject": inject},
                    **gate_heartbeat,
                },
                {"id": "after", "agent": "code-analyzer", "depends_on": ["fix"], **gate_heartbeat},
            ],
        }
    )
    log = tmp_path / "workers.log"
    async with worker_process(client, task_queue, log) as first:
        handle = await client.start_workflow(
            TaskGraph.run, spec.model_dump(mode="json"), id=spec.workflow_id, task_queue=task_queue
        )
        await wait_running(client, handle, "fix review spec_compliance #1")
        await first.kill()
    async with worker_process(client, task_queue, log):
        state = await asyncio.wait_for(handle.result(), 90)
    assert state.status == PlanStatus.COMPLETED
    assert await completed_activities(client, handle) == Counter(
        {
            "fix: developer": 2,
            "fix review spec_compliance #1": 1,
            "fix review spec_compliance #2": 1,
            "fix review code_quality #2": 1,
            "after: code-analyzer": 1,
        }
    )
    fix = next(task for task in state.tasks if task.id == "fix")
    assert fix.fixes == 1
    assert [(r.round, r.stage, r.passed) for r in fix.reviews] == [
        (1, "spec_compliance", False),
        (2, "spec_compliance", True),
        (2, "code_quality", True),
    ]
    assert fix.result is not None
    assert fix.result["fixed"] == ["the null-check fix has no regression test"]
