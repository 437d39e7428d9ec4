"""A plan's vote tasks, apart from Temporal: the vote a task runs (its input, with its
dependencies' results under `results`, is the proposal) and how the vote's outcome ends the task
(decided: succeeded; rejected or no quorum: error, typed)."""

from coord.models.plan.model import PlanModel
from coord.models.plan.spec import VOTE_RESULTS_KEY, PlanTask, TaskError
from coord.models.vote.spec import VoteSpec, VoteState


def task_vote(model: PlanModel, task: PlanTask, *, scoped: bool = True) -> VoteSpec:
    """The spec of the vote `task` runs (workflow `vote-<plan_id>~<task_id>`; `scoped` False:
    the id runs recorded before gave it). A dependency's result stored by reference is in the
    proposal as its reference. Raises SpecError when the proposal is not one a vote takes
    (nested too deep)."""
    assert task.vote is not None
    results = model.dependency_results(task)
    proposal = {**task.input, **({VOTE_RESULTS_KEY: results} if results else {})}
    return VoteSpec.of(
        model.spec.vote_id(task, scoped=scoped),
        task.vote,
        proposal,
        correlation_id=model.spec.correlation_id,
        agents=model.spec.agents,
    )


def vote_error(vote: VoteState) -> TaskError | None:
    """None for a decided vote; else the task's error, saying how the ballots fell."""
    failure = vote.failure()
    return None if failure is None else TaskError(type=failure[0], message=failure[1])
