"""A plan's task graph (`PlanGraph`): waves of tasks whose dependencies have succeeded, the
states around a task's run, failure isolation and `fail_fast`; without a server."""

from datetime import timedelta

from coord.models.events.envelope import Priority
from coord.models.plan.spec import (
    TIMEOUT_DECIDER,
    ApprovalDecision,
    ApprovalGate,
    ReviewRound,
    TaskError,
    TaskState,
)
from coord.models.wire.contract import FailureType
from tests.test_plan_model import T0, T1, model, started, succeed

FAILED = TaskError(type="x", message="y")


def test_a_wave_is_every_task_whose_dependencies_succeeded_in_declaration_order() -> None:
    plan = model(
        {"id": "a"},
        {"id": "b", "depends_on": ["a"]},
        {"id": "c", "depends_on": ["a"]},
        {"id": "d", "depends_on": ["b", "c"]},
    )
    assert started(plan) == ["a"]
    succeed(plan, "a")
    assert started(plan) == ["b", "c"]
    succeed(plan, "c")
    assert not plan.graph.has_startable()
    succeed(plan, "b")
    assert started(plan) == ["d"]


def test_dependents_are_skipped_naming_the_failed_task_and_only_those_not_started() -> None:
    plan = model(
        {"id": "a"},
        {"id": "b"},
        {"id": "c", "depends_on": ["a", "b"]},
        {"id": "d", "depends_on": ["c"]},
    )
    started(plan)
    assert plan.graph.task_error("a", T1, FAILED) == ["c", "d"]
    assert plan.record("c").transitions[-1].reason == "depends on a, which ended error"
    assert plan.record("d").skipped_because == "a", "a transitive dependent names the root"
    succeed(plan, "b")
    assert started(plan) == [], "a skipped task never starts"
    assert plan.finished()


def test_fail_fast_stops_the_graph_at_the_first_error_keeping_the_first_reason() -> None:
    plan = model({"id": "a"}, {"id": "b"}, {"id": "c", "depends_on": ["b"]}, fail_fast=True)
    started(plan)
    plan.graph.task_error("a", T1, FAILED)
    succeed(plan, "b")
    assert plan.graph.take_startable() == []
    plan.graph.stop("plan cancelled")
    assert plan.stopping == "fail_fast: task a ended error"
    plan.graph.cancel_unended(T1)
    assert plan.record("c").state == TaskState.CANCELLED
    assert plan.record("c").transitions[-1].reason == "fail_fast: task a ended error"


def test_a_task_moves_under_review_once_however_many_rounds() -> None:
    plan = model({"id": "a"})
    started(plan)
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    assert plan.graph.task_reviewing("a", T1)
    assert not plan.graph.task_reviewing("a", T1)
    assert [t.state for t in plan.record("a").transitions].count(TaskState.REVIEWING) == 1


def test_a_tasks_standing_for_a_slot_is_its_priority_then_its_place() -> None:
    plan = model({"id": "a"}, {"id": "b", "priority": "critical"})
    assert plan.graph.standing("b") == (Priority.CRITICAL, 1)
    assert plan.graph.standing("a") == (Priority.NORMAL, 0)
    assert plan.graph.standing("not-a-task") == (Priority.LOW, 2)


def test_an_approval_ends_approved_or_rejected_and_no_decision_in_time_is_a_rejection() -> None:
    plan = model({"id": "a", "approval": {"timeout": "1h"}}, {"id": "b", "approval": {}})
    started(plan)
    gate = ApprovalGate(timeout=timedelta(hours=1))
    plan.record("a").approval = ApprovalDecision(approved=True, by="alice", at=T0)
    assert plan.graph.approval_ended("a", gate, T1)
    assert not plan.graph.approval_ended("b", gate, T1)
    decided = plan.record("b").approval
    assert decided is not None and decided.by == TIMEOUT_DECIDER
    error = plan.record("b").error
    assert error is not None and error.type == FailureType.APPROVAL_REJECTED
    assert plan.record("b").state == TaskState.ERROR


def test_a_review_round_is_recorded_and_a_reviewer_without_a_verdict_ends_the_task() -> None:
    plan = model({"id": "a"}, {"id": "b", "depends_on": ["a"]})
    started(plan)
    round_ = ReviewRound(kind="verify", round=1, verdicts=[], at=T1)
    assert plan.graph.task_reviewed("a", round_, None, T1)
    assert not plan.graph.task_reviewed("a", round_, FAILED, T1)
    assert plan.record("a").reviews == [round_, round_]
    assert (plan.record("a").state, plan.record("b").state) == (TaskState.ERROR, TaskState.SKIPPED)
