"""A plan task's gates as pure decisions (models/plan_gates.py), without a server: what runs
next after each run and round, how a reviewer's answer becomes a verdict, and the approval
rules."""

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from coord.models.plan.gates import (
    REVIEW_NOTES_INPUT,
    BudgetSpent,
    Decisions,
    FixNote,
    GatesPassed,
    GateStep,
    RunFix,
    RunReview,
    RunVerification,
    approval_problem,
    approval_required,
    busy_problem,
    caller_problem,
    decision,
    failed_verdict,
    has_gates,
    next_gate_step,
    parse_verdict,
    refuse,
    rejection,
    review_round,
    reviewer_inputs,
    timed_out,
    verdict_problem,
    verification_round,
    waiting_for,
)
from coord.models.plan.spec import (
    MAX_NOTES,
    MAX_REFUSED,
    TIMEOUT_DECIDER,
    ApprovalGate,
    ApprovalRequest,
    PlanState,
    PlanTask,
    ReviewStage,
    TaskRecord,
    TaskState,
    Verdict,
)
from coord.models.wire.contract import FailureType

NOW = datetime(2026, 11, 23, 2, 0, tzinfo=UTC)
SPEC, QUALITY = ReviewStage.SPEC_COMPLIANCE, ReviewStage.CODE_QUALITY

Answer = Callable[[str, ReviewStage | None, int], Verdict]
"""A scripted reviewer: (reviewer, stage or None when verifying, round) -> its verdict."""


def task(**gates: Any) -> PlanTask:
    return PlanTask.model_validate({"id": "build", "agent": "coder", **gates})


def passing(reviewer: str, stage: ReviewStage | None, round_: int) -> Verdict:
    return Verdict(reviewer=reviewer, passed=True)


def failing_until(
    rounds: dict[tuple[str, ReviewStage | None], int],
) -> Answer:
    """Each (reviewer, stage) fails every round before the one given, then passes."""

    def answer(reviewer: str, stage: ReviewStage | None, round_: int) -> Verdict:
        passes_from = rounds.get((reviewer, stage), 1)
        notes = "" if round_ >= passes_from else f"{reviewer} {stage} round {round_}: fix it"
        return Verdict(reviewer=reviewer, passed=round_ >= passes_from, notes=notes)

    return answer


def drive(gated: PlanTask, answer: Answer) -> Iterator[tuple[GateStep, TaskRecord]]:
    """Play the workflow's part: run what next_gate_step says and record it, until the task
    ends; yields each step with the record it was decided from."""
    record = TaskRecord(id=gated.id, agent=gated.agent)
    while True:
        step = next_gate_step(gated, record)
        yield step, record.model_copy(deep=True)
        match step:
            case RunReview():
                verdict = answer(step.reviewer, step.stage, step.round)
                record.reviews.append(review_round(step, verdict, NOW))
            case RunVerification():
                verdicts = [answer(v, None, step.round) for v in step.verifiers]
                record.reviews.append(verification_round(step, verdicts, NOW))
            case RunFix():
                record.fixes += 1
            case GatesPassed() | BudgetSpent():
                return


def steps(gated: PlanTask, answer: Answer) -> list[GateStep]:
    return [step for step, _ in drive(gated, answer)]


def test_a_task_without_gates_has_passed_them() -> None:
    plain = task()
    assert not has_gates(plain)
    assert steps(plain, passing) == [GatesPassed()]


def test_review_stages_run_in_order_on_the_first_result() -> None:
    reviewed = task(review={"reviewer": "rev"})
    assert has_gates(reviewed)
    assert steps(reviewed, passing) == [
        RunReview(reviewer="rev", stage=SPEC, round=1),
        RunReview(reviewer="rev", stage=QUALITY, round=1),
        GatesPassed(),
    ]


def fix(round_: int, stage: ReviewStage) -> RunFix:
    """The fix after `rev` failed `stage` on run `round_ - 1`, as failing_until words it."""
    notes = f"rev {stage} round {round_ - 1}: fix it"
    return RunFix(
        round=round_, notes=(FixNote(reviewer="rev", stage=stage, passed=False, notes=notes),)
    )


def test_a_failing_stage_is_fixed_with_its_notes_then_reviewed_again_before_the_next() -> None:
    reviewed = task(review={"reviewer": "rev", "fix_budget": 3})
    answer = failing_until({("rev", SPEC): 3, ("rev", QUALITY): 4})
    assert steps(reviewed, answer) == [
        RunReview(reviewer="rev", stage=SPEC, round=1),
        fix(2, SPEC),
        RunReview(reviewer="rev", stage=SPEC, round=2),
        fix(3, SPEC),
        RunReview(reviewer="rev", stage=SPEC, round=3),
        RunReview(reviewer="rev", stage=QUALITY, round=3),
        fix(4, QUALITY),
        RunReview(reviewer="rev", stage=QUALITY, round=4),
        GatesPassed(),
    ]


def test_stage_two_is_never_reviewed_before_stage_one_passes() -> None:
    reviewed = task(review={"reviewer": "rev", "fix_budget": 5})
    answer = failing_until({("rev", SPEC): 5})
    reviews = [s for s in steps(reviewed, answer) if isinstance(s, RunReview)]
    stages = [s.stage for s in reviews]
    assert stages == [SPEC] * 5 + [QUALITY]


def test_the_fix_round_hands_the_notes_to_the_agent_as_input() -> None:
    fix = RunFix(round=2, notes=(FixNote(reviewer="rev", stage=SPEC, passed=False, notes="n"),))
    assert fix.inputs() == {
        REVIEW_NOTES_INPUT: [
            {"reviewer": "rev", "stage": "spec_compliance", "passed": False, "notes": "n"}
        ]
    }


def test_the_budget_spent_ends_the_task_review_rejected_naming_the_stage() -> None:
    reviewed = task(review={"reviewer": "rev", "fix_budget": 2})
    played = steps(reviewed, failing_until({("rev", SPEC): 99}))
    assert [type(s) for s in played] == [
        RunReview, RunFix, RunReview, RunFix, RunReview, BudgetSpent,
    ]  # fmt: skip
    spent = played[-1]
    assert isinstance(spent, BudgetSpent)
    assert spent.error.type == FailureType.REVIEW_REJECTED
    assert spent.error.message == (
        "review spec_compliance still failing after 2 fixes (fix budget spent): "
        "rev: rev spec_compliance round 3: fix it"
    )


def test_a_zero_budget_rejects_at_the_first_failing_round() -> None:
    reviewed = task(review={"reviewer": "rev", "stages": ["code_quality"], "fix_budget": 0})
    played = steps(reviewed, failing_until({("rev", QUALITY): 2}))
    assert played[0] == RunReview(reviewer="rev", stage=QUALITY, round=1)
    assert isinstance(played[1], BudgetSpent)
    assert "after 0 fixes" in played[1].error.message


def test_verification_runs_every_verifier_and_passes_only_when_all_pass() -> None:
    verified = task(verify={"verifiers": ["b", "c"], "fix_budget": 2})
    rounds = [record for step, record in drive(verified, failing_until({("c", None): 2}))]
    played = steps(verified, failing_until({("c", None): 2}))
    assert played[0] == RunVerification(verifiers=("b", "c"), round=1)
    assert isinstance(played[1], RunFix)
    assert played[1].notes == (
        FixNote(reviewer="b", passed=True, notes=""),
        FixNote(reviewer="c", passed=False, notes="c None round 1: fix it"),
    )
    assert played[2:] == [RunVerification(verifiers=("b", "c"), round=2), GatesPassed()]
    final = rounds[-1].reviews
    assert [(r.kind, r.round, [v.passed for v in r.verdicts]) for r in final] == [
        ("verify", 1, [True, False]),
        ("verify", 2, [True, True]),
    ]


def test_verification_follows_the_review_and_has_its_own_budget() -> None:
    both = task(
        review={"reviewer": "rev", "stages": ["spec_compliance"], "fix_budget": 1},
        verify={"verifiers": ["b", "c"], "fix_budget": 1},
    )
    answer = failing_until({("rev", SPEC): 2, ("b", None): 99})
    played = steps(both, answer)
    assert [type(s).__name__ for s in played] == [
        "RunReview", "RunFix", "RunReview", "RunVerification", "RunFix", "RunVerification",
        "BudgetSpent",
    ]  # fmt: skip
    spent = played[-1]
    assert isinstance(spent, BudgetSpent)
    assert spent.error.message.startswith("verification still failing after 1 fix")
    assert "b: b None round 3: fix it" in spent.error.message
    assert "c:" not in spent.error.message


def test_the_record_alone_decides_so_a_replayed_record_gets_the_same_answer() -> None:
    reviewed = task(review={"reviewer": "rev"})
    for step, record in drive(reviewed, failing_until({("rev", SPEC): 2})):
        assert next_gate_step(reviewed, record) == step


# --- Verdicts ---------------------------------------------------------------------------------


def test_a_well_formed_answer_is_the_verdict() -> None:
    assert parse_verdict("rev", {"passed": True, "notes": "fine"}) == Verdict(
        reviewer="rev", passed=True, notes="fine"
    )
    assert parse_verdict("rev", {"passed": False}) == Verdict(reviewer="rev", passed=False)
    assert parse_verdict("rev", {"passed": True, "notes": "", "score": 9}).passed


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({}, "`passed` is missing (got keys: none)"),
        ({"ok": True}, "`passed` is missing (got keys: ok)"),
        ({"passed": "yes"}, "`passed` must be true or false, got 'yes'"),
        ({"passed": 1, "notes": "x"}, "`passed` must be true or false, got 1"),
        ({"passed": True, "notes": ["a"]}, "`notes` must be a string, got list"),
        (["passed"], 'expected {"passed": bool, "notes": str}, got list'),
        (None, 'expected {"passed": bool, "notes": str}, got NoneType'),
    ],
)
def test_anything_else_is_a_failed_verdict_saying_why(answer: Any, why: str) -> None:
    verdict = parse_verdict("rev", answer)
    assert verdict == Verdict(reviewer="rev", passed=False, notes=f"invalid verdict: {why}")


@pytest.mark.parametrize(
    "answer", [{"passed": True}, {"passed": True, "notes": ""}, {"passed": False, "notes": "x"}]
)
def test_a_strict_verdict_has_no_problem(answer: Any) -> None:
    assert verdict_problem(answer) is None


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"passed": True, "note": "fine"}, "note: Extra inputs are not permitted"),
        ({"passed": True, "notes": "", "score": 9}, "score: Extra inputs are not permitted"),
        ({"passed": False}, "notes: a failing verdict must say what to fix"),
        ({"passed": False, "notes": " \n"}, "notes: a failing verdict must say what to fix"),
        ({"passed": "true", "notes": "x"}, "passed: Input should be a valid boolean"),
        ({"passed": 1}, "passed: Input should be a valid boolean"),
        ({"passed": True, "notes": ["a"]}, "notes: Input should be a valid string"),
        ({}, "passed: Field required"),
        ("LGTM", "Input should be a valid dictionary or instance of VerdictAnswer"),
    ],
)
def test_anything_else_is_a_problem_naming_the_field(answer: Any, problem: str) -> None:
    """The strict check (`VerdictAnswer`): its one line is the task's `invalid_payload`."""
    assert verdict_problem(answer) == problem


def test_notes_are_bounded() -> None:
    long = parse_verdict("rev", {"passed": False, "notes": "x" * (MAX_NOTES * 3)})
    assert len(long.notes) == MAX_NOTES
    assert long.notes.endswith(" [...]")
    hostile = parse_verdict("rev", {"passed": "y" * (MAX_NOTES * 3)})
    assert not hostile.passed
    assert len(hostile.notes) <= MAX_NOTES
    crashed = failed_verdict("rev", "boom " * MAX_NOTES)
    assert not crashed.passed
    assert crashed.notes.startswith("reviewer failed: boom")
    assert len(crashed.notes) == MAX_NOTES


def test_reviewers_receive_the_result_the_task_and_the_stage() -> None:
    assert reviewer_inputs("build", {"diff": "+1"}, SPEC) == {
        "result": {"diff": "+1"},
        "task": "build",
        "stage": "spec_compliance",
    }
    assert reviewer_inputs("build", {"result_ref": {"sha256": "0" * 64, "bytes": 9}}, None) == {
        "result": {"result_ref": {"sha256": "0" * 64, "bytes": 9}},
        "task": "build",
    }


# --- Approval ---------------------------------------------------------------------------------


def plan_state(*records: TaskRecord) -> PlanState:
    return PlanState(plan_id="p1", tasks=list(records))


def request(**fields: Any) -> ApprovalRequest:
    return ApprovalRequest.model_validate({"task": "deploy", "by": "alice", **fields})


def test_approval_is_required_only_when_the_gate_says_so() -> None:
    assert not approval_required(task())
    assert approval_required(task(approval={}))
    assert not approval_required(task(approval={"required": False}))
    assert task(approval={"timeout": "2h"}).approval == ApprovalGate(timeout=timedelta(hours=2))


def test_an_approval_names_a_task_of_the_plan_that_is_waiting() -> None:
    waiting = TaskRecord(id="deploy", agent="x", state=TaskState.AWAITING_APPROVAL)
    running = TaskRecord(id="build", agent="x", state=TaskState.RUNNING)
    state = plan_state(waiting, running)
    assert approval_problem(request(), state) is None
    assert approval_problem(request(task="nope"), state) == (
        "task: 'nope' is not a task of plan p1"
    )
    assert approval_problem(request(task="build"), state) == (
        "task: 'build' is running, not awaiting approval"
    )
    waiting.approval = decision(request(approve=False, by="bob"), NOW)
    assert approval_problem(request(), state) == "task: 'deploy' was already rejected by bob"


def test_a_decision_records_who_and_why() -> None:
    approved = decision(request(reason="looks safe"), NOW)
    assert (approved.approved, approved.by, approved.reason, approved.at) == (
        True, "alice", "looks safe", NOW,
    )  # fmt: skip
    refused = decision(request(approve=False, by="bob", reason="not on a Friday"), NOW)
    assert not refused.approved
    error = rejection(refused)
    assert error.type == FailureType.APPROVAL_REJECTED
    assert error.message == "approval rejected by bob: not on a Friday"
    assert rejection(decision(request(approve=False), NOW)).message == (
        "approval rejected by alice"
    )


def test_the_author_is_the_callers_identity_and_approvers_name_who_may_decide() -> None:
    """`by` in a request is checked against the caller's identity (the server's record), never
    taken; `timeout` is the timer's; a gate's `approvers` name the identities that decide."""
    gate = ApprovalGate(approvers=["alice@ops", "bob@ops"])
    assert caller_problem(request(by=None), gate, "alice@ops") is None
    assert caller_problem(request(by="alice@ops"), gate, "alice@ops") is None
    assert caller_problem(request(by=None), gate, "mallory") == (
        "by: 'mallory' is not one of the task's approvers (alice@ops, bob@ops)"
    )
    assert caller_problem(request(by="alice@ops"), gate, "mallory") == (
        "by: 'alice@ops' is not the caller's identity ('mallory')"
    )
    assert caller_problem(request(by=None), ApprovalGate(), "timeout") == (
        "by: 'timeout' is reserved for the approval's timer; ask under another identity"
    )
    assert caller_problem(request(by=None), ApprovalGate(), None) == (
        "who asks is unknown: the caller's identity could not be read"
    )
    assert caller_problem(request(by=None), ApprovalGate(), "anyone") is None
    assert decision(request(by=None), NOW, "alice@ops").by == "alice@ops"
    with pytest.raises(ValidationError, match="'timeout' is reserved for the approval's timer"):
        request(by="timeout")
    with pytest.raises(ValidationError, match="'timeout' is reserved for the approval's timer"):
        ApprovalGate.model_validate({"approvers": ["alice", "timeout"]})
    with pytest.raises(ValidationError, match="at least 1 item"):
        ApprovalGate.model_validate({"approvers": []})


def test_refused_decisions_are_recorded_the_latest_kept() -> None:
    record = TaskRecord(id="deploy", agent="x", state=TaskState.AWAITING_APPROVAL)
    for n in range(MAX_REFUSED + 5):
        refuse(record, request(approve=False), f"caller-{n}", "by: not an approver", NOW)
    assert len(record.refused) == MAX_REFUSED
    assert record.refused[-1].by == f"caller-{MAX_REFUSED + 4}" and not record.refused[-1].approve
    assert record.approval is None


def test_one_decision_is_checked_at_a_time_and_none_after_the_timer() -> None:
    assert busy_problem("deploy", deciding=False, closed=False) is None
    assert busy_problem("deploy", deciding=True, closed=False) == (
        "task: 'deploy' has a decision being checked; ask again if it is refused"
    )
    assert busy_problem("deploy", deciding=True, closed=True) == (
        "task: 'deploy' timed out waiting for approval"
    )


def test_a_timeout_rejects_by_timeout() -> None:
    gate = ApprovalGate(timeout=timedelta(days=1))
    expired = timed_out(gate, NOW)
    assert (expired.approved, expired.by, expired.reason) == (
        False, TIMEOUT_DECIDER, "no decision within 1d",
    )  # fmt: skip
    assert rejection(expired).message == "approval timed out: no decision within 1d"


def test_the_plan_says_what_it_waits_for() -> None:
    gate = ApprovalGate(timeout=timedelta(hours=2))
    assert waiting_for("deploy", gate, NOW) == (
        "approval of deploy (rejected at 2026-11-23 04:00:00 UTC if none comes)"
    )


def test_one_decision_per_task_is_checked_at_a_time_and_a_closed_task_takes_no_other() -> None:
    decisions = Decisions()
    assert not decisions.any() and decisions.problem("deploy") is None
    decisions.checking("deploy", True)
    assert decisions.any() and decisions.deciding("deploy") and not decisions.deciding("build")
    assert decisions.problem("deploy") == (
        "task: 'deploy' has a decision being checked; ask again if it is refused"
    )
    decisions.close("deploy")
    decisions.checking("deploy", False)
    assert not decisions.any() and decisions.closed("deploy")
    assert decisions.problem("deploy") == "task: 'deploy' timed out waiting for approval"
