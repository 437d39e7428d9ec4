"""A plan's task runs (`TaskRuns`): the run lifecycle every pattern's model answers
(`RunLifecycle`), kept per task, with the attempts an answer reports and a vote's outcome;
without a server."""

from coord.models.mesh.agents import AgentResult
from coord.models.mesh.lifecycle import RunFailure, RunLifecycle
from coord.models.mesh.results import ResultReference
from coord.models.plan.model import PlanModel
from coord.models.plan.spec import TaskError, TaskState
from coord.models.plan.votes import vote_ended
from coord.models.vote.spec import VoteState, VoteStatus
from coord.models.wire.contract import FailureType
from tests.test_plan_model import T0, T1, model, started


def running_plan(*task_ids: str) -> PlanModel:
    """A plan whose tasks (independent) have each had their run started."""
    plan = model(*({"id": task_id} for task_id in task_ids))
    started(plan)
    for task_id in task_ids:
        plan.graph.task_ready(task_id, T0)
        plan.runs.run_started(task_id, T0)
    return plan


def states(plan: PlanModel, task_id: str) -> list[tuple[TaskState, int | None]]:
    return [(t.state, t.attempt) for t in plan.record(task_id).transitions]


def test_the_plans_task_runs_are_a_run_lifecycle() -> None:
    """The workflow side drives any pattern's runs through these four calls; mypy holds the
    plan's to the protocol here (keyed by task id, an agent's result, tasks running)."""
    plan = model({"id": "a"}, {"id": "b", "depends_on": ["a"]})
    lifecycle: RunLifecycle[str, AgentResult, str] = plan.runs
    started(plan)
    plan.graph.task_ready("a", T0)
    assert list(lifecycle.running()) == []
    lifecycle.run_started("a", T0)
    assert list(lifecycle.running()) == ["a"]
    lifecycle.run_succeeded("a", T1, AgentResult(agent="work", data={"n": 1}))
    assert list(lifecycle.running()) == []
    assert plan.record("a").result == {"n": 1}
    assert plan.record("a").state == TaskState.RUNNING, "it succeeds once its gates pass"


def test_an_answer_at_a_later_attempt_records_the_attempts_that_failed_before_it() -> None:
    plan = running_plan("a")
    plan.runs.run_succeeded("a", T1, AgentResult(agent="work", metadata={"attempt": 3}))
    assert plan.record("a").attempts == 3
    assert states(plan, "a")[2:] == [
        (TaskState.RUNNING, 1),
        (TaskState.FAILED, 1),
        (TaskState.RUNNING, 2),
        (TaskState.FAILED, 2),
        (TaskState.RUNNING, 3),
    ]


def test_a_result_stored_by_reference_is_kept_and_passed_on_as_its_reference() -> None:
    plan = running_plan("a")
    reference = ResultReference(sha256="ab" * 32, bytes=40_000)
    plan.runs.run_succeeded("a", T1, AgentResult(agent="work", reference=reference))
    assert (plan.record("a").result, plan.record("a").result_ref) == (None, reference)
    assert plan.requests.result_input("a") == reference.as_input()


def test_a_run_failed_for_good_ends_its_task_in_error_and_skips_its_dependents() -> None:
    plan = model({"id": "a"}, {"id": "b", "depends_on": ["a"]}, {"id": "c"})
    started(plan)
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    plan.runs.run_failed("a", T1, RunFailure(type="timeout", message="late", attempts=2))
    assert plan.record("a").error == TaskError(type="timeout", message="late")
    assert states(plan, "a")[-3:] == [
        (TaskState.RUNNING, 2),
        (TaskState.FAILED, 2),
        (TaskState.ERROR, None),
    ]
    assert plan.record("b").state == TaskState.SKIPPED
    assert plan.record("c").state == TaskState.PENDING
    assert plan.runs.running() == []


def test_a_run_never_sent_or_whose_task_was_cancelled_is_not_running() -> None:
    plan = running_plan("a", "b", "c")
    plan.runs.run_unsent("a", 1)
    plan.graph.task_cancelled("b", T1, "plan cancelled")
    assert plan.runs.running() == ["c"]


def test_a_fix_round_is_a_new_run_of_the_same_task() -> None:
    plan = running_plan("a")
    plan.runs.run_succeeded("a", T1, AgentResult(agent="work", data={"v": 1}))
    plan.runs.run_started("a", T1, round=2)
    assert plan.runs.running() == ["a"]
    assert (plan.record("a").attempts, plan.record("a").fixes) == (2, 1)


def vote(status: VoteStatus) -> VoteState:
    return VoteState(vote_id="p~a", status=status, voters=["x", "y"], needed=2)


def test_a_decided_vote_is_its_tasks_result_and_an_undecided_one_its_error() -> None:
    plan = running_plan("a", "b")
    assert vote_ended(plan, "a", T1, vote(VoteStatus.DECIDED))
    record = plan.record("a")
    assert record.result == vote(VoteStatus.DECIDED).model_dump(mode="json")
    assert record.ended_as == vote(VoteStatus.DECIDED).outcome_line()
    assert not vote_ended(plan, "b", T1, vote(VoteStatus.REJECTED))
    error = plan.record("b").error
    assert error is not None and error.type == FailureType.VOTE_REJECTED
    assert plan.record("b").state == TaskState.ERROR
    assert plan.runs.running() == []
