"""The plan's scheduler and state machine (`PlanModel` and its parts) and its activity ids,
without a server."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentResult
from coord.models.mesh.attempts import RUN_ATTEMPTS, AttemptTime
from coord.models.mesh.lifecycle import RunFailure
from coord.models.plan.model import PlanModel
from coord.models.plan.spec import (
    ActivityKey,
    ActivityProgress,
    PlanSpec,
    PlanStatus,
    TaskError,
    TaskState,
    Transition,
    as_seen,
    parse_activity_id,
    progress_as_seen,
    review_activity_id,
    run_activity_id,
    verify_activity_id,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(seconds=30)


def test_activity_ids_name_their_task_kind_and_round_and_read_back() -> None:
    assert run_activity_id("build", 1) == "build/run/1"
    assert review_activity_id("build", "code_quality", 2) == "build/review/code_quality/2"
    assert verify_activity_id("build", "reviewer-b", 3) == "build/verify/reviewer-b/3"
    assert parse_activity_id("build/run/1") == ActivityKey("build", "run", 1)
    assert parse_activity_id("build/verify/reviewer-b/3") == ActivityKey(
        "build", "verify", 3, "reviewer-b"
    )
    for other in ["1", "build/run/x/1", "build/review/2", "build/run/", "build/sleep/1"]:
        assert parse_activity_id(other) is None


def model(*tasks: dict[str, Any], **fields: Any) -> PlanModel:
    for task in tasks:
        task.setdefault("agent", "work")
    spec = PlanSpec.model_validate({"plan_id": "p", "tasks": list(tasks), **fields})
    return PlanModel.begin(spec, T0)


def started(plan: PlanModel) -> list[str]:
    return [task.id for task in plan.graph.take_startable()]


def answer(data: dict[str, Any]) -> AgentResult:
    return AgentResult(agent="work", data=data)


def succeed(plan: PlanModel, task_id: str, **data: Any) -> None:
    plan.graph.task_ready(task_id, T0)
    plan.runs.run_started(task_id, T0)
    plan.runs.run_succeeded(task_id, T0, answer(data))
    plan.graph.task_succeeded(task_id, T0)


def test_tasks_start_once_every_dependency_has_succeeded() -> None:
    plan = model(
        {"id": "a"}, {"id": "b", "depends_on": ["a"]}, {"id": "c", "depends_on": ["a", "b"]}
    )
    assert started(plan) == ["a"]
    assert started(plan) == []
    succeed(plan, "a", n=1)
    assert started(plan) == ["b"]
    succeed(plan, "b", n=2)
    assert started(plan) == ["c"]
    assert plan.requests.agent_request(plan.spec.task("c"), 1, "plan-p").inputs == {
        "a": {"n": 1},
        "b": {"n": 2},
    }


def test_slots_are_capped_and_served_by_priority_then_declaration_order() -> None:
    plan = model(
        {"id": "low", "priority": "low"},
        {"id": "n1"},
        {"id": "n2"},
        {"id": "crit", "priority": "critical"},
        {"id": "high", "priority": "high"},
        max_workers=2,
    )
    started(plan)
    for task in ["low", "n1", "n2", "crit", "high"]:
        plan.request_slot(f"{task}/run/1", task)
    assert not plan.holds_slot("low/run/1")
    assert plan.slots.holders == ["crit/run/1", "high/run/1"]
    order = []
    while plan.slots.holders:
        released = plan.slots.holders[0]
        plan.slots.release(released)
        order.append(released)
        plan.slots.grant()
        assert len(plan.slots.holders) <= 2
    assert order == ["crit/run/1", "high/run/1", "n1/run/1", "n2/run/1", "low/run/1"]


def test_no_slot_is_granted_while_tasks_wait_to_be_launched() -> None:
    """A task that became startable asks for its slot once the workflow launches it: granting
    waits for that, so a critical dependent is not overtaken by a low task already waiting."""
    plan = model(
        {"id": "first"},
        {"id": "low", "priority": "low"},
        {"id": "next", "depends_on": ["first"], "priority": "critical"},
        max_workers=1,
    )
    assert started(plan) == ["first", "low"]
    plan.request_slot("first/run/1", "first")
    plan.request_slot("low/run/1", "low")
    assert plan.holds_slot("first/run/1")
    plan.slots.release("first/run/1")
    succeed(plan, "first")
    assert not plan.holds_slot("low/run/1")
    assert started(plan) == ["next"]
    plan.request_slot("next/run/1", "next")
    assert not plan.holds_slot("low/run/1") and plan.holds_slot("next/run/1")


def test_grantable_says_when_the_plan_would_grant_a_slot() -> None:
    """How the workflow grants (runs after the `plan-slots-granted-by-the-plan` patch): only
    with a request waiting, a slot free, and no task left to launch; `grant` names the
    requests it served, in rank order."""
    plan = model(
        {"id": "first"},
        {"id": "low", "priority": "low"},
        {"id": "next", "depends_on": ["first"], "priority": "critical"},
        max_workers=1,
    )
    assert not plan.grantable()
    started(plan)
    plan.request_slot("low/run/1", "low")
    plan.request_slot("first/run/1", "first")
    assert plan.grantable()
    assert plan.slots.grant() == ["first/run/1"]
    assert not plan.grantable() and plan.slots.grant() == []
    plan.slots.release("first/run/1")
    succeed(plan, "first")
    assert not plan.grantable()
    assert started(plan) == ["next"]
    assert plan.grantable()
    plan.request_slot("next/run/1", "next")
    assert plan.slots.grant() == ["next/run/1"]


def test_a_request_given_up_while_waiting_leaves_the_queue() -> None:
    plan = model({"id": "a"}, {"id": "b"}, max_workers=1)
    started(plan)
    plan.request_slot("a/run/1", "a")
    plan.request_slot("b/run/1", "b")
    assert plan.holds_slot("a/run/1")
    plan.slots.release("b/run/1")
    plan.slots.release("a/run/1")
    assert plan.slots.holders == [] and plan.slots.waiting == []


def test_an_error_skips_its_transitive_dependents_naming_it() -> None:
    plan = model(
        {"id": "a"},
        {"id": "b", "depends_on": ["a"]},
        {"id": "c", "depends_on": ["b"]},
        {"id": "d"},
        {"id": "e", "depends_on": ["d", "b"]},
    )
    assert started(plan) == ["a", "d"]
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    plan.runs.run_failed("a", T1, RunFailure(type="timeout", message="late", attempts=2))
    skipped = [r.id for r in plan.state.tasks if r.state == TaskState.SKIPPED]
    assert skipped == ["b", "c", "e"]
    assert [plan.record(t).skipped_because for t in skipped] == ["a", "a", "a"]
    assert plan.record("a").error == TaskError(type="timeout", message="late")
    assert [(t.state, t.attempt) for t in plan.record("a").transitions] == [
        (TaskState.PENDING, None),
        (TaskState.READY, None),
        (TaskState.RUNNING, 1),
        (TaskState.FAILED, 1),
        (TaskState.RUNNING, 2),
        (TaskState.FAILED, 2),
        (TaskState.ERROR, None),
    ]
    assert not plan.finished()
    succeed(plan, "d")
    assert plan.finished() and started(plan) == []
    state = plan.finish(T1)
    assert state.status == PlanStatus.PARTIAL
    assert state.summary == "1 of 5 succeeded, 1 error, 3 skipped"


@pytest.mark.parametrize(
    ("outcomes", "status"),
    [
        (["ok", "ok"], PlanStatus.COMPLETED),
        (["ok", "error"], PlanStatus.PARTIAL),
        (["error", "error"], PlanStatus.FAILED),
    ],
)
def test_the_plan_outcome(outcomes: list[str], status: PlanStatus) -> None:
    plan = model({"id": "a"}, {"id": "b"})
    for task, outcome in zip(["a", "b"], outcomes, strict=True):
        if outcome == "ok":
            succeed(plan, task)
        else:
            plan.graph.task_error(task, T1, TaskError(type="x", message="y"))
    assert plan.finish(T1).status == status


def test_fail_fast_stops_at_the_first_error_and_cancels_what_waits() -> None:
    plan = model({"id": "a"}, {"id": "b"}, {"id": "c", "depends_on": ["b"]}, fail_fast=True)
    assert started(plan) == ["a", "b"]
    plan.graph.task_ready("b", T0)
    plan.graph.task_error("a", T1, TaskError(type="x", message="y"))
    assert plan.stopping == "fail_fast: task a ended error"
    assert not plan.graph.has_startable()
    plan.cancel_waiting(T1)
    state = plan.finish(T1)
    assert {t.id: t.state for t in state.tasks} == {
        "a": TaskState.ERROR,
        "b": TaskState.CANCELLED,
        "c": TaskState.CANCELLED,
    }
    assert state.status == PlanStatus.FAILED
    assert state.summary == "0 of 3 succeeded, 1 error, 2 cancelled (fail_fast: task a ended error)"


def test_progress_retries_seen_and_details() -> None:
    plan = model({"id": "a", "summary": "write code"}, {"id": "b"}, max_workers=1)
    started(plan)
    for task in ["a", "b"]:
        plan.graph.task_ready(task, T0)
        plan.request_slot(f"{task}/run/1", task)
    assert plan.holds_slot("a/run/1")
    plan.runs.run_started("a", T0)
    assert plan.runs.activity_seen(seen("a/run/1", "Reading runAgent.ts"), T1)
    assert not plan.runs.activity_seen(seen("a/run/1", "Reading runAgent.ts"), T1)
    assert plan.runs.activity_seen(
        seen("a/run/1", "Reading runAgent.ts", attempt=2, failed="boom"), T1
    )
    assert plan.record("a").attempts == 2
    assert plan.record("a").transitions[-2:] == [
        Transition(state=TaskState.FAILED, at=T1, attempt=1, reason="boom"),
        Transition(state=TaskState.RUNNING, at=T1, attempt=2),
    ]
    view = plan.view.progress(T1)
    assert [(r.task, r.summary, r.elapsed_s) for r in view.running] == [
        ("a", "Reading runAgent.ts", 30.0)
    ]
    assert view.counts == {TaskState.READY: 1, TaskState.RUNNING: 1}
    assert view.waiting_for == ["a worker slot (1 waiting, max_workers 1)"]
    assert plan.view.details() == (
        "**Status:** running (1 ready, 1 running)\n\n"
        f"- **a** running since {T0:%Y-%m-%d %H:%M:%S} UTC: Reading runAgent.ts\n\n"
        "**Waiting for:** a worker slot (1 waiting, max_workers 1)"
    )


def test_the_model_reads_back_from_its_json_and_schedules_the_same() -> None:
    plan = model({"id": "a"}, {"id": "b", "depends_on": ["a"]}, {"id": "c"})
    assert started(plan) == ["a", "c"]
    succeed(plan, "a", n=1)
    again = PlanModel.model_validate_json(plan.model_dump_json())
    assert started(again) == ["b"]
    assert again.book.counts() == plan.book.counts()


def seen(
    activity_id: str, progress: str | None = None, attempt: int = 1, failed: str | None = None
) -> ActivityProgress:
    return ActivityProgress(
        activity_id=activity_id, progress=progress, attempt=attempt, last_failure=failed
    )


def test_a_late_read_of_a_run_that_has_ended_changes_nothing() -> None:
    """The reader describes the plan while it goes on: by the time its answer is applied, the
    run it saw retrying may have succeeded, and the task moved to review or a new round."""
    plan = model({"id": "a"})
    started(plan)
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    plan.runs.run_succeeded("a", T1, answer({}))
    plan.graph.task_reviewing("a", T1)
    before = plan.record("a").model_copy(deep=True)
    assert not plan.runs.activity_seen(seen("a/run/1", "Compiling", attempt=2, failed="x"), T1)
    plan.runs.run_started("a", T1, round=2)
    assert not plan.runs.activity_seen(seen("a/run/1", "Compiling", attempt=2, failed="x"), T1)
    assert plan.record("a").attempts == before.attempts + 1
    assert plan.runs.activity_seen(seen("a/review/code_quality/1", "Reviewing"), T1) is False
    assert plan.runs.activity_seen(seen("a/run/2", "Fixing null check"), T1)
    assert plan.record("a").progress == "Fixing null check"
    for other in ["b/run/1", "local-activity-1"]:
        assert not plan.runs.activity_seen(seen(other, "x"), T1)


def test_what_the_agents_say_now_is_laid_over_a_copy_of_the_record() -> None:
    """Whoever asks reads the pending activities and sees the record as they stand: the current
    run's words and the attempt it retried to, a reviewer's words; a late read of an ended run,
    another plan's activity or a local one change nothing, and the plan's own record neither."""
    plan = model({"id": "a"}, {"id": "b"}, {"id": "c"})
    started(plan)
    for task in ["a", "b", "c"]:
        plan.graph.task_ready(task, T0)
        plan.runs.run_started(task, T0)
    plan.runs.run_succeeded("b", T1, answer({}))
    plan.graph.task_reviewing("b", T1)
    reads = [
        seen("a/run/1", "Compiling", attempt=3, failed="boom"),
        seen("b/run/1", "late", attempt=2),
        seen("b/review/code_quality/1", "Reviewing"),
        seen("c/run/2", "a fix never started"),
        seen("x/run/1", "not ours"),
        seen("local-activity-1", "x"),
    ]
    live = as_seen(plan.state, reads)
    records = {record.id: record for record in live.tasks}
    assert (records["a"].progress, records["a"].attempts) == ("Compiling", 3)
    assert (records["b"].progress, records["b"].attempts) == ("Reviewing", 1)
    assert (records["c"].progress, records["c"].attempts) == (None, 1)
    assert [record.progress for record in plan.state.tasks] == [None, None, None]
    assert plan.record("a").attempts == 1
    view = progress_as_seen(plan.view.progress(T1), reads[:3])
    assert [(r.task, r.summary) for r in view.running] == [
        ("a", "Compiling"),
        ("b", "Reviewing"),
        ("c", None),
    ]
    assert as_seen(plan.state, []) is plan.state


def test_a_run_that_never_reached_the_server_is_no_attempt_nor_fix() -> None:
    plan = model({"id": "a"})
    started(plan)
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    plan.runs.run_started("a", T0, round=2)
    assert (plan.record("a").attempts, plan.record("a").fixes) == (2, 1)
    plan.runs.run_unsent("a", 2)
    assert (plan.record("a").attempts, plan.record("a").fixes) == (1, 0)
    plan.runs.run_unsent("a", 1)
    assert (plan.record("a").attempts, plan.record("a").fixes) == (0, 0)


# --- Times as the workflow's clock and a local run's worker give them ---------------------------


def local_run(began: float, ended: float) -> AgentResult:
    """A local run's answer, its one attempt stamped by its worker (seconds after T0) while the
    workflow's clock stays at T0 (the start of the workflow task the run ended in)."""
    attempt = {
        "attempt": 1,
        "started_at": (T0 + timedelta(seconds=began)).isoformat(),
        "ended_at": (T0 + timedelta(seconds=ended)).isoformat(),
    }
    return AgentResult(agent="work", data={}, metadata={"attempt": 1, RUN_ATTEMPTS: [attempt]})


def test_a_task_starts_after_its_dependencies_ended_and_the_plan_ends_after_its_tasks() -> None:
    """Every call at the workflow's T0: `build`'s run starts when `deps` ended as its worker
    said (not before its own ready move), and the plan's end is its last task's."""
    plan = model({"id": "deps"}, {"id": "build", "depends_on": ["deps"]})
    events: list[EventEnvelope] = []
    plan.announce_to(events.append)
    assert started(plan) == ["deps"]
    plan.graph.task_ready("deps", T0)
    plan.runs.run_started("deps", T0)
    plan.runs.run_succeeded("deps", T0, local_run(0.1, 2))
    plan.graph.task_succeeded("deps", T0)
    assert started(plan) == ["build"]
    plan.graph.task_ready("build", T0)
    plan.runs.run_started("build", T0)
    build = plan.record("build")
    assert build.started_at == T0 + timedelta(seconds=2) == plan.record("deps").ended_at
    assert build.transitions[-1].at == build.started_at
    plan.runs.run_succeeded("build", T0, local_run(2.1, 5))
    plan.graph.task_succeeded("build", T0)
    state = plan.finish(T0)
    assert build.ended_at == state.ended_at == T0 + timedelta(seconds=5)
    times = [event.event.timestamp for event in events[1:]]  # after PlanStarted (at the clock)
    assert times == sorted(times), "the events' times never go back"
    assert events[-1].event.type == "PlanCompleted" and times[-1] == state.ended_at


def test_a_skip_and_a_cancel_are_stamped_after_the_failure_that_caused_them() -> None:
    plan = model(
        {"id": "a"}, {"id": "b", "depends_on": ["a"]}, {"id": "c"}, max_workers=1, fail_fast=True
    )
    events: list[EventEnvelope] = []
    plan.announce_to(events.append)
    assert started(plan) == ["a", "c"]
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    failed = AttemptTime(attempt=1, started_at=T0, ended_at=T1, type="boom", message="boom")
    plan.runs.run_failed("a", T0, RunFailure(type="boom", message="boom", times={1: failed}))
    plan.cancel_waiting(T0)
    assert plan.record("a").ended_at == T1
    assert [plan.record(t).state for t in ("b", "c")] == [TaskState.SKIPPED, TaskState.CANCELLED]
    assert plan.record("b").ended_at == plan.record("c").ended_at == T1
    assert plan.finish(T0).ended_at == T1
    kinds = {event.event.type: event.event.timestamp for event in events}
    assert kinds["TaskFailed"] <= kinds["TaskSkipped"] <= kinds["TaskCancelled"]


def test_a_run_that_takes_a_freed_slot_starts_after_the_run_that_freed_it() -> None:
    """max_workers 1: `docs` runs once `api` gave its slot back, so after `api` succeeded,
    though the workflow's clock is still the start of the workflow task."""
    plan = model({"id": "api"}, {"id": "docs"}, max_workers=1)
    assert started(plan) == ["api", "docs"]
    for task_id in ("api", "docs"):
        plan.graph.task_ready(task_id, T0)
    plan.runs.run_started("api", T0)
    plan.runs.run_succeeded("api", T0, local_run(0, 3))
    plan.graph.task_succeeded("api", T0)
    plan.runs.run_started("docs", T0)
    succeeded, running = plan.record("api").ended_at, plan.record("docs").transitions[-1]
    assert running.state == TaskState.RUNNING and succeeded is not None
    assert running.at >= succeeded == T0 + timedelta(seconds=3)
