"""Records keep the times runs had, not the times their outcomes reached the workflow (whose
clock is the start of the workflow task it is in): a saga's steps run ahead together are each
recorded when it ended; a plan task's attempts each with when it failed and why, whether they
ran in one local activity or as activity tasks; and a run's wait in line for a permit of its
agent's pool, which ended in a permit, is in the run's record and not in its duration. The
worker reports them with the outcome (coord.models.mesh.attempts), so a replay reads the
same."""

import asyncio
import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from coord.activities.kinds import load_agents
from coord.activities.mesh.run_tally import carried
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry, AgentResult
from coord.models.mesh.attempts import MIN_POOL_WAIT, attempt_times
from coord.models.mesh.lifecycle import RunFailure
from coord.models.mesh.runs import RunDetour
from coord.models.plan.spec import PlanStatus, TaskRecord, TaskState
from coord.models.saga.spec import SagaStatus
from coord.models.wire.contract import FailureType
from coord.starter import api
from coord.worker import build_worker
from tests.agents import RecordingAgents
from tests.conftest import feature_deployment
from tests.test_agent_placement import _replays_from_every_task
from tests.test_plan import PlanAgents
from tests.test_plan_gates import outcome, plan, start, task_of
from tests.test_plan_model import T0
from tests.test_plan_model import model as plan_model

SLOW_S = 2.0
RETRY = {"max_retries": 2, "initial_delay": "500ms", "max_delay": "500ms", "jitter": "none"}
"""Three attempts, half a second apart."""
POOLED_S = 1.0


def _times_of(record: TaskRecord, state: TaskState) -> list[tuple[int | None, str | None]]:
    return [(t.attempt, t.reason) for t in record.transitions if t.state == state]


def _in_order(record: TaskRecord) -> None:
    times = [t.at for t in record.transitions]
    assert times == sorted(times), record.transitions


async def test_steps_run_ahead_are_each_recorded_when_they_ended(
    client: Client, task_queue: str
) -> None:
    """The first four steps run ahead in one batch, the fourth slow: the three before it ended
    two seconds before the batch did, and their events say so; every event in order."""
    spec = feature_deployment(input={"inject": {"slow": {"RunE2ETests": SLOW_S}}})
    async with build_worker(client, task_queue, RecordingAgents().registry()):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
        history = await handle.fetch_history()
    assert state.status == SagaStatus.COMPLETED
    at = {row.event: row.time for row in state.events}
    times = [row.time for row in state.events]
    assert times == sorted(times)
    for early in ("ArtifactBuilt", "TestsPassed", "StagingDeployed"):
        assert at["E2EPassed"] - at[early] >= timedelta(seconds=SLOW_S - 0.3), (early, at)
    assert at["E2EPassed"] - at["ArtifactBuilt"] < timedelta(seconds=SLOW_S + 1)
    await _replays_from_every_task(history)


def _flaky_registry() -> AgentRegistry:
    """`flaky` fails its first two attempts, a python agent run locally; `work` answers."""
    registry = AgentRegistry()

    @registry.register("flaky")
    async def flaky(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        if context.attempt <= 2:
            message = f"flaky on attempt {context.attempt}"
            raise ApplicationError(message, type=FailureType.TEMPORARY_FAILURE)
        return {"attempt": context.attempt}

    return registry


async def test_a_local_runs_attempts_are_each_recorded_when_they_failed_and_why(
    client: Client, task_queue: str
) -> None:
    """A local run that succeeds at its third attempt, half a second after each failure, all
    in one local activity: each attempt's failure has its time and reason, each retry its
    start, and the task took the second its attempts did."""
    spec = plan("plan-attempt-times", {"id": "a", "agent": "flaky", "retry": RETRY})
    async with build_worker(client, task_queue, _flaky_registry()):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
        history = await handle.fetch_history()
    assert state.status == PlanStatus.COMPLETED, state.summary
    task = task_of(state, "a")
    assert _times_of(task, TaskState.FAILED) == [
        (1, "flaky on attempt 1"),
        (2, "flaky on attempt 2"),
    ]
    _in_order(task)
    failed = [t.at for t in task.transitions if t.state == TaskState.FAILED]
    retried = [t.at for t in task.transitions if t.state == TaskState.RUNNING][1:]
    for failure, retry in zip(failed, retried, strict=True):
        assert retry - failure >= timedelta(seconds=0.4), task.transitions
    assert task.duration is not None and task.duration >= timedelta(seconds=0.9)
    await _replays_from_every_task(history)


async def _failed_for_good(client: Client, task_queue: str, *, local: bool) -> TaskRecord:
    spec = plan("plan-failure-times", {"id": "a", "agent": "fail", "retry": RETRY})
    async with build_worker(client, task_queue, PlanAgents(local=local).registry()):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
    return task_of(state, "a")


async def test_a_local_run_failing_for_good_records_each_attempt(
    client: Client, task_queue: str
) -> None:
    task = await _failed_for_good(client, task_queue, local=True)
    reasons = [(n, f"broken on attempt {n}") for n in (1, 2, 3)]
    assert _times_of(task, TaskState.FAILED) == reasons
    assert len({t.at for t in task.transitions if t.state == TaskState.FAILED}) == 3
    _in_order(task)
    assert task.duration is not None and task.duration >= timedelta(seconds=0.9)


async def test_an_activity_tasks_attempts_are_each_recorded_when_they_failed_and_why(
    client: Client, task_queue: str
) -> None:
    """The same run as activity tasks, retried by the server: each attempt's report travels
    to the next in its heartbeats' details (whichever worker runs it), so attempt 1's failure
    and attempt 2's retry are not stamped with the run's end."""
    task = await _failed_for_good(client, task_queue, local=False)
    reasons = [(n, f"broken on attempt {n}") for n in (1, 2, 3)]
    assert _times_of(task, TaskState.FAILED) == reasons
    assert len({t.at for t in task.transitions if t.state == TaskState.FAILED}) == 3
    _in_order(task)


def test_reported_attempts_that_do_not_read_are_left_out() -> None:
    good = {"attempt": 1, "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:00:01Z"}
    assert list(attempt_times({"run_attempts": [good, {"attempt": "x"}, 3]})) == [1]
    assert attempt_times({"run_attempts": "no"}) == {} == attempt_times(None)
    heartbeat = ("progress", {"run_tally": {"failures": 1}, "run_attempts": [good, 3]})
    assert carried(heartbeat) == [good], "the attempts the last detail carries, as data"
    assert carried(("progress", {"run_tally": {}})) == [] == carried(())


async def pooled(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """Holds its permit a second."""
    await asyncio.sleep(POOLED_S)
    return {}


async def test_a_wait_for_a_pools_permit_is_a_detour_not_counted_in_the_runs_duration(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Three tasks of an agent with `max_concurrent: 1`: they run one after the other; the two
    that waited in line for the permit have the wait in their `detours`, and their duration is
    their own second."""
    agents_file = tmp_path / "agents.yaml"
    declared = {"kind": "python", "callable": f"{__name__}:pooled", "max_concurrent": 1}
    agents_file.write_text(json.dumps({"agents": {"pooled": declared}}))
    registry = load_agents(agents_file, AgentRegistry())
    tasks = [{"id": f"t{n}", "agent": "pooled"} for n in range(3)]
    spec = plan("plan-pool-waits", *tasks, max_workers=3)
    async with build_worker(client, task_queue, registry):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
        history = await handle.fetch_history()
    assert state.status == PlanStatus.COMPLETED, state.summary
    waits = sorted(
        sum(d.waited_s or 0 for d in record.detours if d.reason == FailureType.POOL_FULL)
        for record in state.tasks
    )
    assert waits[0] < MIN_POOL_WAIT.total_seconds(), "the first took the permit at once"
    assert waits[1] >= POOLED_S * 0.8 and waits[2] >= POOLED_S * 1.8, waits
    for record in state.tasks:
        assert all(d.action == "waited" for d in record.detours)
        assert record.duration is not None and record.duration < timedelta(seconds=POOLED_S * 1.6)
    await _replays_from_every_task(history)


def _reported(*attempts: tuple[int, float, float, str]) -> dict[str, Any]:
    """`run_attempts` as a worker reports them: (attempt, began, ended, message) in seconds
    after T0; a message says the attempt failed."""
    return {
        "run_attempts": [
            {
                "attempt": n,
                "started_at": (T0 + timedelta(seconds=began)).isoformat(),
                "ended_at": (T0 + timedelta(seconds=ended)).isoformat(),
                "type": "temporary_failure" if message else "",
                "message": message,
            }
            for n, began, ended, message in attempts
        ]
    }


def test_a_plan_stamps_each_attempt_as_its_worker_reported_it_and_its_dependents_after() -> None:
    """All at the workflow's T0 (one workflow task): attempt 1 failed at +1 s, attempt 2 began
    at +1.5 s and succeeded at +2 s. The task ends at +2 s and its dependent is ready then."""
    plan = plan_model({"id": "a"}, {"id": "b", "depends_on": ["a"]})
    plan.graph.take_startable()
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    metadata = {"attempt": 2, **_reported((1, 0, 1, "boom"), (2, 1.5, 2, ""))}
    plan.runs.run_succeeded("a", T0, AgentResult(agent="work", metadata=metadata))
    plan.graph.task_succeeded("a", T0)
    moves = [(t.state, t.attempt, t.reason, t.at - T0) for t in plan.record("a").transitions]
    assert moves[2:] == [
        (TaskState.RUNNING, 1, None, timedelta(0)),
        (TaskState.FAILED, 1, "boom", timedelta(seconds=1)),
        (TaskState.RUNNING, 2, None, timedelta(seconds=1.5)),
        (TaskState.SUCCEEDED, None, None, timedelta(seconds=2)),
    ]
    assert plan.record("a").duration == timedelta(seconds=2)
    plan.graph.take_startable()
    plan.graph.task_ready("b", T0)
    assert plan.record("b").transitions[-1].at == T0 + timedelta(seconds=2)


def test_a_failure_for_good_is_stamped_when_its_last_attempt_failed_less_the_waits() -> None:
    plan = plan_model({"id": "a"})
    plan.graph.take_startable()
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    wait = RunDetour(at=T0, agent="work", reason="pool_full", action="waited", waited_s=0.5)
    plan.runs.task_detoured("a", wait, None)
    times = attempt_times(_reported((1, 0, 1, "one"), (2, 2, 3, "two")))
    plan.runs.run_failed("a", T0, RunFailure(type="x", message="two", attempts=2, times=times))
    record = plan.record("a")
    failed = [(t.attempt, t.reason, t.at - T0) for t in record.transitions if t.reason]
    assert failed == [
        (1, "one", timedelta(seconds=1)),
        (2, "two", timedelta(seconds=3)),
        (None, "x: two", timedelta(seconds=3)),
    ]
    assert record.duration == timedelta(seconds=2.5), "three seconds, less the wait"


def test_reported_times_earlier_than_the_record_keep_a_tasks_moves_in_order() -> None:
    """A worker whose clock is behind: its times never put a move before the one before it."""
    plan = plan_model({"id": "a"})
    plan.graph.take_startable()
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    early = {"attempt": 2, **_reported((1, -5, -4, "boom"), (2, -3, -2, ""))}
    plan.runs.run_succeeded("a", T0, AgentResult(agent="work", metadata=early))
    assert all(t.at == T0 for t in plan.record("a").transitions[1:])
