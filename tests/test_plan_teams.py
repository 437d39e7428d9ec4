"""Teams that talk, on the real dev server: a team of three where the closer's result is the
code word the scout sent it, the messages in the correlation's log and the plan's record, a
message to someone outside the team refused with its reason, a long-lived member handed two
messages in order, a task waiting for a message that never comes, the scratchpad every
member's run reaches, a long-lived member's sends going through its plan, and its entity
continuing as new between messages with its mailbox and memory."""

import asyncio
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from coord.models.chain.spec import ChainSpec
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import TeamMessage
from coord.models.plan.member import MemberStart
from coord.models.plan.spec import MemberRecord, PlanSpec, PlanState, PlanStatus, TaskState
from coord.models.wire.contract import (
    CLOSE_SIGNAL,
    DELIVER_SIGNAL,
    TEAM_MEMBER_WORKFLOW,
    FailureType,
    member_workflow_id,
)
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import eventually, parked, task_failures
from tests.team_agents import CODE_WORD, PAD_FILE, team_registry

TEAM = {
    "a": {"role": "scout", "agent": "scout"},
    "b": {"role": "helper", "agent": "helper"},
    "c": {"role": "closer", "agent": "closer", "messages": {"max_per_run": 2}},
    "keeper": {"role": "memory", "agent": "keeper", "long_lived": True},
}


def team_plan(correlation_id: str, **extra: Any) -> PlanSpec:
    return PlanSpec.model_validate(
        {
            "plan_id": f"team-{uuid.uuid4().hex[:8]}",
            "correlation_id": correlation_id,
            "team": TEAM,
            "tasks": [
                {"id": "scout", "member": "a", "input": {"notes": ["first", "second"]}},
                {"id": "help", "member": "b"},
                {"id": "close", "member": "c", "wait_for_message": "60s"},
            ],
            **extra,
        }
    )


def listening_chain() -> ChainSpec:
    """A chain of the plan's correlation that keeps its log (it reacts to nothing of note)."""
    return ChainSpec.model_validate(
        {
            "name": "team-log",
            "triggers": ["TeamMessage"],
            "subscriptions": [{"agent": "helper", "events": "TeamMessage"}],
        }
    )


async def run_team(client: Client, task_queue: str, spec: PlanSpec) -> PlanState:
    handle = await api.start_plan(client, spec, queue=task_queue)
    state = await asyncio.wait_for(api.plan_outcome(handle), 90)
    assert await task_failures(handle) == []
    return state


async def test_a_team_of_three_talks_and_the_messages_are_in_the_correlations_log(
    client: Client, task_queue: str
) -> None:
    correlation = f"team-{uuid.uuid4().hex[:8]}"
    spec = team_plan(correlation)
    async with build_worker(client, task_queue, team_registry()):
        chain = await api.start_chain(client, listening_chain(), correlation, queue=task_queue)
        state = await run_team(client, task_queue, spec)

        async def logged() -> list[TimelineEntry]:
            timeline = await api.correlation_events(client, correlation)
            return [entry for entry in timeline if entry.event == "TeamMessage"]

        await eventually(lambda: _counted(logged(), 3))
        messages = await logged()
        await chain.terminate("test over")
    assert state.status == PlanStatus.COMPLETED, state.summary
    closed = next(task for task in state.tasks if task.id == "close")
    assert closed.result is not None and closed.result["code"] == CODE_WORD
    sent = [(m.seq, m.sender, m.to, m.task) for m in state.messages.sent]
    assert sent == [
        (1, "a", "c", "scout"),
        (2, "a", "keeper", "scout"),
        (3, "a", "keeper", "scout"),
    ]
    assert closed.result["heard"] == [["a", 1]]
    assert [(e.payload["seq"], e.payload["to"]) for e in messages] == [
        (1, "c"),
        (2, "keeper"),
        (3, "keeper"),
    ]
    assert [e.seq for e in messages] == sorted(e.seq for e in messages)
    assert all(e.agent == f"/plan/{spec.plan_id}/team/a" for e in messages)


async def _counted(entries: Awaitable[list[TimelineEntry]], count: int) -> bool:
    return len(await entries) >= count


async def test_a_message_to_someone_outside_the_team_is_refused_with_its_reason(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue, team_registry()):
        state = await run_team(client, task_queue, team_plan("no-chain-" + uuid.uuid4().hex[:8]))
    assert state.status == PlanStatus.COMPLETED
    [refused] = state.messages.refused
    assert (refused.task, refused.sender, refused.to) == ("scout", "a", "mallory")
    assert refused.reason == "send.to: 'mallory' is not a member of the team (a, b, c, keeper)"
    assert [m.to for m in state.messages.sent] == ["c", "keeper", "keeper"]


async def test_a_long_lived_member_is_handed_its_messages_in_order(
    client: Client, task_queue: str
) -> None:
    spec = team_plan("keeper-" + uuid.uuid4().hex[:8])
    async with build_worker(client, task_queue, team_registry()):
        state = await run_team(client, task_queue, spec)
        member = client.get_workflow_handle(member_workflow_id(spec.plan_id, "keeper"))
        described = await member.describe()
    keeper = state.members["keeper"]
    assert keeper.handled == 2
    assert [run.seq for run in keeper.memory] == [2, 3]
    assert [run.result for run in keeper.memory] == [
        {"got": ["first"], "remembered": [], "pad": None},
        {"got": ["second"], "remembered": [2], "pad": None},
    ]
    assert described.parent_id == spec.workflow_id


async def test_a_task_waiting_for_a_message_that_never_comes_ends_no_message(
    client: Client, task_queue: str
) -> None:
    spec = PlanSpec.model_validate(
        {
            "plan_id": f"lonely-{uuid.uuid4().hex[:8]}",
            "team": {"b": {"agent": "helper"}, "c": {"agent": "closer"}},
            "tasks": [
                {"id": "help", "member": "b"},
                {"id": "close", "member": "c", "wait_for_message": "1s"},
            ],
        }
    )
    async with build_worker(client, task_queue, team_registry()):
        state = await run_team(client, task_queue, spec)
    closed = next(task for task in state.tasks if task.id == "close")
    assert closed.state == TaskState.ERROR
    assert closed.error is not None and closed.error.type == FailureType.NO_MESSAGE
    assert closed.error.message == "no message came to c within 1s"


async def test_the_team_shares_its_scratchpad_from_every_members_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = team_plan("pad-" + uuid.uuid4().hex[:8], scratchpad="pads")
    async with build_worker(client, task_queue, team_registry(str(tmp_path))):
        state = await run_team(client, task_queue, spec)
    closed = next(task for task in state.tasks if task.id == "close")
    assert closed.result is not None and closed.result["pad"] == "left by the scout"
    assert [run.result["pad"] for run in state.members["keeper"].memory if run.result] == [
        "left by the scout",
        "left by the scout",
    ]
    assert (tmp_path / "pads" / spec.plan_id / PAD_FILE).read_text() == "left by the scout"
    assert (tmp_path / "pads" / spec.plan_id / "final-report.md").exists()


async def test_a_long_lived_members_run_sends_through_its_plan(
    client: Client, task_queue: str
) -> None:
    spec = PlanSpec.model_validate(
        {
            "plan_id": f"relay-{uuid.uuid4().hex[:8]}",
            "team": {
                "a": {"agent": "scout"},
                "c": {"agent": "closer"},
                "relay": {"agent": "relay", "long_lived": True},
            },
            "tasks": [
                {
                    "id": "scout",
                    "member": "a",
                    "input": {
                        "tell_c": False,
                        "notes_to": "relay",
                        "notes": [f"c|the code word is {CODE_WORD}", "nobody|hello"],
                    },
                },
                {"id": "close", "member": "c", "wait_for_message": "60s"},
            ],
        }
    )
    async with build_worker(client, task_queue, team_registry()):
        state = await run_team(client, task_queue, spec)
    closed = next(task for task in state.tasks if task.id == "close")
    assert closed.result is not None and closed.result["code"] == CODE_WORD
    sent = [(m.seq, m.sender, m.to, m.task) for m in state.messages.sent]
    assert sent[:3] == [
        (1, "a", "relay", "scout"),
        (2, "a", "relay", "scout"),
        (3, "relay", "c", "relay/message/1"),
    ]
    refusals = [(r.task, r.reason) for r in state.messages.refused]
    assert ("relay/message/2", "send.to: 'nobody' is not a member of the team (a, c, relay)") in (
        refusals
    )
    assert state.members["relay"].handled == 2


async def test_a_long_lived_member_continues_as_new_between_messages_and_keeps_its_state(
    client: Client, task_queue: str
) -> None:
    start = MemberStart(
        plan_id=f"entity-{uuid.uuid4().hex[:8]}",
        member="keeper",
        agent="keeper",
        correlation_id="entity",
        memory=2,
        history_limit=10,
    )
    now = datetime.now(UTC)
    async with build_worker(client, task_queue, team_registry()):
        handle = await client.start_workflow(
            TEAM_MEMBER_WORKFLOW, start, id=start.workflow_id, task_queue=task_queue
        )
        first_run = handle.first_execution_run_id
        for seq in range(1, 6):
            words = f"m{seq}"
            message = TeamMessage(seq=seq, sender="a", to="keeper", message=words, task="t", at=now)
            await handle.signal(DELIVER_SIGNAL, message)
        malformed = {"seq": "not a number"}
        await handle.signal(DELIVER_SIGNAL, malformed)  # parked, never failing
        await handle.signal("delivr", "misspelt")  # parked too
        await handle.signal(CLOSE_SIGNAL)
        record = MemberRecord.model_validate(await asyncio.wait_for(handle.result(), 90))
        entries = await parked(client, task_queue, 2)
        letters = [await api.dlq_entry(client, entry.entry_id) for entry in entries]
        first = client.get_workflow_handle(start.workflow_id, run_id=first_run)
        assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
        assert await task_failures(handle) == []
    assert record.handled == 5
    assert sorted((letter.failure_type, letter.message, letter.raw) for letter in letters) == [
        (
            "invalid_input",
            "deliver: message: seq: Input should be a valid integer, unable to parse string as "
            "an integer; sender: Field required; to: Field required; message: Field required; "
            "task: Field required; at: Field required",
            malformed,
        ),
        ("invalid_input", "signal 'delivr': a team member takes no such signal", ["misspelt"]),
    ]
    assert {entry.correlation_id for entry in entries} == {"entity"}
    assert [run.seq for run in record.memory] == [4, 5]
    assert [run.result for run in record.memory] == [
        {"got": ["m4"], "remembered": [2, 3], "pad": None},
        {"got": ["m5"], "remembered": [3, 4], "pad": None},
    ]


async def test_a_member_started_with_a_malformed_input_fails_typed_not_its_task(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue, team_registry()):
        handle = await client.start_workflow(
            TEAM_MEMBER_WORKFLOW,
            {"plan_id": "p", "member": "m"},
            id=f"member-hostile-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 60)
        assert await task_failures(handle) == []
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == FailureType.INVALID_SPEC
    assert cause.message.startswith("member start: agent: Field required")
