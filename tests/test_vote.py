"""The Vote workflow on the real dev server (and the time-skipping one for the deadline): decided
by two approvals of three, rejected early with the third voter's run cancelled (from the history
and the agent's own view), no quorum at the deadline, faulty voters abstaining while the others
decide, a plain-JSON start with a bad field, a cancelled vote, and `coord vote start --wait` /
`coord vote state`."""

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.retry import LOST_RUNS_ALLOWED
from coord.models.vote.spec import VOTE_REQUESTED, Choice, VoteSpec, VoteState, VoteStatus
from coord.models.wire import contract
from coord.starter import api
from coord.starter.commands.vote import VOTES
from coord.starter.exits import ExitCode
from coord.starter.progress import outcome_with_progress
from coord.worker import build_worker
from tests.helpers import eventually, orphaned, queries_refused_soon
from tests.test_hostile_input import closed_with, plain_json
from tests.test_saga_history import _patch_markers
from tests.workers import COORD, run, server_env

YES = {"approve": True, "reason": "looks good"}
NO = {"approve": False, "reason": "no rollback plan"}


@dataclass
class Voters:
    """Voter agents by name: an answer (returned once the test releases the voter, when it is
    gated), `hold` (heartbeats until its run is cancelled), `fail`, `sleep` (past its
    timeout, without heartbeats), or `absent` (no worker serves it)."""

    behaviour: dict[str, Any]
    gated: set[str] = field(default_factory=set)
    released: dict[str, asyncio.Event] = field(default_factory=dict)
    proposals: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)

    def registry(self) -> AgentRegistry:
        registry = AgentRegistry()
        for name, behaviour in self.behaviour.items():
            self.released[name] = asyncio.Event()
            if behaviour != "absent":
                registry.register(name)(self._agent(name))
        return registry

    def release(self, name: str) -> None:
        self.released[name].set()

    def _agent(self, name: str) -> Any:
        async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
            assert event.event.type == VOTE_REQUESTED
            self.proposals[name] = event.payload
            while name in self.gated and not self.released[name].is_set():
                activity.heartbeat()
                await asyncio.sleep(0.1)
            return await self._act(name, self.behaviour[name])

        return agent

    async def _act(self, name: str, behaviour: Any) -> Mapping[str, Any]:
        if behaviour == "hold":
            try:
                while True:
                    activity.heartbeat()
                    await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                self.cancelled.add(name)
                raise
        if behaviour == "fail":
            raise ApplicationError("the model endpoint is down", type="temporary_failure")
        if behaviour == "sleep":
            await asyncio.sleep(30)
        result: Mapping[str, Any] = behaviour
        return result


def vote(voters: list[str], **fields: Any) -> VoteSpec:
    return VoteSpec.model_validate(
        {
            "vote_id": f"v-{uuid.uuid4().hex[:8]}",
            "proposal": {"release": "2.4.0", "change": "enable canary"},
            "voters": voters,
            "retry": {"max_retries": 0},
            **fields,
        }
    )


async def ballot_cast(
    handle: WorkflowHandle[Any, VoteState], voter: str, timeout: float = 30
) -> None:
    async def cast() -> bool:
        state = await handle.query(contract.STATE_QUERY, result_type=VoteState)
        return state.ballot_of(voter) is not None

    await eventually(cast, timeout)


async def cancel_requested(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The summaries of the activities whose cancel the workflow requested."""
    summaries: dict[int, str] = {}
    requested = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = event.user_metadata.summary
            summaries[event.event_id] = json.loads(summary.data) if summary.data else ""
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED:
            scheduled = event.activity_task_cancel_requested_event_attributes.scheduled_event_id
            requested.append(summaries[scheduled])
    return requested


async def voter_queues(handle: WorkflowHandle[Any, Any]) -> dict[str, str]:
    """The task queue each ballot's run was dispatched to, by its summary."""
    queues = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = json.loads(event.user_metadata.summary.data)
            queues[summary] = event.activity_task_scheduled_event_attributes.task_queue.name
    return queues


async def test_two_approvals_of_three_decide(client: Client, task_queue: str) -> None:
    voters = Voters({"alice": NO, "bob": YES, "carol": YES}, gated={"bob", "carol"})
    spec = vote(["alice", "bob", "carol"])
    async with build_worker(client, task_queue, voters.registry()):
        handle = await api.start_vote(client, spec, queue=task_queue)
        await ballot_cast(handle, "alice")
        voters.release("bob")
        await ballot_cast(handle, "bob")
        state = await handle.query(contract.STATE_QUERY, result_type=VoteState)
        assert state.status == VoteStatus.VOTING  # 1 approve, 1 reject: carol decides
        voters.release("carol")
        state = await asyncio.wait_for(handle.result(), 30)
    assert state.status == VoteStatus.DECIDED
    assert [(b.voter, b.choice, b.reason) for b in state.ballots] == [
        ("alice", Choice.REJECT, "no rollback plan"),
        ("bob", Choice.APPROVE, "looks good"),
        ("carol", Choice.APPROVE, "looks good"),
    ]
    assert state.needed == 2 and state.cancelled == []
    assert state.summary == "2 approve, 1 reject, 0 abstain of 3 voters; 2 approvals needed"
    assert voters.proposals == dict.fromkeys(["alice", "bob", "carol"], spec.proposal)
    description = await handle.describe()
    assert description.typed_search_attributes.get(contract.COORD_STATUS) == "decided"
    assert description.typed_search_attributes.get(contract.COORD_PATTERN) == "vote"
    served_here = dict.fromkeys(["ballot: alice", "ballot: bob", "ballot: carol"], task_queue)
    assert await voter_queues(handle) == served_here
    events = [event async for event in handle.fetch_history_events()]
    assert _patch_markers(events) == ["vote-patches-at-once-4"], "its patches asked at once"


async def test_a_voter_served_elsewhere_runs_on_its_own_queue(
    client: Client, task_queue: str
) -> None:
    """The vote's worker serves alice and bob: their runs stay on the vote's queue, handed over
    at once, never local (a local run would not hear the vote's cancel). Carol's worker serves
    her alone, on her own queue."""
    voters = Voters({"alice": YES, "bob": NO, "carol": YES})
    registry = voters.registry()
    async with (
        build_worker(client, task_queue, registry, only=["alice", "bob"]),
        build_worker(client, task_queue, registry.only(["carol"]), workflows=False),
    ):
        handle = await api.start_vote(client, vote(["alice", "bob", "carol"]), queue=task_queue)
        state = await asyncio.wait_for(handle.result(), 30)
    assert state.status == VoteStatus.DECIDED
    assert await voter_queues(handle) == {
        "ballot: alice": task_queue,
        "ballot: bob": task_queue,
        "ballot: carol": contract.agent_task_queue("carol", task_queue),
    }
    events = [event async for event in handle.fetch_history_events()]
    markers = [
        event.marker_recorded_event_attributes.marker_name
        for event in events
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    assert markers.count("core_local_activity") == 1, "the placements' look-up, no local ballot"
    upserted = [
        event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        for event in events
        if event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    status = contract.COORD_STATUS.name
    statuses = [fields[status].data for fields in upserted if status in fields]
    assert statuses == [b'"decided"'], "`voting` came with the start"
    signals = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
    assert not [e for e in events if e.event_type == signals], "no chain runs: nothing sent"


async def test_two_rejections_reject_early_and_cancel_the_third_run(
    client: Client, task_queue: str
) -> None:
    """Alice and Bob answer once Carol's agent runs, so her run is cancelled while it runs."""
    voters = Voters({"alice": NO, "bob": NO, "carol": "hold"}, gated={"alice", "bob"})
    spec = vote(["alice", "bob", "carol"])
    async with build_worker(client, task_queue, voters.registry()):
        handle = await api.start_vote(client, spec, queue=task_queue)
        await eventually(lambda: asyncio.sleep(0, "carol" in voters.proposals))
        voters.release("alice")
        voters.release("bob")
        state = await asyncio.wait_for(handle.result(), 30)
        await eventually(lambda: asyncio.sleep(0, "carol" in voters.cancelled))
    assert state.status == VoteStatus.REJECTED
    assert sorted((b.voter, b.choice) for b in state.ballots) == [
        ("alice", Choice.REJECT),
        ("bob", Choice.REJECT),
    ]
    assert state.cancelled == ["carol"]
    assert await cancel_requested(handle) == ["ballot: carol"]


FAULT_TIMEOUT = 180.0
"""The bound of the waits on a faulty voter: `sleep`'s six lost runs, each a heartbeat timeout
the server notices and a retry, take 12 s here, several times that on a loaded machine."""


@pytest.mark.parametrize("fault", ["fail", "sleep", "absent"])
async def test_a_faulty_voter_abstains_and_the_others_decide(
    client: Client, task_queue: str, fault: str
) -> None:
    """`sleep` sends no heartbeat: the heartbeat timeout ends each attempt long before its
    timeout, and the server ending an attempt no worker reported spends no retry of the voter's,
    but a run lost that often fails `timeout`; `absent` has no worker polling its queue: its
    run is never started, and its schedule-to-start timeout ends it (1 s; the voters that have
    a worker get a minute, which a loaded worker may need to take a task)."""
    voters = Voters({"alice": fault, "bob": YES, "carol": YES}, gated={"bob", "carol"})
    spec = vote(
        ["alice", "bob", "carol"],
        timeout="5m",
        heartbeat_timeout="1s",
        schedule_to_start_timeout="1s" if fault == "absent" else "1m",
        retry={"max_retries": 0, "initial_delay": "100ms", "max_delay": "100ms"},
    )
    async with build_worker(client, task_queue, voters.registry()):
        handle = await api.start_vote(client, spec, queue=task_queue)
        await ballot_cast(handle, "alice", FAULT_TIMEOUT)
        voters.release("bob")
        voters.release("carol")
        state = await asyncio.wait_for(handle.result(), FAULT_TIMEOUT)
    assert state.status == VoteStatus.DECIDED
    abstained = state.ballot_of("alice")
    assert abstained is not None and abstained.choice == Choice.ABSTAIN
    expected = {
        "fail": "temporary_failure: the model endpoint is down",
        "sleep": f"timeout: agent 'alice': the run ended {LOST_RUNS_ALLOWED + 1} times without a "
        "report from its worker (the server timed it out: the worker died or could not reach "
        "the server, or the agent stopped heartbeating)",
        "absent": "agent_unavailable: no worker took agent 'alice' on its queue "
        f"{contract.agent_task_queue('alice', task_queue)!r} within 1s",
    }
    assert abstained.reason == expected[fault]
    assert state.summary == "2 approve, 0 reject, 1 abstain of 3 voters; 2 approvals needed"


async def test_no_quorum_at_the_deadline(time_env: WorkflowEnvironment, task_queue: str) -> None:
    """Two voters' endpoint is down and their runs back off 20 minutes between attempts, longer
    than the hour the vote has; the server's clock skips through the backoff timers."""
    client = time_env.client
    voters = Voters({"alice": YES, "bob": "fail", "carol": "fail"})
    retry = {"max_retries": None, "initial_delay": "20m", "max_delay": "20m"}
    spec = vote(["alice", "bob", "carol"], deadline="1h", timeout="3h", retry=retry)
    async with build_worker(client, task_queue, voters.registry()):
        handle = await api.start_vote(client, spec, queue=task_queue)
        state = await asyncio.wait_for(handle.result(), 30)
    assert state.status == VoteStatus.NO_QUORUM
    assert [(b.voter, b.choice, b.reason) for b in state.ballots] == [
        ("alice", Choice.APPROVE, "looks good"),
        ("bob", Choice.ABSTAIN, "no answer in time"),
        ("carol", Choice.ABSTAIN, "no answer in time"),
    ]
    assert state.deadline is not None and state.ended_at is not None
    assert timedelta() <= state.ended_at - state.deadline < timedelta(seconds=5)
    assert sorted(await cancel_requested(handle)) == ["ballot: bob", "ballot: carol"]


BAD_FIELD = {"vote_id": "bad", "proposal": {}, "voters": ["a", "b"], "deadline": "soon"}
GOOD = {"vote_id": "good", "proposal": {}, "voters": ["a", "b"]}


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([json.dumps(BAD_FIELD)], "vote spec: deadline: 'soon' is not a duration; use 90s"),
        ([json.dumps(GOOD), "{}"], "vote spec: expected one input, got 2"),
        (["{not json"], "vote spec: cannot be decoded"),
        ([], "vote spec: no input given"),
    ],
)
async def test_a_plain_json_start_that_is_not_a_spec_fails_naming_why(
    client: Client, task_queue: str, inputs: list[str], message: str
) -> None:
    """What `temporal workflow start --type Vote --input ...` sends: the run fails `invalid_spec`
    at once, never a workflow task (two inputs used to be a TypeError on every task)."""
    async with build_worker(client, task_queue, AgentRegistry()):
        handle = await client.start_workflow(
            contract.VOTE_WORKFLOW,
            args=[plain_json(text) for text in inputs],
            id=f"vote-bad-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        failure = await closed_with(handle)
    assert failure.type == "invalid_spec"
    assert failure.message.startswith(message)


async def test_coord_vote_start_wait_and_state(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Voters named after demo agents, so the CLI's pre-start check (the demo registry) knows
    them; the test's worker answers for them."""
    names = ["ux-designer", "python-pro", "database-specialist"]
    voters = Voters(dict(zip(names, [NO, NO, "hold"], strict=True)))
    vote_id = f"cli-{uuid.uuid4().hex[:8]}"
    file = tmp_path / "vote.yaml"
    file.write_text(
        json.dumps({"vote_id": vote_id, "proposal": {"release": "2.4.0"}, "voters": names})
    )
    env = server_env(dev_env, task_queue)
    async with build_worker(client, task_queue, voters.registry()):
        code, out, err = await run(COORD, "vote", "start", str(file), "--wait", env=env)
    assert code == ExitCode.VOTE_NOT_DECIDED, err
    # each ballot on stderr, once, though the vote may end before the first look at it
    for voter in names[:2]:
        assert err.count(f"{voter}: reject (no rollback plan)\n") == 1, err
    started, table = out.split("\n", 1)
    assert started.startswith(f"started vote-{vote_id}: http")
    code, out, _ = await run(COORD, "vote", "state", vote_id, env=env)
    assert code == ExitCode.OK
    assert out == table
    rows = [line.split("|") for line in out.splitlines()[2:5]]
    assert [[cell.strip() for cell in row[:3]] for row in rows] == [
        ["ux-designer", "reject", "no rollback plan"],
        ["python-pro", "reject", "no rollback plan"],
        ["database-specialist", "-", "cancelled: the outcome was known"],
    ]
    assert (
        f"Vote {vote_id}: rejected, 0 approve, 2 reject, 0 abstain of 3 voters; 2 approvals needed"
        in out
    )
    code, out, _ = await run(COORD, "vote", "state", vote_id, "--json", env=env)
    assert VoteState.model_validate_json(out).cancelled == ["database-specialist"]
    code, _, err = await run(COORD, "vote", "state", "nope", env=env)
    assert (code, err) == (ExitCode.NOT_FOUND, "error: vote 'nope' does not exist\n")


async def test_vote_wait_whose_worker_stopped_gives_up_as_no_worker(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`vote start --wait` reads the ballots while it waits (`ballots_cast`) with the `state`
    query, which it asked without a bound: each look waited 29 s for the stopped worker, whose
    pollers the server lists for a while, so the wait for a worker never began. Now each look
    is `answered`, and one refused for want of a worker counts as none: the wait gives up after
    `--no-worker-timeout` (here 1 s; `queries_refused_soon`: 1 s of patience and a 1 s
    re-ask, not 25), exit 9 (`no_worker`)."""
    queries_refused_soon(monkeypatch)
    names = ["ux-designer", "python-pro", "database-specialist"]
    voters = Voters(dict.fromkeys(names, "hold"))
    [handle] = await orphaned(
        client,
        task_queue,
        api.start_vote(client, vote(names), queue=task_queue),
        registry=voters.registry(),
    )
    lines: list[str] = []
    began = time.monotonic()
    with pytest.raises(api.NoWorker) as refusal:
        await asyncio.wait_for(
            outcome_with_progress(
                client,
                handle,
                VOTES.outcome(handle, client),
                VOTES.watch,
                lines.append,
                name="the vote",
                task_queue=task_queue,
                no_worker_timeout=1,
            ),
            60,
        )
    took = time.monotonic() - began
    await handle.terminate()
    assert lines == [
        f"warning: no worker answers on task queue {task_queue!r}; the vote waits for one "
        "(start it with `coord worker`)"
    ]
    assert str(refusal.value) == (
        f"no worker answered on task queue {task_queue!r} for 1s; {handle.id} stays started "
        "and runs once a worker polls (`coord worker`)"
    )
    # Two looks (1 s of patience and a 1 s re-ask each) a second apart, and a few round trips.
    assert took < 20, f"{took:.1f} s"


async def test_a_cancelled_vote_cancels_its_runs_and_keeps_its_record(
    client: Client, task_queue: str
) -> None:
    voters = Voters({"alice": YES, "bob": "hold", "carol": "hold"})
    spec = vote(["alice", "bob", "carol"])
    async with build_worker(client, task_queue, voters.registry()):
        handle = await api.start_vote(client, spec, queue=task_queue)
        await ballot_cast(handle, "alice")
        await eventually(lambda: asyncio.sleep(0, {"bob", "carol"} <= voters.proposals.keys()))
        await handle.cancel()
        state = await asyncio.wait_for(api.vote_outcome(handle), 30)
        await eventually(lambda: asyncio.sleep(0, voters.cancelled == {"bob", "carol"}))
    assert state.status == VoteStatus.CANCELLED
    assert [b.voter for b in state.ballots] == ["alice"]
    assert state.cancelled == ["bob", "carol"]
    assert await api.vote_state(client, spec.vote_id) == state


async def test_a_cancel_in_the_same_workflow_task_as_the_deciding_ballot_leaves_it_decided(
    client: Client, task_queue: str
) -> None:
    """Bob's deciding answer and the cancel wait together while no workflow worker runs; the
    next workflow task sees both, and the outcome stands (the run completes, not cancelled)."""
    voters = Voters({"alice": YES, "bob": YES, "carol": "hold"}, gated={"bob"})
    spec = vote(["alice", "bob", "carol"])
    async with build_worker(client, task_queue, voters.registry(), workflows=False):
        async with build_worker(client, task_queue, AgentRegistry()):
            handle = await api.start_vote(client, spec, queue=task_queue)
            await ballot_cast(handle, "alice")
        voters.release("bob")
        await eventually(lambda: bob_answered(handle))
        await handle.cancel()
        async with build_worker(client, task_queue, AgentRegistry()):
            state = await asyncio.wait_for(handle.result(), 30)
    assert state.status == VoteStatus.DECIDED
    assert state.cancelled == ["carol"]


async def bob_answered(handle: WorkflowHandle[Any, Any]) -> bool:
    """Bob's run has completed (recorded in the history, whether or not a workflow task ran)."""
    summaries: dict[int, str] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summaries[event.event_id] = json.loads(event.user_metadata.summary.data)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
            if summaries[scheduled] == "ballot: bob":
                return True
    return False


async def test_coord_vote_cancel(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """A running vote is cancelled (its runs with it, the record kept); a vote that has ended
    is refused with exit 4 (conflict), an unknown one with exit 5 (not found)."""
    voters = Voters({"alice": YES, "bob": "hold", "carol": "hold"})
    spec = vote(["alice", "bob", "carol"])
    env = server_env(dev_env, task_queue)
    async with build_worker(client, task_queue, voters.registry()):
        handle = await api.start_vote(client, spec, queue=task_queue)
        await ballot_cast(handle, "alice")
        code, out, err = await run(COORD, "vote", "cancel", spec.vote_id, env=env)
        assert (code, err) == (ExitCode.OK, "")
        assert out == (
            f"cancellation requested for vote {spec.vote_id}; its voters' runs are cancelled\n"
        )
        state = await asyncio.wait_for(api.vote_outcome(handle), 30)
        await eventually(lambda: asyncio.sleep(0, voters.cancelled == {"bob", "carol"}))
    assert state.status == VoteStatus.CANCELLED and state.cancelled == ["bob", "carol"]
    code, _, err = await run(COORD, "vote", "cancel", spec.vote_id, env=env)
    assert code == ExitCode.CONFLICT
    assert err == f"error: vote {spec.vote_id!r} has already ended (cancelled); nothing to cancel\n"
    code, _, err = await run(COORD, "vote", "cancel", "nope", env=env)
    assert (code, err) == (ExitCode.NOT_FOUND, "error: vote 'nope' does not exist\n")
