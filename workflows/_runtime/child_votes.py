"""A vote held by a plan task or a chain subscription: the `Vote` workflow started as a child of
the plan or chain (on the same task queue), cancelled with it, and how a vote that gave no
outcome is reported."""

from temporalio import workflow
from temporalio.exceptions import (
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from coord.models.vote.spec import VoteSpec, VoteState
    from coord.models.wire.contract import VOTE_WORKFLOW, FailureType, failure_type_of

VOTE_FAILED = (ChildWorkflowError, WorkflowAlreadyStartedError)
"""How a child vote ends without an outcome: it failed or was cancelled on its own (a child
error), or its id is taken by a vote still running (it never started)."""


async def hold_vote(vote: VoteSpec, summary: str) -> VoteState:
    """The vote's outcome (decided, rejected or no quorum). Cancelling the awaiting task
    cancels the vote, and so does the parent's run closing without it (REQUEST_CANCEL); a
    vote cancelled on its own raises a ChildWorkflowError (`is_cancelled_exception`)."""
    outcome: VoteState = await workflow.execute_child_workflow(
        VOTE_WORKFLOW,
        vote.model_dump(mode="json"),
        id=vote.workflow_id,
        result_type=VoteState,
        parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
        static_summary=f"{summary}: {vote.needed} of {len(vote.voters)} approvals decide",
    )
    return outcome


def vote_failure(error: ChildWorkflowError | WorkflowAlreadyStartedError) -> tuple[str, str]:
    """The failure type and message of a vote that gave no outcome."""
    if is_cancelled_exception(error):
        return FailureType.CANCELLED, "the vote was cancelled"
    if isinstance(error, WorkflowAlreadyStartedError):
        return FailureType.TARGET_UNAVAILABLE, f"{error.workflow_id} is already running"
    cause = error.cause or error
    return failure_type_of(cause), str(cause)
