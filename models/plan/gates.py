"""A plan task's gates, as pure decisions: human approval before the task runs, and
after a successful run the two-stage review, then dual verification (the Santa method).

The workflow asks `next_gate_step` what to do after each run and each round, and records every
round in `TaskRecord.reviews`; the decision is made from that record alone, so it is the same
on replay, after a worker restart, and in a unit test. The rules:

- review stages in the order declared (spec compliance before code quality): only a passing
  stage moves to the next one, never the other way round;
- a failing round sends the task back to its agent with that round's notes (a fix, a new run
  round), then the same stage, or the whole verification, is checked again on the new result;
- each fix spends one of its gate's `fix_budget`; a round that fails with the budget spent ends
  the task `error` (`review_rejected`);
- verification runs every verifier on the same result and passes only when all pass.

A round's number is the run round whose result it checks: run 1 is the task's first run, each
fix starts the next. A stage is checked at most once per run round, so `(stage, round)` and
`(verifier, round)` name one reviewer run each."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from coord.models.plan.spec import (
    MAX_NOTES,
    MAX_REFUSED,
    TIMEOUT_DECIDER,
    ApprovalDecision,
    ApprovalGate,
    ApprovalRequest,
    PlanState,
    PlanTask,
    RefusedDecision,
    ReviewRound,
    ReviewStage,
    TaskError,
    TaskRecord,
    TaskState,
    Verdict,
)
from coord.models.wire.contract import FailureType
from coord.models.wire.durations import format_duration
from coord.models.wire.specs import MAX_NAME, describe_validation_error

REVIEW_NOTES_INPUT = "review_notes"
"""The input key under which a fix round's agent receives the notes it has to address."""

GateKind = Literal["review", "verify"]

TIME_SHOWN = "%Y-%m-%d %H:%M:%S UTC"
"""How a plan's readers are told a time (its waits, its running tasks' starts)."""


# --- What runs next ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunReview:
    """The reviewer checks one stage of the result of run `round`."""

    reviewer: str
    stage: ReviewStage
    round: int


@dataclass(frozen=True)
class RunVerification:
    """Every verifier checks the result of run `round`, independently and at once."""

    verifiers: tuple[str, ...]
    round: int


@dataclass(frozen=True)
class RunFix:
    """The task's agent runs again (run `round`) with the failed round's notes as input."""

    round: int
    notes: tuple["FixNote", ...]

    def inputs(self) -> dict[str, Any]:
        """What the fix run adds to the task's inputs."""
        return {REVIEW_NOTES_INPUT: [note.model_dump(mode="json") for note in self.notes]}


@dataclass(frozen=True)
class GatesPassed:
    """Every gate passed: the task succeeded with its latest result."""


@dataclass(frozen=True)
class BudgetSpent:
    """A round failed with its gate's fix budget spent: the task ends `error`."""

    error: TaskError


GateStep = RunReview | RunVerification | RunFix | GatesPassed | BudgetSpent


class FixNote(BaseModel):
    """One verdict of a failed round, as the fixing agent receives it: who said what about
    which stage (none for verification), and whether that reviewer was satisfied."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reviewer: str
    stage: ReviewStage | None = None
    passed: bool
    notes: str


def has_gates(task: PlanTask) -> bool:
    """Whether the task's result is checked before it counts as succeeded."""
    return task.review is not None or task.verify is not None


def current_round(record: TaskRecord) -> int:
    """The run round whose result is the task's current one: one more than the fixes run."""
    return record.fixes + 1


def next_gate_step(task: PlanTask, record: TaskRecord) -> GateStep:
    """What the task does next after a successful run or a recorded round."""
    failed = [round_ for round_ in record.reviews if not round_.passed]
    if len(failed) > record.fixes:
        return _fix_or_give_up(task, record, failed)
    return _next_check(task, record)


def _next_check(task: PlanTask, record: TaskRecord) -> GateStep:
    """The first check not yet passed: the review stages in order, then verification."""
    round_ = current_round(record)
    passed = [r for r in record.reviews if r.passed]
    if task.review is not None:
        passed_stages = {r.stage for r in passed if r.kind == "review"}
        for stage in task.review.stages:
            if stage not in passed_stages:
                return RunReview(reviewer=task.review.reviewer, stage=stage, round=round_)
    if task.verify is not None and not any(r.kind == "verify" for r in passed):
        return RunVerification(verifiers=tuple(task.verify.verifiers), round=round_)
    return GatesPassed()


def _fix_or_give_up(task: PlanTask, record: TaskRecord, failed: list[ReviewRound]) -> GateStep:
    """After a failed round: a fix while its gate has budget left, else the task is rejected."""
    last = failed[-1]
    budget = fix_budget(task, last.kind)
    if sum(1 for r in failed if r.kind == last.kind) > budget:
        return BudgetSpent(error=rejection_error(last, budget))
    return RunFix(round=current_round(record) + 1, notes=fix_notes(last))


def fix_budget(task: PlanTask, kind: GateKind) -> int:
    gate = task.review if kind == "review" else task.verify
    return gate.fix_budget if gate is not None else 0


def fix_notes(failed: ReviewRound) -> tuple[FixNote, ...]:
    """Every verdict of the failed round (a passing verifier's notes help the fix too)."""
    return tuple(
        FixNote(reviewer=v.reviewer, stage=failed.stage, passed=v.passed, notes=v.notes)
        for v in failed.verdicts
    )


def rejection_error(last: ReviewRound, budget: int) -> TaskError:
    """`review_rejected`, naming the check that still fails and what its reviewers said."""
    check = f"review {last.stage}" if last.kind == "review" else "verification"
    said = "; ".join(
        f"{v.reviewer}: {v.notes or '(no notes)'}" for v in last.verdicts if not v.passed
    )
    fixes = "fix" if budget == 1 else "fixes"
    message = f"{check} still failing after {budget} {fixes} (fix budget spent): {said}"
    return TaskError(type=FailureType.REVIEW_REJECTED, message=bounded(message))


# --- Rounds and verdicts ----------------------------------------------------------------------


def reviewer_inputs(
    task_id: str, result: Mapping[str, Any], stage: ReviewStage | None
) -> dict[str, Any]:
    """What a reviewer or verifier receives: the task's result (its data, or `{"result_ref":
    ...}` which `run_agent` resolves), which task, and the stage under review (none when
    verifying)."""
    inputs: dict[str, Any] = {"result": dict(result), "task": task_id}
    if stage is not None:
        inputs["stage"] = stage.value
    return inputs


def parse_verdict(reviewer: str, answer: Any) -> Verdict:
    """A reviewer's answer as a verdict: that of a strict verdict (`verdict_problem` finds
    nothing), or, in runs recorded before verdicts were strict, of a lenient one (`notes` may
    be left out, other keys are ignored; anything else is a failed verdict whose notes say what
    was wrong with it, so a confused reviewer never lets a result through)."""
    problem = _answer_problem(answer)
    if problem is not None:
        return Verdict(
            reviewer=reviewer, passed=False, notes=bounded(f"invalid verdict: {problem}")
        )
    return Verdict(
        reviewer=reviewer, passed=answer["passed"], notes=bounded(answer.get("notes", ""))
    )


def _answer_problem(answer: Any) -> str | None:
    if not isinstance(answer, Mapping):
        return f'expected {{"passed": bool, "notes": str}}, got {type(answer).__name__}'
    if "passed" not in answer:
        return f"`passed` is missing (got keys: {', '.join(sorted(map(str, answer))) or 'none'})"
    if not isinstance(answer["passed"], bool):
        return f"`passed` must be true or false, got {answer['passed']!r}"
    if not isinstance(answer.get("notes", ""), str):
        return f"`notes` must be a string, got {type(answer['notes']).__name__}"
    return None


class VerdictAnswer(BaseModel):
    """A reviewer's answer as the review loop needs it: whether the result passed and,
    when it did not, what to fix (a failed round sends these notes back to the task's agent:
    "不通过 → Worker 修复 → 重新 review"). Strict: an unknown key is most likely a misspelt one
    (`pass`, `note`) that would otherwise lose the verdict or its notes, and `passed` must be a
    JSON boolean, not a string that looks like one."""

    model_config = ConfigDict(extra="forbid", strict=True)

    passed: bool
    notes: str = Field(default="", validate_default=True)

    @field_validator("notes")
    @classmethod
    def _failing_says_what_to_fix(cls, notes: str, info: ValidationInfo) -> str:
        if info.data.get("passed") is False and not notes.strip():
            raise ValueError("a failing verdict must say what to fix")
        return notes


def verdict_problem(answer: Any) -> str | None:
    """Why the answer is not a strict verdict (`VerdictAnswer`), in one line naming the field;
    None when it is one."""
    try:
        VerdictAnswer.model_validate(answer)
    except ValidationError as error:
        return describe_validation_error(error)
    return None


def failed_verdict(reviewer: str, reason: str) -> Verdict:
    """The verdict of a reviewer that could not answer at all (its run failed for good)."""
    return Verdict(reviewer=reviewer, passed=False, notes=bounded(f"reviewer failed: {reason}"))


def review_round(step: RunReview, verdict: Verdict, at: datetime) -> ReviewRound:
    return ReviewRound(kind="review", round=step.round, stage=step.stage, verdicts=[verdict], at=at)


def verification_round(
    step: RunVerification, verdicts: Sequence[Verdict], at: datetime
) -> ReviewRound:
    """All verifiers' verdicts, in the order the gate names them."""
    return ReviewRound(kind="verify", round=step.round, verdicts=list(verdicts), at=at)


def bounded(text: str) -> str:
    """At most MAX_NOTES characters, marking the cut."""
    if len(text) <= MAX_NOTES:
        return text
    marker = " [...]"
    return text[: MAX_NOTES - len(marker)] + marker


# --- Human approval ---------------------------------------------------------------------------


def approval_required(task: PlanTask) -> bool:
    return task.approval is not None and task.approval.required


def approval_problem(request: ApprovalRequest, state: PlanState) -> str | None:
    """Why `request` cannot be applied to the plan now (one line), or None when it can: the
    task must be one of the plan's, waiting for approval, and not decided yet (two decisions
    can arrive before the task moves on; the first one counts)."""
    record = next((task for task in state.tasks if task.id == request.task), None)
    if record is None:
        return f"task: {request.task!r} is not a task of plan {state.plan_id}"
    if record.approval is not None:
        verb = "approved" if record.approval.approved else "rejected"
        return f"task: {request.task!r} was already {verb} by {record.approval.by}"
    if record.state != TaskState.AWAITING_APPROVAL:
        return f"task: {request.task!r} is {record.state.value}, not awaiting approval"
    return None


class Decisions:
    """The decisions being checked (their caller read from the run's history, one at a time per
    task), and the tasks whose approval timer fired while one was: those wait for that decision
    and take no later one. Kept apart from the record: a decision being checked is a moment of
    the run, not of the plan."""

    def __init__(self) -> None:
        self._deciding: set[str] = set()
        self._closed: set[str] = set()

    def checking(self, task_id: str, checking: bool) -> None:
        """A decision for the task is being checked, or no longer is."""
        if checking:
            self._deciding.add(task_id)
        else:
            self._deciding.discard(task_id)

    def deciding(self, task_id: str) -> bool:
        return task_id in self._deciding

    def any(self) -> bool:
        """Some decision is being checked."""
        return bool(self._deciding)

    def close(self, task_id: str) -> None:
        """The task's timer fired while a decision was being checked: it waits for that one."""
        self._closed.add(task_id)

    def closed(self, task_id: str) -> bool:
        return task_id in self._closed

    def problem(self, task_id: str) -> str | None:
        """Why a decision for the task cannot be taken up now, besides the record
        (`busy_problem`)."""
        return busy_problem(task_id, deciding=self.deciding(task_id), closed=self.closed(task_id))


def busy_problem(task_id: str, *, deciding: bool, closed: bool) -> str | None:
    """Why a decision for `task_id` cannot be taken up now, besides the record: another one is
    being checked (one at a time, so the first accepted is the first decided), or the task's
    timer fired while it was (the timer waits for it, and for no later one)."""
    if closed:
        return f"task: {task_id!r} timed out waiting for approval"
    if deciding:
        return f"task: {task_id!r} has a decision being checked; ask again if it is refused"
    return None


def caller_problem(request: ApprovalRequest, gate: ApprovalGate, caller: str | None) -> str | None:
    """Why the caller of `request` may not decide (one line), or None. `caller` is its client
    identity as the server recorded it with the update (None: it could not be read)."""
    if not caller:
        return "who asks is unknown: the caller's identity could not be read"
    if caller == TIMEOUT_DECIDER:
        return f"by: {caller!r} is reserved for the approval's timer; ask under another identity"
    if request.by is not None and request.by != caller:
        return f"by: {request.by!r} is not the caller's identity ({caller!r})"
    if gate.approvers is not None and caller not in gate.approvers:
        approvers = ", ".join(gate.approvers)
        return f"by: {caller!r} is not one of the task's approvers ({approvers})"
    return None


def refuse(
    record: TaskRecord, request: ApprovalRequest, caller: str | None, problem: str, at: datetime
) -> None:
    """Records a refused decision in the task's record (the latest `MAX_REFUSED` kept)."""
    by = (caller or "")[:MAX_NAME]
    refused = RefusedDecision(by=by, approve=request.approve, at=at, problem=bounded(problem))
    record.refused = [*record.refused, refused][-MAX_REFUSED:]


def decision(request: ApprovalRequest, at: datetime, by: str | None = None) -> ApprovalDecision:
    """The decision `request` makes, by its caller (`by`; runs recorded before identities were
    read took the request's own `by`)."""
    decider = by or request.by or ""
    return ApprovalDecision(approved=request.approve, by=decider, reason=request.reason, at=at)


def timed_out(gate: ApprovalGate, at: datetime) -> ApprovalDecision:
    """Nobody decided within the gate's timeout: rejected, by `timeout`."""
    reason = f"no decision within {format_duration(gate.timeout)}"
    return ApprovalDecision(approved=False, by=TIMEOUT_DECIDER, reason=reason, at=at)


def rejection(decided: ApprovalDecision) -> TaskError:
    """The error of a task whose approval was refused (by a person or the clock)."""
    why = f": {decided.reason}" if decided.reason else ""
    by = "timed out" if decided.by == TIMEOUT_DECIDER else f"rejected by {decided.by}"
    return TaskError(type=FailureType.APPROVAL_REJECTED, message=bounded(f"approval {by}{why}"))


def waiting_for(task_id: str, gate: ApprovalGate, since: datetime) -> str:
    """What the plan waits for, as its progress and UI details say it."""
    deadline = since + gate.timeout
    return f"approval of {task_id} (rejected at {deadline:{TIME_SHOWN}} if none comes)"
