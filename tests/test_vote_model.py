"""VoteModel and VoteSpec without a server: the quorum (the aggregator's rounding), each
outcome as soon as it is certain, abstentions, late ballots, the deadline, the spec's checks."""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from coord.activities.kinds import load_agents
from coord.models.chain.spec import ChainSpec
from coord.models.checks import check_agents
from coord.models.events.envelope import EventEnvelope
from coord.models.events.joins import JoinState, Slot, share_needed
from coord.models.events.taxonomy import BY_TYPE
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.plan.model import PlanModel
from coord.models.plan.spec import PlanSpec
from coord.models.plan.votes import task_vote
from coord.models.vote.spec import Choice, VoteModel, VoteSpec, VoteStatus
from coord.models.wire.specs import SpecError, load_spec, parse_model

START = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def spec(voters: int = 3, **fields: Any) -> VoteSpec:
    names = [f"v{i}" for i in range(1, voters + 1)]
    return VoteSpec.model_validate(
        {"vote_id": "v", "proposal": {"deploy": "1.2"}, "voters": names, **fields}
    )


def model(voters: int = 3, **fields: Any) -> VoteModel:
    return VoteModel.begin(spec(voters, **fields), START)


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("voters", "fields", "needed"),
    [
        (3, {}, 2),
        (4, {}, 3),
        (5, {}, 4),
        (6, {}, 4),
        (1, {}, 1),
        (3, {"threshold": 1.0}, 3),
        (3, {"threshold": 0.5}, 2),
        (10, {"threshold": 0.1}, 1),
        (5, {"at_least": 2}, 2),
    ],
)
def test_the_quorum_is_the_aggregators(voters: int, fields: dict[str, Any], needed: int) -> None:
    vote = spec(voters, **fields)
    assert vote.needed == needed
    share = fields.get("threshold", 0.67)
    if "at_least" not in fields:
        assert share_needed(share, voters) == needed
        slots = [Slot(type=f"E{i}") for i in range(voters)]
        assert JoinState.of(slots, threshold=share).needed == needed


def test_two_approvals_of_three_decide_at_once() -> None:
    vote = model()
    vote.answered("v1", {"approve": True, "reason": "tests pass"}, at(1))
    assert not vote.over
    vote.answered("v3", {"approve": True, "reason": "fine"}, at(2))
    assert vote.state.status == VoteStatus.DECIDED
    assert vote.state.ended_at == at(2)
    assert vote.state.pending() == ["v2"]
    assert vote.state.summary == "2 approve, 0 reject, 0 abstain of 3 voters; 2 approvals needed"


def test_two_rejections_of_three_reject_before_the_third_answers() -> None:
    vote = model()
    vote.answered("v1", {"approve": False, "reason": "no rollback plan"}, at(1))
    assert not vote.over
    vote.answered("v2", {"approve": False, "reason": "risky"}, at(2))
    assert vote.state.status == VoteStatus.REJECTED
    vote.run_cancelled("v3")
    assert vote.state.cancelled == ["v3"]
    assert [b.reason for b in vote.state.ballots] == ["no rollback plan", "risky"]


def test_one_faulty_voter_of_three_abstains_and_the_others_decide() -> None:
    vote = model()
    vote.failed("v2", "timeout", "activity StartToClose timeout", at(1))
    vote.answered("v1", {"approve": True}, at(2))
    assert not vote.over
    vote.answered("v3", {"approve": True}, at(3))
    assert vote.state.status == VoteStatus.DECIDED
    ballot = vote.state.ballot_of("v2")
    assert ballot is not None and ballot.choice == Choice.ABSTAIN
    assert ballot.reason == "timeout: activity StartToClose timeout"
    assert vote.state.tally() == (2, 0, 1)


def test_too_many_abstentions_leave_no_quorum_before_the_deadline() -> None:
    vote = model()
    vote.failed("v1", "temporary_failure", "down", at(1))
    assert not vote.over
    vote.answered("v2", {"approve": False, "reason": "no"}, at(2))
    assert vote.state.status == VoteStatus.NO_QUORUM


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"approve": "yes"}, "answer: approve: Input should be a valid boolean"),
        ({"ok": True}, "answer: approve: Field required"),
        ({"approve": True, "reason": 3}, "answer: reason: Input should be a valid string"),
    ],
)
def test_an_answer_that_is_not_a_ballot_abstains_saying_why(
    answer: dict[str, Any], reason: str
) -> None:
    vote = model()
    ballot = vote.answered("v1", answer, at(1))
    assert ballot.choice == Choice.ABSTAIN
    assert ballot.reason.startswith(reason)
    assert 'expected {"approve": true|false' in ballot.reason


def test_the_deadline_makes_the_voters_still_out_abstain_and_leaves_no_quorum() -> None:
    vote = model()
    vote.answered("v1", {"approve": True}, at(1))
    vote.deadline_passed(at(300))
    assert vote.state.status == VoteStatus.NO_QUORUM
    assert [(b.voter, b.choice) for b in vote.state.ballots] == [
        ("v1", Choice.APPROVE),
        ("v2", Choice.ABSTAIN),
        ("v3", Choice.ABSTAIN),
    ]
    assert vote.state.deadline == at(300)


def test_an_answer_in_the_same_moment_as_the_deciding_one_counts() -> None:
    vote = model()
    vote.answered("v1", {"approve": True}, at(1))
    vote.answered("v2", {"approve": True}, at(2))
    same_moment = vote.answered("v3", {"approve": False, "reason": "no"}, at(2))
    assert same_moment.counted
    assert vote.state.status == VoteStatus.DECIDED and vote.state.tally() == (2, 1, 0)
    assert vote.state.summary == "2 approve, 1 reject, 0 abstain of 3 voters; 2 approvals needed"


def test_an_outcome_stands_whatever_a_ballot_of_the_same_moment_says() -> None:
    vote = model(5)  # 4 approvals needed
    vote.failed("v1", "timeout", "late", at(1))
    vote.answered("v2", {"approve": False}, at(2))
    assert vote.state.status == VoteStatus.NO_QUORUM  # at most 3 approvals left
    vote.answered("v3", {"approve": False}, at(2))
    assert vote.state.status == VoteStatus.NO_QUORUM and vote.state.tally() == (0, 2, 1)


def test_an_answer_after_the_outcome_is_kept_but_not_counted() -> None:
    vote = model()
    vote.answered("v1", {"approve": False}, at(1))
    vote.answered("v2", {"approve": False}, at(2))
    late = vote.answered("v3", {"approve": True}, at(3))
    assert not late.counted
    vote.run_cancelled("v3")  # its cancel came too late: it answered, so it is not listed
    assert vote.state.cancelled == []
    assert vote.state.status == VoteStatus.REJECTED and vote.state.tally() == (0, 2, 0)
    vote.deadline_passed(at(300))
    assert vote.state.status == VoteStatus.REJECTED


def test_a_voter_abstaining_at_the_deadline_keeps_that_ballot_when_its_run_answers_after() -> None:
    """Its run was cancelled at the deadline and answered anyway (the vote ends once each run
    has ended): a voter votes once."""
    vote = model()
    vote.answered("v1", {"approve": True}, at(1))
    vote.deadline_passed(at(300))
    vote.answered("v2", {"approve": True}, at(301))
    vote.failed("v3", "timeout", "late", at(302))
    assert [(b.voter, b.choice, b.reason) for b in vote.state.ballots] == [
        ("v1", Choice.APPROVE, ""),
        ("v2", Choice.ABSTAIN, "no answer in time"),
        ("v3", Choice.ABSTAIN, "no answer in time"),
    ]
    assert vote.state.status == VoteStatus.NO_QUORUM and vote.state.tally() == (1, 0, 2)


def test_the_cancelled_voters_are_listed_in_the_voters_order() -> None:
    """A vote waits for each cancelled run to end, and the server reports them in any order."""
    vote = model(5, at_least=1)
    vote.answered("v2", {"approve": True}, at(1))
    for voter in ("v5", "v1", "v4", "v1"):
        vote.run_cancelled(voter)
    assert vote.state.cancelled == ["v1", "v4", "v5"]


def test_a_cancel_ends_a_vote_in_progress_only() -> None:
    vote = model()
    vote.cancel(at(1))
    assert vote.state.status == VoteStatus.CANCELLED
    decided = model(1)
    decided.answered("v1", {"approve": True}, at(1))
    decided.cancel(at(2))
    assert decided.state.status == VoteStatus.DECIDED


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"voters": ["a", "b", "a"]}, "voters: each voter votes once, repeated: a"),
        ({"voters": []}, "voters: List should have at least 1 item"),
        ({"at_least": 4}, "at_least: 4 is more than the 3 voters"),
        (
            {"at_least": 2, "threshold": 0.5},
            "threshold: give at most one of at_least and threshold",
        ),
        ({"threshold": 1.5}, "threshold: Input should be less than or equal to 1"),
        ({"proposal": "ship it"}, "proposal: Input should be a valid dictionary"),
        ({"deadline": "soon"}, "deadline: 'soon' is not a duration"),
    ],
)
def test_the_spec_names_what_is_wrong(fields: dict[str, Any], message: str) -> None:
    document = {"vote_id": "v", "proposal": {}, "voters": ["a", "b", "c"], **fields}
    with pytest.raises(SpecError) as raised:
        parse_model(VoteSpec, document, "vote.yaml")
    assert str(raised.value).startswith(f"vote.yaml: {message}")


def test_the_spec_defaults() -> None:
    vote = spec()
    assert vote.correlation_id == "v" and vote.workflow_id == "vote-v"
    assert vote.deadline == timedelta(minutes=5) and vote.timeout == timedelta(minutes=1)
    assert vote.agents_named() == [("voters[0]", "v1"), ("voters[1]", "v2"), ("voters[2]", "v3")]


# --- The `vote:` block of a plan task -----------------------------------------------------------


def plan_with(task: dict[str, Any], **plan: Any) -> dict[str, Any]:
    build = {"id": "build", "agent": "builder"}
    return {"plan_id": "p", "tasks": [build, {"id": "approve", **task}], **plan}


VOTE = {"voters": ["a", "b", "c"]}


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (
            {"agent": "x", "vote": VOTE},
            "tasks[1]: give one of `agent`, `member`, `vote` or `capability`, not both agent and "
            "vote",
        ),
        ({"vote": {"voters": []}}, "tasks[1].vote.voters: List should have at least 1 item"),
        ({"vote": {"voters": ["a", "a"]}}, "tasks[1].vote: voters: each voter votes once"),
        ({"vote": {**VOTE, "at_least": 4}}, "tasks[1].vote: at_least: 4 is more than the 3"),
        ({"vote": {**VOTE, "deadline": "soon"}}, "tasks[1].vote.deadline: 'soon' is not a"),
        ({"vote": {**VOTE, "quorum": 2}}, "tasks[1].vote.quorum: Extra inputs are not permitted"),
        (
            {"vote": VOTE, "review": {"reviewer": "r"}},
            "tasks[1]: review: a vote task has no agent result to review; drop `review`",
        ),
        (
            {"vote": VOTE, "depends_on": ["build"], "input": {"results": 1}},
            "tasks[1]: input: `results` is where a vote task's proposal carries",
        ),
    ],
)
def test_a_plan_vote_task_names_what_is_wrong(task: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_model(PlanSpec, plan_with(task), "plan.yaml")
    assert str(raised.value).startswith(f"plan.yaml: {message}")


def test_a_vote_id_too_long_for_a_workflow_id_is_refused() -> None:
    with pytest.raises(SpecError) as raised:
        parse_model(PlanSpec, plan_with({"vote": VOTE}, plan_id="p" * 250), "plan.yaml")
    assert "tasks[1].id: the vote id `<plan_id>~<task_id>` would be longer than 255" in str(
        raised.value
    )


def test_a_vote_tasks_proposal_is_its_input_and_its_dependencies_results() -> None:
    agents = {"a": {"kind": "shell", "argv": ["true"]}, "builder": {"kind": "shell", "argv": ["x"]}}
    task = {"vote": {**VOTE, "at_least": 3, "deadline": "2m"}, "depends_on": ["build"]}
    spec = parse_model(PlanSpec, plan_with({**task, "input": {"w": 1}}, agents=agents), "p")
    plan = PlanModel.begin(spec, START)
    plan.record("build").result = {"built": True}
    assert [voter for _, voter in spec.agents_named()] == ["builder", "a", "b", "c"]
    vote = task_vote(plan, spec.task("approve"))
    assert vote.workflow_id == "vote-p~approve"
    assert task_vote(plan, spec.task("approve"), scoped=False).workflow_id == "vote-p-approve"
    assert vote.proposal == {"w": 1, "results": {"build": {"built": True}}}
    assert (vote.needed, vote.deadline, vote.correlation_id) == (3, timedelta(minutes=2), "p")
    assert list(vote.agents) == ["a"]
    assert plan.record("approve").agent == "vote: a, b, c"


# --- The `vote:` block of a chain subscription --------------------------------------------------


def chain_with(subscription: dict[str, Any]) -> dict[str, Any]:
    return {"name": "c", "triggers": ["A"], "subscriptions": [{"events": ["A"], **subscription}]}


@pytest.mark.parametrize(
    ("subscription", "message"),
    [
        (
            {"agent": "x", "vote": VOTE},
            "subscriptions[0]: give one of `agent`, `vote` or `capability`, not both agent and "
            "vote",
        ),
        ({}, "subscriptions[0]: `agent` is required (or `vote`, `capability`)"),
        ({"vote": {"voters": ["a", "a"]}}, "subscriptions[0].vote: voters: each voter votes once"),
        ({"vote": {**VOTE, "threshold": 2}}, "subscriptions[0].vote.threshold: Input should be"),
    ],
)
def test_a_chain_vote_subscription_names_what_is_wrong(
    subscription: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError) as raised:
        parse_model(ChainSpec, chain_with(subscription), "chain.yaml")
    assert str(raised.value).startswith(f"chain.yaml: {message}")


async def abstain(event: EventEnvelope, context: AgentContext) -> None:
    return None


def test_a_chain_vote_subscriptions_voters_are_checked_as_its_agents() -> None:
    spec = parse_model(ChainSpec, chain_with({"vote": VOTE}), "chain.yaml")
    assert spec.subscriptions[0].name == "vote"
    registry = AgentRegistry()
    for name in ["a", "c"]:
        registry.register(name)(abstain)
    with pytest.raises(SpecError) as raised:
        check_agents("chain.yaml", spec, registry)
    assert str(raised.value).startswith("chain.yaml: subscriptions[0].vote.voters: ")
    assert "'b'" in str(raised.value)


@pytest.mark.parametrize(
    ("example", "model"),
    [
        ("release-vote.yaml", VoteSpec),
        ("release-plan.yaml", PlanSpec),
        ("release-chain.yaml", ChainSpec),
    ],
)
def test_the_vote_examples_run_on_the_vote_agents(example: str, model: type[Any]) -> None:
    examples = Path(__file__).parent.parent / "examples"
    registry = load_agents(examples / "vote-agents.yaml", AgentRegistry())
    check_agents(example, load_spec(model, examples / example), registry)


def test_a_vote_announces_its_opening_each_ballot_and_the_decision_caused_by_the_last() -> None:
    vote = model(causation_id="evt-trigger", correlation_id="c")
    sent: list[EventEnvelope] = []
    vote.announce_to(sent.append)
    vote.answered("v1", {"approve": True, "reason": "tests pass"}, at(1))
    vote.failed("v2", "timeout", "slow", at(2))
    vote.answered("v3", {"approve": True}, at(3))
    opened, *ballots, decided = sent
    assert (opened.event.type, opened.event.causation_id) == ("VoteOpened", "evt-trigger")
    assert [b.payload["choice"] for b in ballots] == ["approve", "abstain", "approve"]
    assert {b.event.causation_id for b in ballots} == {opened.event.id}
    assert decided.event.type == "DecisionMade"
    assert decided.event.causation_id == ballots[-1].event.id
    assert decided.payload["outcome"] == "decided"
    for envelope in sent:
        assert (envelope.event.source, envelope.event.correlation_id) == ("/vote/v", "c")
        BY_TYPE[envelope.event.type].payload.model_validate(envelope.payload)


def test_a_deadline_decision_is_caused_by_the_opening() -> None:
    vote = model()
    sent: list[EventEnvelope] = []
    vote.announce_to(sent.append)
    vote.deadline_passed(at(300))
    assert [envelope.event.type for envelope in sent] == [
        "VoteOpened",
        *["BallotCast"] * 3,
        "DecisionMade",
    ]
    assert sent[-1].event.causation_id == sent[0].event.id
