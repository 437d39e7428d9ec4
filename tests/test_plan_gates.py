"""A plan task's gates on the real dev server and the time-skipping server: the two-stage
review (stage order, a fix round, the budget spent), dual verification, and human approval
(granted, rejected, timed out). The agents are the test's own, run through the real
`run_agent` activity; each records what it was asked, so the test sees the order and the inputs
from the agents' side as well as from the plan's record and history."""

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.plan.gates import REVIEW_NOTES_INPUT
from coord.models.plan.spec import (
    TIMEOUT_DECIDER,
    ApprovalDecision,
    ApprovalRequest,
    PlanProgress,
    PlanSpec,
    PlanState,
    PlanStatus,
    TaskError,
    TaskRecord,
    TaskState,
)
from coord.models.wire.contract import (
    APPROVE_UPDATE,
    PLAN_RECORD_MEMO,
    PLAN_WORKFLOW,
    PROGRESS_QUERY,
    STATE_QUERY,
    FailureType,
    failure,
)
from coord.starter.api.common import kept_record
from coord.worker import build_worker
from tests.helpers import connected_as, wait_until
from tests.test_plan import REMOTE, most_at_once, run_agent_spans

Answer = dict[tuple[str, str, int], tuple[bool, str]]
"""A scripted reviewer's verdicts: (reviewer, stage or `verify`, version reviewed) -> (passed,
notes). Anything not scripted passes."""


@dataclass
class GateAgents:
    """`coder` returns `{"version": n}` for its n-th run and keeps the inputs of each run; the
    reviewers answer from `answers` and keep what they were asked, in order."""

    answers: Answer = field(default_factory=dict)
    coder_inputs: list[Mapping[str, Any]] = field(default_factory=list)
    reviewed: list[tuple[str, str, int]] = field(default_factory=list)
    reviewers: tuple[str, ...] = ("reviewer", "verifier-b", "verifier-c")
    padding: int = 0
    """Characters of filler in each coder result (to make it larger than the plan's limit)."""

    local: bool = False
    """Whether the agents run as local activities (python agents' default); these tests read
    the activities they schedule, so they run them `execution: remote`."""

    def registry(self) -> AgentRegistry:
        registry = AgentRegistry()
        declared = None if self.local else REMOTE
        registry.register("coder", "python", declared)(self._coder)
        registry.register("worker", "python", declared)(self._worker)
        for name in self.reviewers:
            registry.register(name, "python", declared)(self._reviewer(name))
        return registry

    async def _coder(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        self.coder_inputs.append(dict(context.inputs))
        version = int(context.idempotency_key.rsplit("/", 1)[1])
        return {"version": version, **({"padding": "x" * self.padding} if self.padding else {})}

    async def _worker(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {"done": event.event.type}

    def _reviewer(self, name: str) -> Any:
        async def review(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
            stage = str(context.inputs.get("stage", "verify"))
            version = int(context.inputs["result"]["version"])
            self.reviewed.append((name, stage, version))
            passed, notes = self.answers.get((name, stage, version), (True, "fine"))
            return {"passed": passed, "notes": notes}

        return review


def plan(name: str, *tasks: dict[str, Any], **fields: Any) -> PlanSpec:
    """A plan with a unique id that still says what it shows (recorded histories are named by
    it)."""
    return PlanSpec.model_validate(
        {"plan_id": f"{name}-{uuid.uuid4().hex[:8]}", "tasks": list(tasks), **fields}
    )


async def start(client: Client, task_queue: str, spec: PlanSpec) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        PLAN_WORKFLOW, spec.model_dump(mode="json"), id=spec.workflow_id, task_queue=task_queue
    )


async def outcome(handle: WorkflowHandle[Any, Any]) -> PlanState:
    return PlanState.model_validate(await asyncio.wait_for(handle.result(), timeout=60))


async def run_plan(
    client: Client, task_queue: str, spec: PlanSpec, agents: GateAgents
) -> PlanState:
    async with build_worker(client, task_queue, agents.registry()):
        return await outcome(await start(client, task_queue, spec))


def task_of(state: PlanState, task_id: str) -> TaskRecord:
    return next(task for task in state.tasks if task.id == task_id)


def rounds(record: TaskRecord) -> list[tuple[str, int, str | None, list[tuple[str, bool]]]]:
    return [
        (r.kind, r.round, r.stage, [(v.reviewer, v.passed) for v in r.verdicts])
        for r in record.reviews
    ]


async def scheduled_activities(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The ids of the activities the plan scheduled, in order."""
    return [activity_id for activity_id, _ in await scheduled_with_summaries(handle)]


async def scheduled_with_summaries(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str]]:
    """The activities the plan scheduled, in order, with the summary the UI shows for each."""
    converter = DataConverter.default.payload_converter
    return [
        (
            event.activity_task_scheduled_event_attributes.activity_id,
            converter.from_payload(event.user_metadata.summary, str),
        )
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


# --- Review gates -----------------------------------------------------------------------------


async def test_a_failing_stage_one_is_fixed_with_its_notes_before_stage_two(
    client: Client, task_queue: str
) -> None:
    agents = GateAgents(answers={("reviewer", "spec_compliance", 1): (False, "add the tests")})
    spec = plan("review-fix", {"id": "build", "agent": "coder", "review": {"reviewer": "reviewer"}})
    async with build_worker(client, task_queue, agents.registry()):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
    build = task_of(state, "build")
    assert state.status == PlanStatus.COMPLETED
    assert build.state == TaskState.SUCCEEDED
    assert build.result == {"version": 2}
    assert build.fixes == 1
    assert agents.reviewed == [
        ("reviewer", "spec_compliance", 1),
        ("reviewer", "spec_compliance", 2),
        ("reviewer", "code_quality", 2),
    ]
    assert REVIEW_NOTES_INPUT not in agents.coder_inputs[0]
    assert agents.coder_inputs[1][REVIEW_NOTES_INPUT] == [
        {
            "reviewer": "reviewer",
            "stage": "spec_compliance",
            "passed": False,
            "notes": "add the tests",
        }
    ]
    assert rounds(build) == [
        ("review", 1, "spec_compliance", [("reviewer", False)]),
        ("review", 2, "spec_compliance", [("reviewer", True)]),
        ("review", 2, "code_quality", [("reviewer", True)]),
    ]
    assert build.reviews[0].verdicts[0].notes == "add the tests"
    assert await scheduled_with_summaries(handle) == [
        ("build/run/1", "build: coder"),
        ("build/review/spec_compliance/1", "build review spec_compliance #1"),
        ("build/run/2", "build: coder"),
        ("build/review/spec_compliance/2", "build review spec_compliance #2"),
        ("build/review/code_quality/2", "build review code_quality #2"),
    ]
    states = [t.state for t in build.transitions]
    assert states == [
        TaskState.PENDING,
        TaskState.READY,
        TaskState.RUNNING,
        TaskState.REVIEWING,
        TaskState.RUNNING,
        TaskState.REVIEWING,
        TaskState.SUCCEEDED,
    ]


async def test_a_spent_fix_budget_fails_the_task_and_skips_only_its_dependents(
    client: Client, task_queue: str
) -> None:
    never = {("reviewer", "spec_compliance", v): (False, f"still wrong in v{v}") for v in (1, 2)}
    agents = GateAgents(answers=never)
    spec = plan(
        "review-budget",
        {"id": "build", "agent": "coder", "review": {"reviewer": "reviewer", "fix_budget": 1}},
        {"id": "deploy", "agent": "worker", "depends_on": ["build"]},
        {"id": "docs", "agent": "worker"},
    )
    state = await run_plan(client, task_queue, spec, agents)
    build, deploy, docs = (task_of(state, t) for t in ("build", "deploy", "docs"))
    assert state.status == PlanStatus.PARTIAL
    assert build.state == TaskState.ERROR
    assert build.error is not None and build.error.type == FailureType.REVIEW_REJECTED
    assert build.error.message == (
        "review spec_compliance still failing after 1 fix (fix budget spent): "
        "reviewer: still wrong in v2"
    )
    assert build.fixes == 1
    assert [r.stage for r in build.reviews] == ["spec_compliance", "spec_compliance"]
    assert ("reviewer", "code_quality", 2) not in agents.reviewed
    assert deploy.state == TaskState.SKIPPED and deploy.skipped_because == "build"
    assert docs.state == TaskState.SUCCEEDED


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"verdict": "LGTM"}, "passed: Field required; verdict: Extra inputs are not permitted"),
        ({"passed": True, "note": "fine"}, "note: Extra inputs are not permitted"),
        ({"passed": False}, "notes: a failing verdict must say what to fix"),
        ({"passed": "false", "notes": "no"}, "passed: Input should be a valid boolean"),
    ],
    ids=["nonsense", "unknown-key", "failing-without-notes", "passed-as-text"],
)
async def test_a_reviewer_answer_that_is_not_a_strict_verdict_is_an_invalid_payload(
    client: Client, task_queue: str, answer: dict[str, Any], why: str
) -> None:
    """The task ends error `invalid_payload` naming the field, its dependents skipped, with no
    fix round (a fix cannot mend the reviewer); the round records a failed verdict saying why."""
    agents = GateAgents(reviewers=("verifier-b", "verifier-c"))
    agents_registry = agents.registry()

    @agents_registry.register("reviewer")
    async def confused(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return answer

    spec = plan(
        "review-invalid-verdict",
        {"id": "build", "agent": "coder", "review": {"reviewer": "reviewer"}},
        {"id": "deploy", "agent": "worker", "depends_on": ["build"]},
    )
    async with build_worker(client, task_queue, agents_registry):
        state = await outcome(await start(client, task_queue, spec))
    build = task_of(state, "build")
    assert build.state == TaskState.ERROR
    assert build.error == TaskError(
        type=FailureType.INVALID_PAYLOAD,
        message=f"review spec_compliance by reviewer: invalid verdict: {why}",
    )
    assert rounds(build) == [("review", 1, "spec_compliance", [("reviewer", False)])]
    assert build.reviews[0].verdicts[0].notes == f"invalid verdict: {why}"
    assert build.fixes == 0 and len(agents.coder_inputs) == 1
    assert task_of(state, "deploy").state == TaskState.SKIPPED


async def test_a_result_stored_by_reference_reaches_the_reviewers_as_data(
    client: Client, task_queue: str
) -> None:
    agents = GateAgents(
        answers={("reviewer", "spec_compliance", 1): (False, "again")}, padding=64 * 1024
    )
    spec = plan(
        "review-by-reference",
        {"id": "build", "agent": "coder", "review": {"reviewer": "reviewer"}},
        result_limit=1024,
    )
    async with build_worker(client, task_queue, agents.registry()):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
        history = (await handle.fetch_history()).to_json()
    build = task_of(state, "build")
    assert build.state == TaskState.SUCCEEDED
    assert build.result is None and build.result_ref is not None
    assert agents.reviewed == [
        ("reviewer", "spec_compliance", 1),
        ("reviewer", "spec_compliance", 2),
        ("reviewer", "code_quality", 2),
    ]
    assert "x" * 1024 not in history


# --- Dual verification ------------------------------------------------------------------------


async def test_dual_verification_fixes_with_both_verdicts_until_both_pass(
    client: Client, task_queue: str
) -> None:
    agents = GateAgents(answers={("verifier-c", "verify", 1): (False, "the numbers are off")})
    spec = plan(
        "verify",
        {"id": "report", "agent": "coder", "verify": {"verifiers": ["verifier-b", "verifier-c"]}},
    )
    async with build_worker(client, task_queue, agents.registry()):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
    report = task_of(state, "report")
    assert report.state == TaskState.SUCCEEDED and report.result == {"version": 2}
    assert rounds(report) == [
        ("verify", 1, None, [("verifier-b", True), ("verifier-c", False)]),
        ("verify", 2, None, [("verifier-b", True), ("verifier-c", True)]),
    ]
    assert agents.coder_inputs[1][REVIEW_NOTES_INPUT] == [
        {"reviewer": "verifier-b", "stage": None, "passed": True, "notes": "fine"},
        {"reviewer": "verifier-c", "stage": None, "passed": False, "notes": "the numbers are off"},
    ]
    assert sorted(agents.reviewed) == [
        ("verifier-b", "verify", 1),
        ("verifier-b", "verify", 2),
        ("verifier-c", "verify", 1),
        ("verifier-c", "verify", 2),
    ]
    scheduled = await scheduled_activities(handle)
    assert scheduled[:3] == [
        "report/run/1",
        "report/verify/verifier-b/1",
        "report/verify/verifier-c/1",
    ]
    spans = {
        activity_id: (opened, closed)
        for activity_id, opened, closed in await run_agent_spans(handle)
    }
    b, c = spans["report/verify/verifier-b/1"], spans["report/verify/verifier-c/1"]
    assert b[0] < c[1] and c[0] < b[1], "the verifiers ran at once"


async def test_reviewers_and_verifiers_take_worker_slots_like_runs(
    client: Client, task_queue: str
) -> None:
    spec = plan(
        "verify-cap",
        {"id": "report", "agent": "coder", "verify": {"verifiers": ["verifier-b", "verifier-c"]}},
        {"id": "docs", "agent": "worker"},
        max_workers=1,
    )
    async with build_worker(client, task_queue, GateAgents().registry()):
        handle = await start(client, task_queue, spec)
        state = await outcome(handle)
    assert state.status == PlanStatus.COMPLETED
    spans = await run_agent_spans(handle)
    assert len(spans) == 4
    assert most_at_once(spans) == 1


async def test_a_reviewer_failing_for_good_ends_the_task_with_its_failure(
    client: Client, task_queue: str
) -> None:
    agents = GateAgents(reviewers=("verifier-b", "verifier-c"))
    registry = agents.registry()

    @registry.register("reviewer")
    async def refused(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        raise failure(FailureType.UNAUTHORIZED, "the review endpoint refused the key")

    spec = plan(
        "review-broken",
        {"id": "build", "agent": "coder", "review": {"reviewer": "reviewer"}},
        {"id": "deploy", "agent": "worker", "depends_on": ["build"]},
    )
    async with build_worker(client, task_queue, registry):
        state = await outcome(await start(client, task_queue, spec))
    build = task_of(state, "build")
    assert build.state == TaskState.ERROR
    assert build.error == TaskError(
        type=FailureType.UNAUTHORIZED,
        message="review spec_compliance by reviewer failed: the review endpoint refused the key",
    )
    assert rounds(build) == [("review", 1, "spec_compliance", [("reviewer", False)])]
    assert build.reviews[0].verdicts[0].notes == (
        "reviewer failed: the review endpoint refused the key"
    )
    assert task_of(state, "deploy").state == TaskState.SKIPPED


# --- Human approval ---------------------------------------------------------------------------


def approval_plan(name: str, timeout: str = "1d", **gate: Any) -> PlanSpec:
    return plan(
        name,
        {"id": "build", "agent": "worker"},
        {
            "id": "deploy",
            "agent": "worker",
            "depends_on": ["build"],
            "approval": {"timeout": timeout, **gate},
        },
        {"id": "announce", "agent": "worker", "depends_on": ["deploy"]},
    )


async def waiting_for_approval(handle: WorkflowHandle[Any, Any], task_id: str) -> PlanProgress:
    async def waiting() -> bool:
        state = PlanState.model_validate(await handle.query(STATE_QUERY))
        return task_of(state, task_id).state == TaskState.AWAITING_APPROVAL

    await wait_until(waiting)
    return PlanProgress.model_validate(await handle.query(PROGRESS_QUERY))


async def approve(handle: WorkflowHandle[Any, Any], *request: Any) -> Any:
    """The `approve` update with what a client sends (nothing at all, if so)."""
    return await handle.execute_update(APPROVE_UPDATE, args=request)


async def refusal(handle: WorkflowHandle[Any, Any], *request: Any) -> str:
    """Why the update was refused, as a client reads it (the failure's message)."""
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await approve(handle, *request)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == FailureType.INVALID_APPROVAL
    return cause.message


async def test_an_approved_task_runs_and_the_record_says_who_and_why(
    client: Client, task_queue: str
) -> None:
    spec = approval_plan("approval-granted")
    alice = await connected_as(client, "alice")
    async with build_worker(client, task_queue, GateAgents().registry()):
        handle = await start(client, task_queue, spec)
        progress = await waiting_for_approval(handle, "deploy")
        assert any(line.startswith("approval of deploy") for line in progress.waiting_for)
        assert "approval of deploy" in await current_details(handle)
        assert await refusal(handle, {"task": "nope"}) == (
            f"task: 'nope' is not a task of plan {spec.plan_id}"
        )
        assert await refusal(handle, {"task": "announce"}) == (
            "task: 'announce' is pending, not awaiting approval"
        )
        assert await refusal(handle, {"by": "alice"}) == "approval: task: Field required"
        assert await refusal(handle, {"task": "deploy", "when": "now"}) == (
            "approval: when: Extra inputs are not permitted"
        )
        assert await refusal(handle, "yes") == (
            "approval: expected a mapping of fields, not a string"
        )
        assert await refusal(handle) == "approval: no input given"
        two = {"task": "deploy"}
        assert await refusal(handle, two, two) == "approval: expected one input, got 2"
        decided = await approve(
            alice.get_workflow_handle(handle.id), {"task": "deploy", "reason": "change window open"}
        )
        state = await outcome(handle)
    deploy = task_of(state, "deploy")
    assert state.status == PlanStatus.COMPLETED
    assert deploy.approval is not None
    assert ApprovalDecision.model_validate(decided) == deploy.approval
    assert (deploy.approval.approved, deploy.approval.by, deploy.approval.reason) == (
        True,
        "alice",
        "change window open",
    )
    assert [t.state for t in deploy.transitions][:4] == [
        TaskState.PENDING,
        TaskState.AWAITING_APPROVAL,
        TaskState.READY,
        TaskState.RUNNING,
    ]


async def test_only_an_approver_decides_by_the_identity_the_server_recorded(
    client: Client, task_queue: str
) -> None:
    """`approvers` names client identities. A caller it does not name is refused, however the
    request names itself (`by` is checked against the identity, never taken), the refusal is
    recorded and the task keeps waiting; `timeout` is the timer's alone, as a request's `by` or
    as an identity; an approver's decision counts, its author the identity the server recorded
    with the update."""
    spec = approval_plan("approvers", approvers=["alice@ops"])
    mallory, timer, alice = [
        (await connected_as(client, who)).get_workflow_handle(spec.workflow_id)
        for who in ("mallory@laptop", "timeout", "alice@ops")
    ]
    async with build_worker(client, task_queue, GateAgents().registry()):
        handle = await start(client, task_queue, spec)
        await waiting_for_approval(handle, "deploy")
        assert await refused_as_caller(mallory, {"task": "deploy", "reason": "ship it"}) == (
            "by: 'mallory@laptop' is not one of the task's approvers (alice@ops)"
        )
        assert await refused_as_caller(mallory, {"task": "deploy", "by": "alice@ops"}) == (
            "by: 'alice@ops' is not the caller's identity ('mallory@laptop')"
        )
        assert await refused_as_caller(timer, {"task": "deploy", "approve": False}) == (
            "by: 'timeout' is reserved for the approval's timer; ask under another identity"
        )
        assert await refusal(alice, {"task": "deploy", "by": "timeout"}) == (
            "approval: by: 'timeout' is reserved for the approval's timer"
        )
        waiting = task_of(PlanState.model_validate(await handle.query(STATE_QUERY)), "deploy")
        decided = await approve(alice, {"task": "deploy", "reason": "reviewed"})
        state = await outcome(handle)
    assert waiting.state == TaskState.AWAITING_APPROVAL and waiting.approval is None
    deploy = task_of(state, "deploy")
    assert deploy.approval == ApprovalDecision.model_validate(decided)
    assert (deploy.approval.approved, deploy.approval.by) == (True, "alice@ops")
    assert [(r.by, r.approve, r.problem.split(":")[0]) for r in deploy.refused] == [
        ("mallory@laptop", True, "by"),
        ("mallory@laptop", True, "by"),
        ("timeout", False, "by"),
    ]
    assert waiting.refused == deploy.refused
    assert state.status == PlanStatus.COMPLETED


async def refused_as_caller(handle: WorkflowHandle[Any, Any], request: Any) -> str:
    """Why the plan refused the decision once it knew who called (`approval_refused`)."""
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await approve(handle, request)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == FailureType.APPROVAL_REFUSED
    return cause.message


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    """The plan's current details as the UI shows them."""
    metadata: WorkflowMetadata = await handle.query(
        "__temporal_workflow_metadata", result_type=WorkflowMetadata
    )
    return metadata.current_details


async def test_a_rejected_task_ends_error_and_its_dependents_are_skipped(
    client: Client, task_queue: str
) -> None:
    spec = approval_plan("approval-rejected")
    async with build_worker(client, task_queue, GateAgents().registry()):
        handle = await start(client, task_queue, spec)
        await waiting_for_approval(handle, "deploy")
        request = ApprovalRequest(task="deploy", approve=False, reason="not on Friday")
        bob = (await connected_as(client, "bob")).get_workflow_handle(handle.id)
        await approve(bob, request.model_dump(exclude_none=True))
        state = await outcome(handle)
        scheduled = await scheduled_activities(handle)
    deploy, announce = task_of(state, "deploy"), task_of(state, "announce")
    assert state.status == PlanStatus.PARTIAL
    assert deploy.state == TaskState.ERROR
    assert deploy.approval is not None and deploy.approval.by == "bob"
    assert deploy.error is not None and deploy.error.type == FailureType.APPROVAL_REJECTED
    assert deploy.error.message == "approval rejected by bob: not on Friday"
    assert deploy.attempts == 0 and "deploy/run/1" not in scheduled
    assert announce.state == TaskState.SKIPPED and announce.skipped_because == "deploy"


async def test_cancelling_a_plan_cancels_a_task_waiting_for_approval(
    client: Client, task_queue: str
) -> None:
    spec = approval_plan("approval-cancelled")
    async with build_worker(client, task_queue, GateAgents().registry()):
        handle = await start(client, task_queue, spec)
        await waiting_for_approval(handle, "deploy")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 30)
        state = await kept_record(handle, PLAN_RECORD_MEMO, PlanState)
    assert state is not None and state.status == PlanStatus.CANCELLED
    deploy = task_of(state, "deploy")
    assert deploy.state == TaskState.CANCELLED and deploy.approval is None
    assert task_of(state, "announce").state == TaskState.CANCELLED


async def test_approval_times_out_as_a_rejection_by_timeout(time_env: WorkflowEnvironment) -> None:
    task_queue = f"tq-{uuid.uuid4()}"
    spec = approval_plan("approval-timeout", timeout="1d")
    async with build_worker(time_env.client, task_queue, GateAgents().registry()):
        handle = await start(time_env.client, task_queue, spec)
        state = await outcome(handle)
    deploy = task_of(state, "deploy")
    assert deploy.state == TaskState.ERROR
    assert deploy.approval is not None
    assert (deploy.approval.approved, deploy.approval.by) == (False, TIMEOUT_DECIDER)
    assert deploy.error is not None and deploy.error.message == (
        "approval timed out: no decision within 1d"
    )
    assert task_of(state, "announce").state == TaskState.SKIPPED
    assert state.ended_at is not None and state.started_at is not None
    assert state.ended_at - state.started_at >= spec.task("deploy").approval.timeout  # type: ignore[union-attr]
