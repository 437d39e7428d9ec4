"""Consensus votes: start, wait for the outcome, read the record.

The calls name the workflow and its query by their wire names (the contract), so this side
needs nothing of the workflow's code."""

from typing import Any

from temporalio.client import Client, WorkflowHandle

from coord.models.vote.spec import VoteSpec, VoteState
from coord.models.wire import contract
from coord.starter.api.common import (
    api_call,
    cancel_running,
    current_record,
    ended_record,
    named_workflow_id,
    start_run,
)
from coord.workflows.vote import Vote


def vote_summary(spec: VoteSpec) -> str:
    voters = ", ".join(spec.voters)
    return f"Vote {spec.vote_id}: {spec.needed} of {len(spec.voters)} approvals decide ({voters})"


@api_call
async def start_vote(
    client: Client, spec: VoteSpec, *, queue: str | None = None, eager: bool = False
) -> WorkflowHandle[Any, VoteState]:
    """Start the vote on `queue` (default: $COORD_TASK_QUEUE); `vote_outcome(handle)` waits for
    its record. `eager`: this client's own worker takes its first task (`start_run`)."""
    rewind_of = spec.rewind.of.search_value() if spec.rewind else None
    first = VoteState(vote_id=spec.vote_id, correlation_id=spec.correlation_id, rewind_of=rewind_of)
    summary, details = vote_summary(spec), spec.description or None
    return await start_run(client, Vote.run, spec, first, queue, summary, details, eager=eager)


def vote_handle(client: Client, vote: str) -> WorkflowHandle[Any, VoteState]:
    """`vote` is a vote id or its workflow id (`vote-<vote_id>`); a name that starts with
    `vote-` is taken as a workflow id (`named_vote` asks which it is)."""
    return vote_run(client, contract.as_vote_workflow_id(vote))


def vote_run(client: Client, workflow_id: str) -> WorkflowHandle[Any, VoteState]:
    """The vote whose workflow id is `workflow_id`, as given (a listing's, `named_vote`'s): one
    started from the Temporal CLI may have any."""
    return client.get_workflow_handle(workflow_id, result_type=VoteState)


async def named_vote(client: Client, vote: str) -> WorkflowHandle[Any, VoteState]:
    """The vote a user names by its vote id or its workflow id (`named_workflow_id`)."""
    return vote_run(client, await named_workflow_id(client, vote, contract.VOTE_ID_PREFIX))


@api_call
async def vote_outcome(handle: WorkflowHandle[Any, VoteState]) -> VoteState:
    """Wait for the vote to end and return its record: decided, rejected or without quorum (its
    result), or cancelled (its memo). A run whose spec was invalid raises its failure."""
    return await ended_record(handle, contract.VOTE_RECORD_MEMO, VoteState)


@api_call
async def vote_state(client: Client, vote: str) -> VoteState:
    """The vote's record now (`current_record`): a running vote's from its `state` query, an
    ended one's from its result or memo, without a worker."""
    return await vote_record(await named_vote(client, vote), client)


async def vote_record(
    handle: WorkflowHandle[Any, VoteState], client: Client | None = None
) -> VoteState:
    """The vote's record now (`current_record`)."""
    name = f"vote {contract.vote_id_of(handle.id)!r}"
    return await current_record(handle, vote_outcome, Vote.state, name, client)


@api_call
async def cancel_vote(client: Client, vote: str) -> None:
    """The voters' runs still out are cancelled and the record (in the memo) says so; a plan
    task or chain subscription waiting on the vote takes it as failed. Refused when the vote
    has ended: the server would accept the request and nothing would happen."""
    handle = await named_vote(client, vote)
    await cancel_running(handle, f"vote {contract.vote_id_of(handle.id)!r}", vote_outcome)
