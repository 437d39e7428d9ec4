"""Plans and votes speak events, on the real dev server: the example plan run with a correlation id
announces its lifecycle into the correlation's chain (every event linked by its causation id, in
one tree rooted at `PlanStarted`), a chain subscription on `ApprovalRequested` runs its agent
while a task awaits approval, a vote's ballots and `DecisionMade` land in the chain, and no
announcement nobody subscribes to is dead-lettered."""

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.worker import Worker

from coord.models.chain.spec import ChainSpec, ChainState
from coord.models.dlq.letter import DlqSelection
from coord.models.events.envelope import LIFECYCLE_NOTICES, EventEnvelope
from coord.models.events.taxonomy import ANNOUNCEMENTS, BY_TYPE
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentContext
from coord.models.plan.spec import ApprovalGate, ApprovalRequest, PlanSpec, PlanStatus, TaskState
from coord.models.wire.specs import load_spec
from coord.starter import api
from coord.starter.demo import plan_run
from coord.worker import WORKFLOWS, build_worker, default_registry
from tests.helpers import (
    API,
    TEST_PLAN,
    WIREFRAME,
    completed,
    eventually,
    phase1,
    quick_demo_plan_steps,
)
from tests.test_plan_demo import PLAN_EXAMPLE
from tests.test_vote import YES, Voters, vote

SIGNAL_INITIATED = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
SIGNAL_FAILED = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED


def watching(*events: str) -> ChainSpec:
    """A chain whose one agent (`approval-desk`) answers each of `events`; its depth limit is
    far below the plan's length, which never counts as a loop."""
    return ChainSpec.model_validate(
        {
            "name": "plan-watch",
            "triggers": list(events),
            "alerts": None,
            "max_causation_depth": 3,
            "subscriptions": [
                {
                    "agent": "approval-desk",
                    "events": list(events),
                    "publishes": {"on_success": "ApprovalPrepared"},
                }
            ],
        }
    )


async def approval_desk(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """What a chain's agent prepares for a person about to approve."""
    return {"prepared_for": event.payload.get("task", "")}


def tree_roots(entries: list[TimelineEntry], source: str) -> set[str]:
    """Follows every event of `source` to the first one whose cause is not `source`'s."""
    by_id = {entry.event_id: entry for entry in entries}
    mine = [entry for entry in entries if entry.agent == source]
    roots = set()
    for entry in mine:
        while entry.causation_id in by_id and by_id[entry.causation_id].agent == source:
            entry = by_id[entry.causation_id]
        roots.add(entry.event)
    return roots


async def timeline_with(client: Client, correlation_id: str, last: str) -> list[TimelineEntry]:
    """The chain's timeline once it holds an event of type `last`."""
    timeline: list[TimelineEntry] = []

    async def arrived() -> bool:
        nonlocal timeline
        timeline = await api.chain_timeline(client, correlation_id)
        return any(entry.event == last for entry in timeline)

    await eventually(arrived, timeout=60)
    return timeline


async def test_the_seed_plan_announces_its_lifecycle_into_its_correlations_chain(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    quick_demo_plan_steps(monkeypatch)
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    spec = plan_run(
        load_spec(PlanSpec, PLAN_EXAMPLE), f"seed-announcing-{uuid.uuid4().hex[:8]}", {}
    )
    release = spec.tasks[-1].model_copy(update={"approval": ApprovalGate()})
    spec = spec.model_copy(
        update={"correlation_id": correlation_id, "tasks": [*spec.tasks[:-1], release]}
    )
    registry = default_registry(demo_agents=True)
    registry.register("approval-desk")(approval_desk)
    async with build_worker(client, task_queue, registry):
        chain = await api.start_chain(
            client, watching("ApprovalRequested"), correlation_id, queue=task_queue
        )
        handle = await api.start_plan(client, spec, queue=task_queue)
        timeline = await timeline_with(client, correlation_id, "ApprovalPrepared")
        await api.approve_task(client, spec.plan_id, ApprovalRequest(task="release"))
        state = await api.plan_outcome(handle)
        assert state.status == PlanStatus.COMPLETED
        timeline = await timeline_with(client, correlation_id, "PlanCompleted")
        chain_state = await api.chain_state(client, correlation_id)
        await api.close_chain(client, correlation_id)
        await chain.result()
    source = f"/plan/{spec.plan_id}"
    announced = [entry for entry in timeline if entry.agent == source]
    kinds = {entry.event for entry in announced}
    assert kinds >= {
        "PlanStarted",
        "TaskStarted",
        "TaskCompleted",
        "AgentHandoff",
        "DependencyResolved",
        "ReviewRequested",
        "ReviewCompleted",
        "VerificationCompleted",
        "ApprovalRequested",
        "DecisionMade",
        "PlanCompleted",
    }
    completed = [entry.payload["task"] for entry in announced if entry.event == "TaskCompleted"]
    assert sorted(completed) == sorted(task.id for task in spec.tasks)
    assert tree_roots(timeline, source) == {"PlanStarted"}
    for entry in announced:
        BY_TYPE[entry.event].payload.model_validate(entry.payload)
    by_id = {entry.event_id: entry for entry in timeline}
    prepared = next(entry for entry in timeline if entry.event == "ApprovalPrepared")
    requested = by_id[prepared.causation_id or ""]
    assert (requested.event, requested.payload["task"]) == ("ApprovalRequested", "release")
    decided = next(entry for entry in announced if entry.event == "DecisionMade")
    assert decided.causation_id == requested.event_id
    assert decided.payload["outcome"] == "approved"
    started = next(
        e for e in announced if e.event == "TaskStarted" and e.payload["task"] == "release"
    )
    assert started.causation_id == decided.event_id
    assert {task.state for task in state.tasks} == {TaskState.SUCCEEDED}
    assert (chain_state.rejected_count, chain_state.dead_lettered) == (0, 0)
    assert await api.dlq_entries(client, DlqSelection(correlation_id=correlation_id)) == []


async def test_a_votes_ballots_and_decision_land_in_the_chain(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    voters = Voters({"qa": YES, "security": YES, "ops": YES})
    registry = voters.registry()
    registry.register("approval-desk")(approval_desk)
    spec = vote(["qa", "security", "ops"], correlation_id=correlation_id)
    async with build_worker(client, task_queue, registry):
        await api.start_chain(client, watching("DecisionMade"), correlation_id, queue=task_queue)
        state = await api.vote_outcome(await api.start_vote(client, spec, queue=task_queue))
        timeline = await timeline_with(client, correlation_id, "ApprovalPrepared")
        chain_state = await api.chain_state(client, correlation_id)
        await api.close_chain(client, correlation_id)
    assert state.status.value == "decided"
    source = f"/vote/{spec.vote_id}"
    announced = [entry for entry in timeline if entry.agent == source]
    assert [entry.event for entry in announced][:1] == ["VoteOpened"]
    ballots = {entry.event_id: entry for entry in announced if entry.event == "BallotCast"}
    assert len(ballots) >= 2
    decided = next(entry for entry in announced if entry.event == "DecisionMade")
    assert decided.causation_id in ballots
    assert decided.payload["outcome"] == "decided"
    assert tree_roots(timeline, source) == {"VoteOpened"}
    prepared = next(entry for entry in timeline if entry.event == "ApprovalPrepared")
    assert prepared.causation_id == decided.event_id
    assert (chain_state.rejected_count, chain_state.dead_lettered) == (0, 0)


async def notes(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return {"notes": "2.4.0: faster queries"}


async def test_without_a_chain_the_correlation_table_reads_the_plans_and_votes_records(
    client: Client, task_queue: str
) -> None:
    """No chain runs: the plan's sends stop at the first that finds none, and `coord events`
    reads the events from the plan's record and its vote's, each after its cause. The vote is
    found by its search attributes, which it writes as it begins: the listing may lag them."""
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    spec = PlanSpec.model_validate(
        {
            "plan_id": f"vote-task-announcing-{uuid.uuid4().hex[:8]}",
            "correlation_id": correlation_id,
            "tasks": [
                {"id": "notes", "agent": "notes"},
                {
                    "id": "approve",
                    "depends_on": ["notes"],
                    "input": {"release": "2.4.0"},
                    "vote": {"voters": ["qa", "security", "ops"]},
                },
            ],
        }
    )
    voters = Voters({"qa": YES, "security": YES, "ops": YES})
    registry = voters.registry()
    registry.register("notes")(notes)
    async with build_worker(client, task_queue, registry):
        state = await api.plan_outcome(await api.start_plan(client, spec, queue=task_queue))
    assert state.status == PlanStatus.COMPLETED

    async def vote_listed() -> bool:
        kinds = {entry.event for entry in await api.correlation_events(client, correlation_id)}
        return "VoteOpened" in kinds

    await eventually(vote_listed, timeout=30)
    table = await api.correlation_events(client, correlation_id)
    kinds = [entry.event for entry in table]
    assert kinds[0] == "PlanStarted" and "PlanCompleted" in kinds
    assert {"VoteOpened", "BallotCast", "DecisionMade", "DependencyResolved"} <= set(kinds)
    position = {entry.event_id: n for n, entry in enumerate(table)}
    for n, entry in enumerate(table[1:], start=1):
        assert entry.causation_id in position and position[entry.causation_id] < n
    opened = next(entry for entry in table if entry.event == "VoteOpened")
    cause = table[position[opened.causation_id or ""]]
    assert (cause.event, cause.payload["task"]) == ("TaskStarted", "approve")
    assert state.events == [entry for entry in table if entry.agent == f"/plan/{spec.plan_id}"]


def _announcing_plan(correlation_id: str) -> PlanSpec:
    """Three tasks of local runs, one after another: a dozen events to announce."""
    tasks = [{"id": "a", "agent": "notes"}, {"id": "b", "agent": "notes", "depends_on": ["a"]}]
    tasks.append({"id": "c", "agent": "notes", "depends_on": ["b"]})
    plan_id = f"quiet-{uuid.uuid4().hex[:8]}"
    return PlanSpec.model_validate(
        {"plan_id": plan_id, "correlation_id": correlation_id, "tasks": tasks}
    )


def _signals_sent(events: list[HistoryEvent]) -> list[HistoryEvent]:
    return [e for e in events if e.event_type == SIGNAL_INITIATED]


async def test_a_plan_whose_chain_does_not_run_sends_it_nothing(
    client: Client, task_queue: str
) -> None:
    """The plan asks whether its correlation's chain runs with where its agents run (asked
    ahead as the worker creates its instance), and holds its events until the answer: none
    runs, so it signals nothing (its record keeps them);
    with the chain running, every event reaches it (in any order: they go out together)."""
    registry = default_registry()
    registry.register("notes")(notes)
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue, registry) as workers:
        lonely = await api.start_plan(client, _announcing_plan(correlation_id), queue=task_queue)
        state = await api.plan_outcome(lonely)
        events = [e async for e in lonely.fetch_history_events()]
        await api.start_chain(client, watching("Unwatched"), correlation_id, queue=task_queue)
        watched = await api.start_plan(client, _announcing_plan(correlation_id), queue=task_queue)
        watched_state = await api.plan_outcome(watched)
        timeline = await api.chain_timeline(client, correlation_id)
    assert state.status == PlanStatus.COMPLETED and len(state.events) >= 8
    assert _signals_sent(events) == []
    assert workers.lookahead is not None and workers.lookahead.answered_ahead == 2, "asked ahead"
    assert sorted(e.event_id for e in timeline) == sorted(e.event_id for e in watched_state.events)


async def test_a_plan_whose_worker_cannot_say_whether_its_chain_runs_sends_the_first_alone(
    client: Client, task_queue: str
) -> None:
    """A worker running the workflows without their activities cannot answer the question
    (the agents run on their own queues' workers): the plan's first event goes alone, and
    finding no chain, the rest stay in its record."""
    registry = default_registry()
    registry.register("notes")(notes)
    spec = _announcing_plan(f"c-{uuid.uuid4().hex[:8]}")
    workflows_alone = Worker(client, task_queue=task_queue, workflows=list(WORKFLOWS))
    async with workflows_alone, build_worker(client, task_queue, registry, workflows=False):
        handle = await api.start_plan(client, spec, queue=task_queue)
        state = await api.plan_outcome(handle)
        events = [e async for e in handle.fetch_history_events()]
    assert state.status == PlanStatus.COMPLETED and len(state.events) >= 8
    assert len(_signals_sent(events)) == 1
    assert [e.event_type for e in events].count(SIGNAL_FAILED) == 1


async def test_a_vote_whose_chain_does_not_run_sends_it_nothing(
    client: Client, task_queue: str
) -> None:
    """The vote asks whether its chain runs with where its voters run (asked ahead as the
    worker creates its instance) and holds its events until the answer: without a chain it
    signals nothing; with one, every event reaches it, in the vote's order."""
    voters = Voters({"qa": YES, "security": YES, "ops": YES})
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    spec = vote(["qa", "security", "ops"], correlation_id=correlation_id)
    async with build_worker(client, task_queue, voters.registry()) as workers:
        lonely = await api.start_vote(client, spec, queue=task_queue)
        state = await api.vote_outcome(lonely)
        events = [e async for e in lonely.fetch_history_events()]
        await api.start_chain(client, watching("Unwatched"), correlation_id, queue=task_queue)
        again = spec.model_copy(update={"vote_id": f"{spec.vote_id}-again"})
        watched = await api.vote_outcome(await api.start_vote(client, again, queue=task_queue))

        async def all_arrived_in_order() -> bool:
            timeline = await api.chain_timeline(client, correlation_id)
            return [e.event_id for e in timeline] == [e.event_id for e in watched.events]

        await eventually(all_arrived_in_order)
    assert len(state.events) >= 3 and _signals_sent(events) == []
    assert workers.lookahead is not None and workers.lookahead.answered_ahead == 2, "asked ahead"


NEVER_PARKED = ANNOUNCEMENTS | LIFECYCLE_NOTICES
"""What a chain refuses without parking: announcements, and notices about its own handling."""


def refused_kinds(state: ChainState) -> list[str]:
    """The types of the events the chain refused as too deep (`event ID (Type): causation...`)."""
    return [
        r.reason.split("(")[1].split(")")[0]
        for r in state.rejected
        if "causation depth" in r.reason
    ]


async def test_a_chain_that_votes_on_every_decision_is_stopped_at_its_depth_limit(
    client: Client, task_queue: str
) -> None:
    """Each vote's `DecisionMade` opens the next vote: `VoteOpened` counts one level deeper than
    the decision that caused it, so the fourth vote's events are refused at depth 4 (recorded,
    never parked) and no fifth vote starts."""
    correlation_id = f"loop-{uuid.uuid4().hex[:8]}"
    spec = ChainSpec.model_validate(
        {
            "name": "vote-loop",
            "triggers": ["Go"],
            "alerts": None,
            "max_causation_depth": 3,
            "subscriptions": [
                {
                    "name": "again",
                    "events": ["Go", "DecisionMade"],
                    "vote": {"voters": ["a"]},
                    "publishes": {"on_success": "Agreed", "on_failure": "Refused"},
                }
            ],
        }
    )
    voters = Voters({"a": YES})
    go = EventEnvelope.new("Go", "/test", payload={"n": 1}, correlation_id=correlation_id)
    query = f"CoordPattern = 'vote' AND CorrelationId = '{correlation_id}'"
    async with build_worker(client, task_queue, voters.registry()):
        await api.start_chain(client, spec, correlation_id, queue=task_queue)
        await api.publish(client, go)

        async def decision_refused() -> bool:
            state = await api.chain_state(client, correlation_id)
            return any("(DecisionMade): causation depth 4" in r.reason for r in state.rejected)

        await eventually(decision_refused, timeout=90)

        async def only_the_agents_events_parked() -> bool:
            """Parking is counted once it is done: the count catches up with the agents'
            refused events, and would pass it if an announcement were parked."""
            state = await api.chain_state(client, correlation_id)
            parkable = [kind for kind in refused_kinds(state) if kind not in NEVER_PARKED]
            return state.dead_lettered == len(parkable)

        await eventually(only_the_agents_events_parked)
        state = await api.chain_state(client, correlation_id)
        await api.close_chain(client, correlation_id)

        async def four_votes() -> bool:
            return len([v async for v in client.list_workflows(query)]) == 4

        await eventually(four_votes)
    assert {"VoteOpened", "BallotCast", "DecisionMade"} <= set(refused_kinds(state))


async def test_without_a_chain_the_table_reads_an_aggregators_emitted_event(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"agg-{uuid.uuid4().hex[:8]}"
    spec = phase1(correlation_id=correlation_id)
    events = [completed(kind, correlation_id) for kind in (TEST_PLAN, WIREFRAME, API)]
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)
        for envelope in events:
            await handle.signal("event", envelope.model_dump(mode="json"))
        state = await handle.result()
        table = await api.correlation_events(client, correlation_id)
    assert state.emitted is not None
    assert [(row.event, row.event_id) for row in table] == [
        ("Phase1CompletedEvent", state.emitted.event.id)
    ]
