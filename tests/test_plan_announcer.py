"""What a plan announces into its correlation's chain, decided by its model without a server:
each task's lifecycle in the event taxonomy, every event caused by the one before it so the
causation links form one tree rooted at `PlanStarted`."""

from datetime import UTC, datetime
from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.events.taxonomy import BY_TYPE
from coord.models.mesh.agents import AgentResult
from coord.models.mesh.lifecycle import RunFailure
from coord.models.plan.model import PlanModel
from coord.models.plan.spec import ApprovalDecision, PlanSpec, ReviewRound, Verdict

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def announcing(*tasks: dict[str, Any]) -> tuple[PlanModel, list[EventEnvelope]]:
    for task in tasks:
        task.setdefault("agent", "work")
    spec = PlanSpec.model_validate({"plan_id": "p", "correlation_id": "c", "tasks": list(tasks)})
    plan = PlanModel.begin(spec, T0)
    sent: list[EventEnvelope] = []
    plan.announce_to(sent.append)
    return plan, sent


def run(plan: PlanModel, task_id: str) -> None:
    plan.graph.task_ready(task_id, T0)
    plan.runs.run_started(task_id, T0)
    plan.runs.run_succeeded(task_id, T0, AgentResult(agent="work", data={"ok": True}))


def types(sent: list[EventEnvelope]) -> list[str]:
    return [envelope.event.type for envelope in sent]


def assert_tree(sent: list[EventEnvelope]) -> None:
    """Every event's cause was announced before it, and following causes ends at the root."""
    seen = {envelope.event.id: envelope for envelope in sent}
    root = sent[0]
    assert root.event.type == "PlanStarted" and root.event.causation_id is None
    for envelope in sent[1:]:
        cause = envelope.event.causation_id
        assert cause in seen and list(seen).index(cause) < list(seen).index(envelope.event.id)
    for envelope in sent:
        BY_TYPE[envelope.event.type].payload.model_validate(envelope.payload)


def test_a_dependency_is_handed_over_and_resolved_before_its_dependent_starts() -> None:
    plan, sent = announcing({"id": "design"}, {"id": "build", "depends_on": ["design"]})
    plan.graph.take_startable()
    run(plan, "design")
    plan.graph.task_succeeded("design", T0)
    plan.graph.take_startable()
    run(plan, "build")
    plan.graph.task_succeeded("build", T0)
    plan.finish(T0)
    assert types(sent) == [
        "PlanStarted",
        "TaskStarted",
        "TaskCompleted",
        "AgentHandoff",
        "DependencyResolved",
        "TaskStarted",
        "TaskCompleted",
        "PlanCompleted",
    ]
    assert_tree(sent)
    by_type = {envelope.event.type: envelope for envelope in sent}
    assert by_type["AgentHandoff"].payload["to_task"] == "build"
    assert by_type["AgentHandoff"].event.causation_id == sent[2].event.id
    assert {envelope.event.source for envelope in sent} == {"/plan/p"}
    assert {envelope.event.correlation_id for envelope in sent} == {"c"}


def test_an_approval_is_requested_and_decided_before_the_run() -> None:
    plan, sent = announcing({"id": "ship", "approval": {}})
    plan.graph.take_startable()
    plan.graph.task_awaiting_approval("ship", T0)
    plan.record("ship").approval = ApprovalDecision(approved=True, by="alice", at=T0)
    plan.graph.approval_ended("ship", plan.task("ship").approval, T0)  # type: ignore[arg-type]
    run(plan, "ship")
    plan.graph.task_succeeded("ship", T0)
    assert types(sent) == [
        "PlanStarted",
        "ApprovalRequested",
        "DecisionMade",
        "TaskStarted",
        "TaskCompleted",
    ]
    assert sent[2].payload["outcome"] == "approved" and sent[2].payload["by"] == "alice"
    assert sent[2].event.causation_id == sent[1].event.id
    assert_tree(sent)


def test_a_failure_skips_dependents_caused_by_it_and_reviews_are_announced() -> None:
    plan, sent = announcing(
        {"id": "a", "verify": {"verifiers": ["v1", "v2"]}},
        {"id": "b", "depends_on": ["a"]},
    )
    plan.graph.take_startable()
    run(plan, "a")
    plan.graph.task_reviewing("a", T0)
    verdicts = [Verdict(reviewer="v1", passed=True), Verdict(reviewer="v2", passed=True)]
    plan.graph.task_reviewed(
        "a", ReviewRound(kind="verify", round=1, verdicts=verdicts, at=T0), None, T0
    )
    plan.runs.run_failed("a", T0, RunFailure(type="timeout", message="slow", attempts=1))
    assert types(sent)[-5:] == [
        "ReviewRequested",
        "VerificationCompleted",
        "TaskFailed",
        "TaskFailed",
        "TaskSkipped",
    ]
    assert sent[-1].event.causation_id == sent[-2].event.id
    assert sent[-2].payload["final"] is True
    assert_tree(sent)
