"""How a vote ends once its outcome is known (VOTE_ENDS_AFTER_ITS_RUNS_PATCH): the runs still out
are cancelled in a workflow task that does not end the run, and the vote ends once each has
ended, so no voter's outcome lands while its last task runs. A run that answers anyway is kept
in the record, not counted.

Before, the vote cancelled them and ended in one task, which the server refused
(UnhandledCommand) whenever another voter's answer landed meanwhile: every refusal dropped the
cancels with it and cost a replay of the whole history, and a vote of many voters ended only
once every voter had answered, after refused tasks (two to four for 200 or 1,000 voters here).

The many voters answer at once, declared inline (python, this module's `approve`), so the vote's
own worker runs them on its queue, as many at once as its activity slots take: the other
voters' answers keep landing while the deciding one is taken."""

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import WorkerSettings
from coord.models.vote.spec import Choice, VoteSpec, VoteState, VoteStatus
from coord.models.wire import contract
from coord.models.wire.specs import MAX_ITEMS
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import UNHANDLED_COMMAND, eventually
from tests.test_vote import NO, YES, vote

VOTE_TIMEOUT = 300.0
"""Seconds a vote may take on a loaded machine: one of MAX_ITEMS voters takes about 10 here."""


async def approve(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return YES


def many_voters(count: int) -> VoteSpec:
    voters = [f"voter-{i:04d}" for i in range(count)]
    voter = {"kind": "python", "callable": f"{__name__}:approve"}
    return VoteSpec.model_validate(
        {
            "vote_id": f"many-{count}-{uuid.uuid4().hex[:8]}",
            "proposal": {"release": "2.4.0"},
            "voters": voters,
            "agents": dict.fromkeys(voters, voter),
            "retry": {"max_retries": 0},
        }
    )


async def history(handle: WorkflowHandle[Any, Any]) -> list[EventType.ValueType]:
    return [event.event_type async for event in handle.fetch_history_events()]


async def refused_tasks(handle: WorkflowHandle[Any, Any]) -> int:
    """Workflow tasks the server refused because new events arrived while they ran."""
    refused = [
        event
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        and event.workflow_task_failed_event_attributes.cause == UNHANDLED_COMMAND
    ]
    return len(refused)


async def decided_without_refused_tasks(client: Client, task_queue: str, count: int) -> None:
    """The vote is decided, every voter in its record (a ballot, counted or kept after the
    outcome, or cancelled, each cancel recorded), and no workflow task failed."""
    spec = many_voters(count)
    inline = AgentRegistry(WorkerSettings(inline_agents=["python"]))
    async with build_worker(client, task_queue, inline):
        handle = await api.start_vote(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.vote_outcome(handle), VOTE_TIMEOUT)
    assert state.status == VoteStatus.DECIDED, state.summary
    assert state.tally().approve >= spec.needed  # those landing with the deciding one count too
    assert sorted([ballot.voter for ballot in state.ballots] + state.cancelled) == spec.voters
    assert await refused_tasks(handle) == 0
    events = await history(handle)
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED) == len(state.cancelled)
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events


async def test_a_vote_of_two_hundred_voters_ends_without_a_refused_task(
    client: Client, task_queue: str
) -> None:
    """134 approvals decide; the rest of the 200 have answered meanwhile, or are cancelled."""
    await decided_without_refused_tasks(client, task_queue, 200)


@pytest.mark.soak  # MAX_ITEMS voters: 10 s here, more on a loaded machine (`make soak`)
async def test_a_vote_of_max_items_voters_ends_without_a_refused_task(
    client: Client, task_queue: str
) -> None:
    await decided_without_refused_tasks(client, task_queue, MAX_ITEMS)


async def test_a_voter_answering_after_its_cancel_is_kept_uncounted_and_the_vote_ends_after_it(
    client: Client, task_queue: str
) -> None:
    """Carol sends no heartbeat, so her run never hears its cancel: the vote is rejected by
    Alice and Bob, and still running until Carol answers; her approval is then kept, not
    counted, and she is not listed as cancelled."""
    released = asyncio.Event()
    registry = AgentRegistry()
    for name in ("alice", "bob"):
        registry.register(name)(reject)

    @registry.register("carol")
    async def carol(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        await released.wait()
        return YES

    async with build_worker(client, task_queue, registry):
        handle = await api.start_vote(client, vote(["alice", "bob", "carol"]), queue=task_queue)
        await eventually(lambda: rejected(handle))
        description = await handle.describe()
        assert description.status == WorkflowExecutionStatus.RUNNING, "it waits for Carol's run"
        released.set()
        state = await asyncio.wait_for(api.vote_outcome(handle), 30)
    assert state.status == VoteStatus.REJECTED
    assert state.summary == "0 approve, 2 reject, 0 abstain of 3 voters; 2 approvals needed"
    late = state.ballot_of("carol")
    assert late is not None and (late.choice, late.counted) == (Choice.APPROVE, False)
    assert state.cancelled == []
    events = await history(handle)
    cancel = events.index(EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED)
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED in events[cancel:], "answered after it"
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events


async def reject(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return NO


async def rejected(handle: WorkflowHandle[Any, VoteState]) -> bool:
    state: VoteState = await handle.query(contract.STATE_QUERY, result_type=VoteState)
    return state.status == VoteStatus.REJECTED
