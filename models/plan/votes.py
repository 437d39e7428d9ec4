"""A plan's vote tasks, apart from Temporal: the vote a task runs (its input, with its
dependencies' results under `results`, is the proposal) and how the vote's outcome ends the task
(decided: succeeded; rejected or no quorum: error, typed)."""

from datetime import datetime

from coord.models.mesh.lifecycle import RunFailure
from coord.models.plan.model import PlanModel
from coord.models.plan.spec import VOTE_RESULTS_KEY, PlanTask
from coord.models.vote.spec import VoteSpec, VoteState


def task_vote(model: PlanModel, task: PlanTask, *, scoped: bool = True) -> VoteSpec:
    """The spec of the vote `task` runs (workflow `vote-<plan_id>~<task_id>`; `scoped` False:
    the id runs recorded before gave it). A dependency's result stored by reference is in the
    proposal as its reference. Raises SpecError when the proposal is not one a vote takes
    (nested too deep)."""
    assert task.vote is not None
    results = model.requests.dependency_results(task)
    proposal = {**task.input, **({VOTE_RESULTS_KEY: results} if results else {})}
    return VoteSpec.of(
        model.spec.vote_id(task, scoped=scoped),
        task.vote,
        proposal,
        correlation_id=model.spec.correlation_id,
        agents=model.spec.agents,
    )


def vote_error(vote: VoteState) -> RunFailure | None:
    """None for a decided vote; else the run's failure, saying how the ballots fell."""
    failure = vote.failure()
    return None if failure is None else RunFailure(type=failure[0], message=failure[1])


def vote_ended(model: PlanModel, task_id: str, now: datetime, vote: VoteState) -> bool:
    """The vote's record is the task's result, how it ended the task's words; a vote that was
    not decided fails the task's run for good. Returns whether the task succeeded."""
    model.runs.result_kept(task_id, vote.model_dump(mode="json"), ended_as=vote.outcome_line())
    failed = vote_error(vote)
    if failed is not None:
        model.runs.run_failed(task_id, now, failed)
    return failed is None
