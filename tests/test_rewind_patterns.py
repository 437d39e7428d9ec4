"""A rewound correlation's patterns, without a server: the slots, ballots, steps and tasks
their copies take from their originals as they stood just before the rewind point, how the
copies start, what they make again, and how `coord diff` pairs each with its original."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coord.models.aggregator.model import AggregatorModel
from coord.models.aggregator.spec import AggregatorSpec, AggregatorState, AggregatorStatus
from coord.models.events.envelope import EventEnvelope
from coord.models.events.rewind import RewindOrigin
from coord.models.events.timeline import TimelineEntry
from coord.models.plan.rewind import plan_past
from coord.models.plan.spec import PlanSpec, PlanState, TaskRecord, TaskState
from coord.models.rewind.diff import ListedRun, pair_outcomes
from coord.models.rewind.patterns import (
    PatternRun,
    aggregator_past,
    copy_name,
    saga_past,
    vote_past,
)
from coord.models.rewind.plan import plan_rewind
from coord.models.saga.spec import CompletedStep, SagaRewind, SagaState
from coord.models.vote.spec import Ballot, Choice, VoteModel, VoteSpec, VoteState, VoteStatus
from coord.models.wire.specs import SpecError, read_document
from tests.conftest import ROOT, feature_deployment

START = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
ORIGIN = RewindOrigin(original="story", at="e4")


def row(
    seq: int, event: str, source: str = "/someone", cause: str | None = None, **payload: Any
) -> TimelineEntry:
    return TimelineEntry(
        seq=seq,
        time=START + timedelta(seconds=seq),
        event=event,
        agent=source,
        correlation_id="story",
        event_id=f"e{seq}",
        causation_id=cause,
        payload=dict(payload),
    )


def phase1(**overrides: Any) -> AggregatorSpec:
    return AggregatorSpec.model_validate(phase1_document(**overrides))


def phase1_document(**overrides: Any) -> dict[str, Any]:
    document = read_document(ROOT / "examples" / "phase1-aggregator.yaml")
    return {**document, "correlation_id": "story", **overrides}


LOG = [
    row(1, "UserStoryApproved", "/product-strategist"),
    row(2, "APIDesignCompleted", "/backend-architect", "e1", api="v1"),
    row(3, "WireframeCompleted", "/ux-designer", "e1"),
    row(4, "TestPlanCompleted", "/test-engineer", "e1"),  # the rewind point
]


def waiting(deadline: datetime = START + timedelta(hours=2)) -> AggregatorState:
    return AggregatorState(
        aggregator_id="phase1-complete", correlation_id="story", deadline=deadline
    )


def test_an_aggregator_takes_the_slots_its_join_held_before_the_point() -> None:
    run = PatternRun(workflow_id="aggregator-phase1", started_at=START)
    past = aggregator_past(phase1(), waiting(), LOG[:3], run=run, point=LOG[3], origin=ORIGIN)
    assert past is not None
    assert {i: a.event_id for i, a in past.slots.items()} == {0: "e2", 1: "e3"}
    assert past.slots[0].payload == {"api": "v1"}
    assert past.time_left == timedelta(hours=2) - timedelta(seconds=4)


def test_without_lookback_it_takes_only_what_it_heard_once_it_ran() -> None:
    late = PatternRun(workflow_id="aggregator-phase1", started_at=START + timedelta(seconds=2.5))
    spec = phase1(lookback=False)
    past = aggregator_past(spec, waiting(), LOG[:3], run=late, point=LOG[3], origin=ORIGIN)
    assert past is not None and {i: a.event_id for i, a in past.slots.items()} == {1: "e3"}


def test_an_aggregator_that_ended_before_the_point_is_in_the_past_not_copied() -> None:
    run = PatternRun(workflow_id="aggregator-phase1", started_at=START)
    full = aggregator_past(phase1(), waiting(), LOG, run=run, point=row(5, "Later"), origin=ORIGIN)
    assert full is None


def test_the_copy_starts_from_the_slots_and_completes_on_the_next_event() -> None:
    run = PatternRun(workflow_id="aggregator-phase1", started_at=START)
    past = aggregator_past(phase1(), waiting(), LOG[:3], run=run, point=LOG[3], origin=ORIGIN)
    spec = phase1(correlation_id="story-copy", rewind=past)
    copy = AggregatorModel.begin(spec.model_dump(mode="json"), START + timedelta(days=1))
    assert copy.rewound and not copy.satisfied
    copy.take_past(START + timedelta(days=1))
    assert copy.deadline == START + timedelta(days=1, hours=2) - timedelta(seconds=4)
    assert copy.state.rewind_of == "story@e4"
    heard_again = LOG[2].to_envelope()
    copy.arrived()
    assert not copy.offer(heard_again, lambda: START), "an event of its past is a duplicate"
    point = LOG[3].to_envelope()
    point.event.correlation_id = "story-copy"  # re-delivered into the copy
    copy.arrived()
    assert copy.offer(point, lambda: START) and copy.satisfied
    assert copy.finish(AggregatorStatus.COMPLETED) is not None
    assert (copy.state.received, copy.state.matched, copy.state.duplicates) == (4, 3, 1)
    continued = AggregatorModel.begin(copy.carry().model_dump(mode="json"), START)
    assert not continued.rewound, "a continued run carries its join: nothing to take again"


def test_a_past_naming_a_slot_the_spec_lacks_is_refused() -> None:
    arrival = {"event_id": "e2", "source": "/x", "received_at": START.isoformat()}
    rewind = {"of": ORIGIN.model_dump(), "slots": {"7": arrival}}
    with pytest.raises(SpecError, match=r"rewind\.slots: 7 is no slot"):
        AggregatorModel.begin(phase1_document(rewind=rewind), START)


VOTERS = ["alice", "bob", "carol"]


def vote_spec(**fields: Any) -> VoteSpec:
    return VoteSpec(vote_id="release", correlation_id="story", proposal={}, voters=VOTERS, **fields)


def vote_log() -> list[TimelineEntry]:
    opened = row(1, "VoteOpened", "/vote/release")
    alice = row(2, "BallotCast", "/vote/release", "e1", voter="alice", choice="approve")
    bob = row(3, "BallotCast", "/vote/release", "e1", voter="bob", choice="reject")
    return [opened, alice, bob]


def cast(voter: str, choice: Choice, second: int) -> Ballot:
    return Ballot(voter=voter, choice=choice, at=START + timedelta(seconds=second))


def test_a_vote_takes_the_ballots_cast_before_the_point() -> None:
    record = VoteState(
        vote_id="release",
        voters=VOTERS,
        deadline=START + timedelta(minutes=5),
        ballots=[cast("alice", Choice.APPROVE, 2), cast("bob", Choice.REJECT, 3)],
    )
    log = vote_log()
    past = vote_past(vote_spec(), record, log[:2], point=log[2], origin=ORIGIN)
    assert past is not None
    assert [b.voter for b in past.ballots] == ["alice"] and past.opened == "e1"
    assert past.time_left == timedelta(minutes=5) - timedelta(seconds=3)
    decided = [*log, row(4, "DecisionMade", "/vote/release", "e3")]
    assert vote_past(vote_spec(), record, decided, point=row(5, "X"), origin=ORIGIN) is None


def test_the_copy_counts_its_past_ballots_and_asks_only_the_others() -> None:
    past = {"of": ORIGIN, "ballots": [cast("alice", Choice.APPROVE, 2)], "opened": "e1"}
    model = VoteModel.begin(vote_spec(rewind=past), START)
    sent: list[EventEnvelope] = []
    model.start_announcing(sent.append)
    model.take_past(START)
    assert sent == [], "its opening and past ballots are in its correlation's past"
    assert model.to_ask() == ["bob", "carol"] and model.state.tally().approve == 1
    model.answered("bob", {"approve": True}, START)
    assert model.state.status == VoteStatus.DECIDED
    assert [e.event.type for e in sent] == ["BallotCast", "DecisionMade"]
    assert sent[0].event.causation_id == "e1", "caused by the original's opening"
    assert model.state.rewind_of == "story@e4"


def test_a_past_ballot_of_no_voter_is_refused() -> None:
    past = {"of": ORIGIN, "ballots": [cast("mallory", Choice.APPROVE, 2)]}
    with pytest.raises(ValueError, match=r"rewind\.ballots: 'mallory' is no voter"):
        vote_spec(rewind=past)


def test_a_saga_is_rewound_to_the_first_step_not_completed_before_the_point() -> None:
    built, tested, staged = (
        row(n, event, "/saga/deploy", f"e{n - 1}" if n > 1 else None, ok=n)
        for n, event in ((1, "ArtifactBuilt"), (2, "TestsPassed"), (3, "StagingDeployed"))
    )
    record = SagaState(
        saga_id="deploy",
        completed_steps=[
            CompletedStep(step=n, event=r.event, event_id=r.event_id, name=name)
            for n, (r, name) in enumerate(
                ((built, "BuildArtifact"), (tested, "RunTests"), (staged, "DeployToStaging")),
                start=1,
            )
        ],
        events=[built, tested, staged],
    )
    spec = feature_deployment(saga_id="deploy")
    past = saga_past(spec, record, [built, tested], origin=ORIGIN)
    assert past is not None
    assert [(s.name, s.result) for s in past.steps] == [
        ("BuildArtifact", {"ok": 1}),
        ("RunTests", {"ok": 2}),
    ]
    assert saga_past(spec, record, [tested], origin=ORIGIN) == SagaRewind(of=ORIGIN, steps=[])


def test_a_plan_reuses_the_tasks_completed_before_the_point() -> None:
    spec = PlanSpec.model_validate(
        {
            "plan_id": "ship",
            "tasks": [
                {"id": "research", "agent": "a"},
                {"id": "build", "agent": "b", "depends_on": ["research"]},
            ],
        }
    )
    record = PlanState(
        plan_id="ship",
        tasks=[
            TaskRecord(id="research", agent="a", state=TaskState.SUCCEEDED, result={"r": 1}),
            TaskRecord(id="build", agent="b", state=TaskState.SUCCEEDED, result={"b": 2}),
        ],
    )
    done = row(1, "TaskCompleted", "/plan/ship", task="research", agent="a")
    past = plan_past(spec, record, [done], origin=ORIGIN)
    assert past is not None and [(t.id, t.result) for t in past.tasks] == [("research", {"r": 1})]
    both = [done, row(2, "TaskCompleted", "/plan/ship", task="build", agent="b")]
    assert plan_past(spec, record, both, origin=ORIGIN) is None, "it had ended: in the past"


def test_what_copies_make_again_is_not_re_delivered() -> None:
    log = [
        row(1, "UserStoryApproved"),
        row(2, "VoteOpened", "/vote/v"),
        row(3, "BallotCast", "/vote/v", "e2"),  # the point
        row(4, "BallotCast", "/vote/v", "e2"),
        row(5, "Outside"),
    ]
    plan = plan_rewind(log, original="story", copy_id="copy", point="e3")
    assert [r.row.event_id for r in plan.redelivered] == ["e3", "e4", "e5"]
    plan.made_by_copies({"e2", "e3", "e4"})
    assert [r.row.event_id for r in plan.redelivered] == ["e5"]
    assert plan.regenerated == ["e3", "e4"]


def test_diff_pairs_each_pattern_with_its_copy() -> None:
    left = [
        ListedRun(pattern="chain", workflow_id="chain-story", status="completed"),
        ListedRun(pattern="vote", workflow_id="vote-release", status="rejected"),
        ListedRun(pattern="saga", workflow_id="saga-gone", status="compensated"),
    ]
    right = [
        ListedRun(pattern="chain", workflow_id="chain-story2", status="completed"),
        ListedRun(pattern="vote", workflow_id="vote-release-story2", status="decided"),
        ListedRun(pattern="vote", workflow_id="vote-story2-x", status="decided"),
    ]
    paired = [
        (o.workflow_id, o.left, o.right) for o in pair_outcomes("story", left, "story2", right)
    ]
    assert paired == [
        ("chain-story", "completed", "completed"),
        ("vote-release", "rejected", "decided"),
        ("saga-gone", "compensated", None),
        ("vote-story2-x", None, "decided"),
    ]
    assert copy_name("story-vote", "story", "story2") == "story2-vote"


def test_two_runs_of_one_workflow_span_from_the_first_start_to_the_last_close() -> None:
    first = PatternRun(workflow_id="a", started_at=START, closed_at=START + timedelta(1))
    second = PatternRun(workflow_id="a", started_at=START + timedelta(1))
    spanned = second.spanning(first)
    assert (spanned.started_at, spanned.closed_at) == (START, None)
    point = row(5, "X")
    assert spanned.at_work(point)
    assert not first.model_copy(update={"parent": "chain-story"}).at_work(point)
