"""Votes as a plan task kind and from chain subscriptions, on the real dev server: a vote task
decided (its proposal the task's input and its dependencies' results, the vote a child workflow
`vote-<plan_id>~<task_id>` of the plan, apart from every other plan's), one rejected that skips
its dependents, one cancelled on its own; a chain whose vote subscription publishes
`on_success` or `on_failure` with the ballots."""

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.plan.report import outcome
from coord.models.plan.spec import PlanSpec, PlanState, PlanStatus, TaskState
from coord.models.vote.spec import Choice, VoteState, VoteStatus
from coord.models.wire import contract
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import event, eventually, history_events, task_failures
from tests.test_vote import NO, YES, Voters

VOTERS = ["alice", "bob", "carol"]


def with_builder(voters: Voters) -> AgentRegistry:
    """The voters, and `build`, which answers with what it was given."""
    registry = voters.registry()

    @registry.register("build")
    async def build(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {"built": event.payload.get("release"), "inputs": dict(context.inputs)}

    return registry


def release_plan(**approve: Any) -> PlanSpec:
    """build -> approve (a vote) -> ship, and docs beside them."""
    no_retry = {"max_retries": 0}
    vote = {"voters": VOTERS, "retry": no_retry, **approve}
    return PlanSpec.model_validate(
        {
            "plan_id": f"pv-{uuid.uuid4().hex[:8]}",
            "tasks": [
                {"id": "build", "agent": "build", "input": {"release": "1.4"}, "retry": no_retry},
                {
                    "id": "approve",
                    "vote": vote,
                    "input": {"window": "tue"},
                    "depends_on": ["build"],
                },
                {"id": "ship", "agent": "build", "depends_on": ["approve"], "retry": no_retry},
                {"id": "docs", "agent": "build", "retry": no_retry},
            ],
        }
    )


async def run_plan(
    client: Client, task_queue: str, spec: PlanSpec, voters: Voters
) -> tuple[PlanState, WorkflowHandle[Any, PlanState]]:
    async with build_worker(client, task_queue, with_builder(voters)):
        handle = await api.start_plan(client, spec, queue=task_queue)
        return await asyncio.wait_for(api.plan_outcome(handle), 60), handle


async def test_a_decided_vote_task_succeeds_with_its_record_and_its_dependents_run(
    client: Client, task_queue: str
) -> None:
    voters = Voters({"alice": YES, "bob": YES, "carol": "hold"})
    spec = release_plan()
    state, handle = await run_plan(client, task_queue, spec, voters)
    assert state.status == PlanStatus.COMPLETED, state.summary
    built = {"built": "1.4", "inputs": {}}
    assert voters.proposals["alice"] == {"window": "tue", "results": {"build": built}}
    approve = next(task for task in state.tasks if task.id == "approve")
    assert approve.agent == "vote: alice, bob, carol"
    assert [t.state for t in approve.transitions] == [
        TaskState.PENDING,
        TaskState.READY,
        TaskState.RUNNING,
        TaskState.SUCCEEDED,
    ]
    vote = VoteState.model_validate(approve.result)
    assert vote.status == VoteStatus.DECIDED
    assert vote.vote_id == f"{spec.plan_id}~approve"
    assert vote.correlation_id == spec.correlation_id
    assert sorted((b.voter, b.choice) for b in vote.ballots) == [
        ("alice", Choice.APPROVE),
        ("bob", Choice.APPROVE),
    ]
    assert vote.cancelled == ["carol"]
    assert outcome(approve) == f"vote decided: {vote.summary}", "in words, not the record's JSON"
    ship = next(task for task in state.tasks if task.id == "ship")
    assert ship.result is not None and ship.result["inputs"]["approve"] == approve.result
    child = await client.get_workflow_handle(f"vote-{spec.plan_id}~approve").describe()
    parent = child.raw_description.workflow_execution_info.parent_execution
    assert parent.workflow_id == spec.workflow_id
    assert child.typed_search_attributes.get(contract.COORD_STATUS) == "decided"
    assert await task_failures(handle) == []


async def test_a_rejected_vote_task_ends_error_and_skips_its_dependents(
    client: Client, task_queue: str
) -> None:
    voters = Voters({"alice": NO, "bob": NO, "carol": "hold"})
    state, _ = await run_plan(client, task_queue, release_plan(), voters)
    assert state.status == PlanStatus.PARTIAL, state.summary
    records = {task.id: task for task in state.tasks}
    approve = records["approve"]
    assert approve.state == TaskState.ERROR
    assert approve.error is not None and approve.error.type == "vote_rejected"
    assert approve.error.message == (
        "vote rejected: 0 approve, 2 reject, 0 abstain of 3 voters; 2 approvals needed"
    )
    vote = VoteState.model_validate(approve.result)
    assert sorted((b.voter, b.choice, b.reason) for b in vote.ballots) == [
        ("alice", Choice.REJECT, "no rollback plan"),
        ("bob", Choice.REJECT, "no rollback plan"),
    ]
    assert records["ship"].state == TaskState.SKIPPED
    assert records["ship"].skipped_because == "approve"
    assert records["docs"].state == records["build"].state == TaskState.SUCCEEDED


async def test_a_vote_with_too_few_voters_left_ends_no_quorum(
    client: Client, task_queue: str
) -> None:
    voters = Voters({"alice": YES, "bob": "fail", "carol": "fail"})
    state, _ = await run_plan(client, task_queue, release_plan(), voters)
    approve = next(task for task in state.tasks if task.id == "approve")
    assert approve.error is not None and approve.error.type == "no_quorum"
    assert VoteState.model_validate(approve.result).status == VoteStatus.NO_QUORUM


async def test_a_vote_cancelled_on_its_own_ends_its_task_and_the_plan_goes_on(
    client: Client, task_queue: str
) -> None:
    """`coord vote cancel` on a plan's vote: the task ends error `cancelled`, its dependents are
    skipped, and the plan still ends (nothing waits for a task that cannot end)."""
    voters = Voters({"alice": "hold", "bob": "hold", "carol": "hold"})
    spec = release_plan()
    async with build_worker(client, task_queue, with_builder(voters)):
        handle = await api.start_plan(client, spec, queue=task_queue)
        await eventually(lambda: asyncio.sleep(0, set(VOTERS) <= voters.proposals.keys()))
        await api.cancel_vote(client, f"{spec.plan_id}~approve")
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
        await eventually(lambda: asyncio.sleep(0, voters.cancelled == set(VOTERS)))
    records = {task.id: task for task in state.tasks}
    assert records["approve"].error is not None
    assert records["approve"].error.type == "cancelled"
    assert records["ship"].state == TaskState.SKIPPED
    assert state.status == PlanStatus.PARTIAL


async def test_a_cancelled_plan_cancels_its_vote(client: Client, task_queue: str) -> None:
    voters = Voters({"alice": "hold", "bob": "hold", "carol": "hold"})
    spec = release_plan()
    async with build_worker(client, task_queue, with_builder(voters)):
        handle = await api.start_plan(client, spec, queue=task_queue)
        await eventually(lambda: asyncio.sleep(0, set(VOTERS) <= voters.proposals.keys()))
        await handle.cancel()
        state = await asyncio.wait_for(api.plan_outcome(handle), 60)
        vote = await asyncio.wait_for(
            api.vote_outcome(api.vote_handle(client, f"{spec.plan_id}~approve")), 30
        )
    assert state.status == PlanStatus.CANCELLED
    approve = next(task for task in state.tasks if task.id == "approve")
    assert approve.state == TaskState.CANCELLED
    assert vote.status == VoteStatus.CANCELLED and vote.cancelled == VOTERS


def voting_plan(plan_id: str, task_id: str) -> PlanSpec:
    vote = {"voters": VOTERS, "retry": {"max_retries": 0}}
    return PlanSpec.model_validate(
        {"plan_id": plan_id, "tasks": [{"id": task_id, "vote": vote, "input": {"p": plan_id}}]}
    )


async def test_two_plans_whose_vote_ids_joined_the_same_hold_their_votes_apart(
    client: Client, task_queue: str
) -> None:
    """Plan `X-a` with task `b` and plan `X` with task `a-b`: joined by `-` both held
    `vote-X-a-b`, and the second plan's vote never started (its id taken). Both votes run at
    once here (the voters answer once both plans are voting), each decided for its own plan."""
    voters = Voters({name: YES for name in VOTERS}, gated=set(VOTERS))
    stem = f"pv-{uuid.uuid4().hex[:8]}"
    specs = [voting_plan(f"{stem}-a", "b"), voting_plan(stem, "a-b")]
    async with build_worker(client, task_queue, with_builder(voters)):
        handles = [await api.start_plan(client, spec, queue=task_queue) for spec in specs]

        async def both_started_or_refused() -> bool:
            return all([CHILD_STARTED & set(await history_events(h)) for h in handles])

        await eventually(both_started_or_refused)
        for name in VOTERS:
            voters.release(name)
        states = [await asyncio.wait_for(api.plan_outcome(h), 60) for h in handles]
    for spec, state in zip(specs, states, strict=True):
        assert state.status == PlanStatus.COMPLETED, state.summary
        vote = VoteState.model_validate(state.tasks[0].result)
        assert vote.vote_id == f"{spec.plan_id}~{spec.tasks[0].id}"
        assert vote.proposal == {"p": spec.plan_id}
    assert len({VoteState.model_validate(s.tasks[0].result).vote_id for s in states}) == 2


CHILD_STARTED = {
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED,
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED,
}


# --- Votes from chains ------------------------------------------------------------------------


def release_chain() -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "release",
            "triggers": ["BuildPassed"],
            "subscriptions": [
                {
                    "name": "release-vote",
                    "vote": {"voters": VOTERS, "retry": {"max_retries": 0}},
                    "events": ["BuildPassed"],
                    "publishes": {"on_success": "ReleaseApproved", "on_failure": "ReleaseRefused"},
                }
            ],
        }
    )


async def chain_vote(
    client: Client, task_queue: str, voters: Voters, expected: str
) -> tuple[TimelineEntry, str]:
    """Publishes BuildPassed, waits for the vote's event (the only other in the timeline besides
    what the vote announced), closes the chain (every event it saw in the timeline, none
    parked): that event and the chain's correlation id."""
    correlation_id = f"rv-{uuid.uuid4().hex[:8]}"
    build = event(correlation_id, "BuildPassed", release="1.4", window="tue")
    async with build_worker(client, task_queue, with_builder(voters)):
        await api.publish(client, build, spec=release_chain(), queue=task_queue)

        found: list[TimelineEntry] = []

        async def published() -> bool:
            found[:] = await api.chain_timeline(client, correlation_id)
            return expected in [entry.event for entry in found]

        await eventually(published)
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(api.chain_handle(client, correlation_id).result(), 30)
    assert voters.proposals["alice"] == {"release": "1.4", "window": "tue"}
    announced = [entry for entry in found if entry.agent.startswith("/vote/")]
    chained = [entry for entry in found if entry not in announced]
    assert [entry.event for entry in chained] == ["BuildPassed", expected]
    assert chained[1].causation_id == build.event.id
    assert [announced[0].event, announced[-1].event] == ["VoteOpened", "DecisionMade"]
    assert announced[0].causation_id == build.event.id, "the vote was opened for the trigger"
    assert (state.events_seen, state.dead_lettered) == (len(found), 0)
    return chained[1], correlation_id


async def test_a_chain_vote_decided_publishes_on_success_with_the_ballots(
    client: Client, task_queue: str
) -> None:
    voters = Voters({"alice": YES, "bob": YES, "carol": "hold"})
    entry, correlation_id = await chain_vote(client, task_queue, voters, "ReleaseApproved")
    vote = VoteState.model_validate(entry.payload)
    assert vote.status == VoteStatus.DECIDED and vote.correlation_id == correlation_id
    assert sorted((b.voter, b.choice) for b in vote.ballots) == [
        ("alice", Choice.APPROVE),
        ("bob", Choice.APPROVE),
    ]
    assert entry.agent == "/release-vote"
    child = await api.vote_handle(client, vote.vote_id).describe()
    chain_run = child.raw_description.workflow_execution_info.parent_execution
    assert chain_run.workflow_id.startswith(f"{contract.chain_workflow_id(correlation_id)}/run-")
    described = await client.get_workflow_handle(chain_run.workflow_id).describe()
    parent = described.raw_description.workflow_execution_info.parent_execution
    assert parent.workflow_id == contract.chain_workflow_id(correlation_id), "the chain's run"


async def test_a_chain_vote_rejected_publishes_on_failure_with_the_ballots(
    client: Client, task_queue: str
) -> None:
    voters = Voters({"alice": NO, "bob": NO, "carol": "hold"})
    entry, _ = await chain_vote(client, task_queue, voters, "ReleaseRefused")
    assert entry.payload["status"] == "rejected"
    assert entry.payload["error"] == (
        "vote rejected: 0 approve, 2 reject, 0 abstain of 3 voters; 2 approvals needed"
    )
    assert sorted(ballot["voter"] for ballot in entry.payload["ballots"]) == ["alice", "bob"]
