"""A plan task's gates inside the `TaskGraph` workflow: human approval before the task asks for
a worker slot, and after a successful run the review stages, then dual verification, with fix
rounds in between. What runs next is decided by `coord.models.plan.gates` from the task's
record; this module runs it: timers, the `approve` update's checks, and each reviewer or
verifier as a `run_agent` activity that takes one of the plan's worker slots like any run."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.mesh.agents import AgentResult
    from coord.models.plan.gates import (
        BudgetSpent,
        GatesPassed,
        RunFix,
        RunReview,
        RunVerification,
        approval_problem,
        approval_required,
        bounded,
        caller_problem,
        decision,
        failed_verdict,
        next_gate_step,
        parse_verdict,
        refuse,
        review_round,
        reviewer_inputs,
        verdict_problem,
        verification_round,
    )
    from coord.models.plan.model import PlanModel
    from coord.models.plan.spec import (
        ApprovalDecision,
        ApprovalRequest,
        ReviewStage,
        TaskError,
        TaskRecord,
        UpdateCaller,
        Verdict,
        review_activity_id,
        verify_activity_id,
    )
    from coord.models.wire.contract import FailureType, failure
    from coord.models.wire.sizes import json_size
    from coord.models.wire.versions import STRICT_VERDICTS_PATCH
    from coord.workflows._runtime import calls
    from coord.workflows._runtime.common import InvalidInput, PlainInput, decode_input, task_error
    from coord.workflows._runtime.patches import patched
    from coord.workflows.plan.task import TaskRun

ReviewOutcome = tuple[Verdict, TaskError | None]
"""A reviewer's verdict, and the task's error when the reviewer could not give one (its run
failed for good, or its answer was not a verdict)."""
CALLER_READ_TIMEOUT = timedelta(seconds=10)
CALLER_READ_RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(milliseconds=200))
"""Reading who called is a history read on the plan's own worker: retried a little, then the
decision is refused (the caller may ask again)."""


class GatedTaskRun(TaskRun):
    """`TaskRun` with the task's gates at its extension points."""

    async def before_run(self) -> bool:
        """Waits for a person's decision (or the gate's timeout) before the task asks for a
        slot; the decision is in the record, put there by the `approve` update."""
        gate = self.task.approval
        if gate is None or not approval_required(self.task):
            return True
        record = self.model.record(self.task.id)
        self.model.graph.task_awaiting_approval(self.task.id, workflow.now())
        self.changed()
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: record.approval is not None,
                timeout=gate.timeout,
                timeout_summary=f"{self.task.id}: approval timeout",
            )
        if record.approval is None and self.model.decisions.deciding(self.task.id):
            await self._decision_checked(record)
        return self.model.graph.approval_ended(self.task.id, gate, workflow.now())

    async def _decision_checked(self, record: TaskRecord) -> None:
        """The timer fired while a decision accepted before it was being checked (who called):
        that decision still counts, if its caller may decide; no later one is taken."""
        decisions = self.model.decisions
        decisions.close(self.task.id)
        await workflow.wait_condition(
            lambda: record.approval is not None or not decisions.deciding(self.task.id)
        )

    async def after_run(self, result: AgentResult, round: int) -> bool:
        """Runs what the gates say until they pass (True) or the task ended (False)."""
        while True:
            step = next_gate_step(self.task, self.model.record(self.task.id))
            if isinstance(step, GatesPassed):
                return True
            if isinstance(step, BudgetSpent):
                self.model.graph.task_error(self.task.id, workflow.now(), step.error)
                return False
            if not await self._gate_step(step):
                return False

    async def _gate_step(self, step: RunReview | RunVerification | RunFix) -> bool:
        """One round or fix; False when it ended the task."""
        if isinstance(step, RunFix):
            return await self.run_agent(step.round, step.inputs()) is not None
        self._reviewing()
        if isinstance(step, RunReview):
            outcomes = [await self._review(step.reviewer, step.stage, step.round)]
            round_ = review_round(step, outcomes[0][0], workflow.now())
        else:
            outcomes = await _all(
                [self._review(verifier, None, step.round) for verifier in step.verifiers]
            )
            round_ = verification_round(step, [verdict for verdict, _ in outcomes], workflow.now())
        failed = next((error for _, error in outcomes if error is not None), None)
        goes_on = self.model.graph.task_reviewed(self.task.id, round_, failed, workflow.now())
        self.changed()
        return goes_on

    def _reviewing(self) -> None:
        if self.model.graph.task_reviewing(self.task.id, workflow.now()):
            self.changed()

    async def _review(self, reviewer: str, stage: ReviewStage | None, round: int) -> ReviewOutcome:
        """One reviewer's (stage given) or verifier's run on the task's current result."""
        task = self.task
        if stage is not None:
            activity_id = review_activity_id(task.id, stage.value, round)
            summary = f"{task.id} review {stage.value} #{round}"
        else:
            activity_id = verify_activity_id(task.id, reviewer, round)
            summary = f"{task.id} verify {reviewer} #{round}"
        requests = self.model.requests
        inputs = reviewer_inputs(task.id, requests.result_input(task.id), stage)
        request = requests.reviewer_request(task, reviewer, activity_id, self.workflow_id, inputs)

        async def start() -> AgentResult:
            await self.fan_out.room(json_size(request))
            return await self.start_agent(request, activity_id, summary)

        what = f"review {stage.value}" if stage is not None else "verification"
        try:
            answer = await self.slotted(activity_id, start)
        except ActivityError as error:
            failed = task_error(error)
            verdict = failed_verdict(reviewer, failed.message)
            failed.message = f"{what} by {reviewer} failed: {failed.message}"
            return verdict, failed
        return _verdict(reviewer, answer.data, what)


def _verdict(reviewer: str, answer: object, what: str) -> ReviewOutcome:
    """The reviewer's answer as its verdict. An answer that is not a strict verdict (an unknown
    key, `passed` not a boolean, a failing verdict without notes) is the reviewer's invalid
    payload: a failed verdict saying why, and the task's error (a fix cannot mend a reviewer).
    Runs recorded before the check made such an answer a failed (or passing) verdict only."""
    problem = verdict_problem(answer)
    if problem is None or not patched(STRICT_VERDICTS_PATCH):
        return parse_verdict(reviewer, answer), None
    invalid = f"invalid verdict: {problem}"
    error = TaskError(
        type=FailureType.INVALID_PAYLOAD, message=bounded(f"{what} by {reviewer}: {invalid}")
    )
    return Verdict(reviewer=reviewer, passed=False, notes=bounded(invalid)), error


async def _all(reviews: list[Awaitable[ReviewOutcome]]) -> list[ReviewOutcome]:
    """Every verifier at once, in the gate's order. When the task is cancelled meanwhile,
    every verifier's run is cancelled with it (none is left running unawaited)."""
    runs = [asyncio.ensure_future(review) for review in reviews]
    try:
        return list(await asyncio.gather(*runs))
    except BaseException:
        for run in runs:
            run.cancel()
        await asyncio.wait(runs)
        raise


# --- The `approve` update ---------------------------------------------------------------------


def checked_approval(model: PlanModel | None, raw: PlainInput) -> ApprovalRequest:
    """The update's request, if it can be taken up now; else an `invalid_approval` failure
    whose message is one line saying why (a malformed request naming its field, `by:
    timeout`, an unknown task, a task not waiting for approval or already decided, or one
    with another decision being checked)."""
    if model is None:
        raise _invalid("the plan did not start (its spec is invalid): nothing to approve")
    try:
        request = decode_input(ApprovalRequest, raw, "approval")
    except InvalidInput as error:
        raise _invalid(str(error)) from None
    task_id = request.task
    problem = approval_problem(request, model.state) or model.decisions.problem(task_id)
    if problem is not None:
        raise _invalid(problem)
    return request


async def decide_approval(
    model: PlanModel | None, raw: PlainInput, changed: Callable[[], None]
) -> ApprovalDecision:
    """Records the decision where the waiting task finds it, by its caller: the client identity
    the server recorded with the update, read from the run's history once the update is
    accepted (the handler is not told who called). A caller that may not decide (not one of the
    task's `approvers`, a `by` that is not its identity, no identity) is refused with
    `approval_refused` and recorded in the task's `refused`; the task keeps waiting. One
    decision per task is checked at a time (`checked_approval`)."""
    request = checked_approval(model, raw)
    assert model is not None
    gate = model.task(request.task).approval
    assert gate is not None
    model.decisions.checking(request.task, True)
    try:
        caller = await _update_caller(request.task)
    finally:
        model.decisions.checking(request.task, False)
    record = model.record(request.task)
    refused = caller_problem(request, gate, caller)
    if refused is not None:
        refuse(record, request, caller, refused, workflow.now())
        changed()
        raise failure(FailureType.APPROVAL_REFUSED, refused, non_retryable=True)
    problem = approval_problem(request, model.state)  # the plan may have moved meanwhile
    if problem is not None:
        raise _invalid(problem)
    record.approval = decision(request, workflow.now(), caller)
    changed()
    return record.approval


async def _update_caller(task_id: str) -> str | None:
    """The identity of the client that sent the update being handled (None when it could not
    be read)."""
    info, update = workflow.info(), workflow.current_update_info()
    assert update is not None
    caller = UpdateCaller(workflow_id=info.workflow_id, run_id=info.run_id, update_id=update.id)
    try:
        identity: str = await calls.execute(
            refs.UPDATE_CALLER,
            caller,
            start_to_close_timeout=CALLER_READ_TIMEOUT,
            retry_policy=CALLER_READ_RETRY,
            summary=f"{task_id}: who decides",
        )
    except ActivityError:
        return None
    return identity


def apply_approval(
    model: PlanModel | None, raw: PlainInput, changed: Callable[[], None]
) -> ApprovalDecision:
    """Runs recorded before `APPROVER_IDENTITY_PATCH`: records the decision, by the request's
    `by`, where the waiting task finds it. Checked again: the validator accepted the request,
    but another decision for the same task may have been applied since (both accepted in one
    workflow task); that one counts, and this update fails saying so."""
    request = checked_approval(model, raw)
    assert model is not None
    decided = decision(request, workflow.now())
    model.record(request.task).approval = decided
    changed()
    return decided


def _invalid(message: str) -> ApplicationError:
    return failure(FailureType.INVALID_APPROVAL, message, non_retryable=True)
