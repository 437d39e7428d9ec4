"""How a plan ended and its scratchpad's markdown and JSON (models/plan/report.py), from a spec
and a record: pure, no server needed."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.results import ResultReference
from coord.models.plan.announcer import EVENTS_WINDOW
from coord.models.plan.report import (
    MEMO_EVENT_BYTES,
    elapsed,
    final_report_markdown,
    final_status,
    memo_record,
    outcome,
    summary_line,
    summary_of,
    task_plan_markdown,
    waves,
    worker_result_json,
)
from coord.models.plan.spec import (
    ApprovalDecision,
    PlanSpec,
    PlanState,
    PlanStatus,
    ReviewRound,
    ReviewStage,
    TaskError,
    TaskRecord,
    TaskState,
    Transition,
    Verdict,
)

AT = datetime(2026, 11, 23, 1, 0, tzinfo=UTC)
SPEC = PlanSpec.model_validate(
    {
        "plan_id": "p1",
        "name": "Ship | it",
        "description": "A task graph's shape",
        "max_workers": 2,
        "team": {"rev": {"role": "reviewer", "agent": "code-reviewer"}},
        "tasks": [
            {"id": "join", "agent": "z", "depends_on": ["build", "docs"]},
            {"id": "build", "agent": "x", "summary": "Build it", "depends_on": ["api", "db"]},
            {"id": "api", "agent": "x", "review": {"reviewer": "r"}},
            {"id": "db", "member": "rev", "verify": {"verifiers": ["v1", "v2"]}},
            {
                "id": "docs",
                "agent": "y",
                "approval": {"timeout": "2h"},
                "retry": {"max_retries": 0},
            },
        ],
    }
)


def table_rows(markdown: str, header: str) -> list[list[str]]:
    """The cells of the markdown table whose header row starts with `| header |`."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_the_task_plan_shows_every_task_its_agent_dependencies_and_gates() -> None:
    markdown = task_plan_markdown(SPEC)
    assert markdown.startswith("# Task plan: Ship | it (p1)\n\nA task graph's shape\n")
    assert "at most 2 running at once" in markdown
    assert (
        "- agent runs: placed per agent as the plan begins: a short in-process agent runs in the"
        " plan itself, any other on its agent's own task queue\n"
    ) in markdown
    rows = {row[0]: row for row in table_rows(markdown, "Task")}
    assert rows["join"][1:4] == ["z", "build, docs", "normal"]
    assert rows["build"][-1] == "Build it"
    assert rows["api"][6] == "review spec_compliance then code_quality by r, fix budget 3"
    assert rows["db"][1] == "code-reviewer (member rev)"
    assert rows["db"][6] == "verified by v1 and v2, fix budget 3"
    assert rows["docs"][4:7] == ["5m", "0", "approval (within 2h)"]
    assert table_rows(markdown, "Member") == [["rev", "reviewer", "code-reviewer"]]


def test_waves_are_the_topological_levels_in_declaration_order() -> None:
    assert waves(SPEC) == [["api", "db", "docs"], ["build"], ["join"]]
    assert task_plan_markdown(SPEC).endswith("1. api, db, docs\n2. build\n3. join\n")


def record(task_id: str, state: TaskState, **fields: object) -> TaskRecord:
    return TaskRecord.model_validate({"id": task_id, "agent": "x", "state": state, **fields})


STATE = PlanState(
    plan_id="p1",
    name="Ship",
    status=PlanStatus.PARTIAL,
    started_at=AT,
    ended_at=AT + timedelta(seconds=75),
    tasks=[
        record(
            "api",
            TaskState.SUCCEEDED,
            attempts=1,
            started_at=AT,
            ended_at=AT + timedelta(seconds=2.14),
            result={"routes": ["a|b"], "notes": "line\nbreak"},
            reviews=[
                ReviewRound(
                    kind="review",
                    round=1,
                    stage=ReviewStage.SPEC_COMPLIANCE,
                    verdicts=[Verdict(reviewer="r", passed=False, notes="missing /health")],
                    at=AT,
                ),
                ReviewRound(
                    kind="review",
                    round=2,
                    stage=ReviewStage.SPEC_COMPLIANCE,
                    verdicts=[Verdict(reviewer="r", passed=True)],
                    at=AT,
                ),
            ],
        ),
        record(
            "db",
            TaskState.SUCCEEDED,
            attempts=2,
            result_ref=ResultReference(sha256="ab" * 32, bytes=40_000),
            reviews=[
                ReviewRound(
                    kind="verify",
                    round=1,
                    verdicts=[
                        Verdict(reviewer="v1", passed=True),
                        Verdict(reviewer="v2", passed=False, notes="typo"),
                    ],
                    at=AT,
                )
            ],
        ),
        record(
            "docs",
            TaskState.ERROR,
            attempts=1,
            started_at=AT,
            ended_at=AT + timedelta(seconds=65),
            error=TaskError(type="approval_rejected", message="not now"),
            approval=ApprovalDecision(approved=False, by="ann", reason="not now", at=AT),
        ),
        record("build", TaskState.SKIPPED, skipped_because="docs"),
        record("join", TaskState.SKIPPED, skipped_because="docs"),
    ],
)


API_RESULT = '{"notes": "line\\nbreak", "routes": ["a\\|b"]}'
"""JSON escapes the newline; the markdown escapes the pipe."""


def test_the_final_report_gives_each_task_state_attempts_duration_reviews_and_outcome() -> None:
    markdown = final_report_markdown(STATE)
    assert markdown.startswith(
        "# Final report: Ship (p1)\n\n**partial**: 2 of 5 succeeded, 1 error, 2 skipped\n\n"
        "- ran 2026-11-23 01:00:00 to 01:01:15 UTC (1m15s)\n"
    )
    assert table_rows(markdown, "Task") == [
        ["api", "x", "succeeded", "1", "2.1s", "2", API_RESULT],
        [
            "db",
            "x",
            "succeeded",
            "2",
            "-",
            "1",
            "stored by reference: sha256 abababababab… (40000 bytes)",
        ],
        ["docs", "x", "error", "1", "1m05s", "-", "approval_rejected: not now"],
        ["build", "x", "skipped", "0", "-", "-", "skipped: docs did not succeed"],
        ["join", "x", "skipped", "0", "-", "-", "skipped: docs did not succeed"],
    ]
    assert markdown.endswith(
        "## Reviews and approvals\n\n"
        "- api: review spec_compliance #1: failed (r failed: missing /health)\n"
        "- api: review spec_compliance #2: passed (r passed)\n"
        "- db: verify #1: failed (v1 passed; v2 failed: typo)\n"
        "- docs: rejected by ann: not now\n"
    )


def test_a_cancelled_task_says_why() -> None:
    cancelled = record(
        "a",
        TaskState.CANCELLED,
        transitions=[{"state": "cancelled", "at": AT, "reason": "plan cancelled"}],
    )
    assert outcome(cancelled) == "cancelled: plan cancelled"
    assert outcome(record("b", TaskState.CANCELLED)) == "cancelled"


def test_the_record_s_own_summary_wins_and_long_results_are_cut_in_the_markdown() -> None:
    long = STATE.model_copy(
        update={
            "summary": "stopped by fail_fast",
            "tasks": [record("a", TaskState.SUCCEEDED, result={"text": "x" * 5000})],
        }
    )
    assert summary_line(long) == "stopped by fail_fast"
    outcome = table_rows(final_report_markdown(long), "Task")[0][-1]
    assert len(outcome) == 300 and outcome.endswith("…")


def test_a_worker_result_is_the_task_s_whole_record_as_json() -> None:
    task = STATE.tasks[0]
    text = worker_result_json(task)
    assert TaskRecord.model_validate_json(text) == task
    assert json.loads(text)["result"]["routes"] == ["a|b"]


def test_elapsed_reads_as_seconds_minutes_or_hours() -> None:
    assert [elapsed(timedelta(seconds=s)) for s in (0.04, 59.94, 65, 3725)] == [
        "0.0s",
        "59.9s",
        "1m05s",
        "1h02m",
    ]


@pytest.mark.parametrize(
    ("succeeded", "stopped", "cancelled", "status"),
    [
        (3, False, False, PlanStatus.COMPLETED),
        (1, False, False, PlanStatus.PARTIAL),
        (0, False, False, PlanStatus.FAILED),
        (1, True, False, PlanStatus.FAILED),
        (3, False, True, PlanStatus.CANCELLED),
    ],
)
def test_the_final_status_follows_from_the_tasks_that_succeeded(
    succeeded: int, stopped: bool, cancelled: bool, status: PlanStatus
) -> None:
    counts = {TaskState.SUCCEEDED: succeeded, TaskState.ERROR: 3 - succeeded}
    assert final_status(counts, 3, stopped=stopped, cancelled=cancelled) == status


def test_the_summary_says_why_a_plan_stopped_early() -> None:
    counts = {TaskState.SUCCEEDED: 1, TaskState.ERROR: 1, TaskState.CANCELLED: 1}
    assert summary_of(counts, 3, None) == "1 of 3 succeeded, 1 error, 1 cancelled"
    assert summary_of(counts, 3, "fail_fast: task b ended error") == (
        "1 of 3 succeeded, 1 error, 1 cancelled (fail_fast: task b ended error)"
    )


def test_the_memo_keeps_the_record_without_results_transitions_or_reviews() -> None:
    done = record("build", TaskState.SUCCEEDED, result={"big": "x" * 100})
    done.transitions.append(Transition(state=TaskState.SUCCEEDED, at=AT))
    state = PlanState(plan_id="p1", tasks=[done], summary="1 of 1 succeeded")
    kept = memo_record(state)
    assert (kept.tasks[0].result, kept.tasks[0].transitions, kept.tasks[0].reviews) == (
        None,
        [],
        [],
    )
    assert kept.summary == state.summary and state.tasks[0].result == {"big": "x" * 100}


def test_the_memo_keeps_the_newest_events_within_its_bounds() -> None:
    """A cancelled plan has only its memo: `coord events` reads its events there, the newest
    `EVENTS_WINDOW` of them within MEMO_EVENT_BYTES."""

    def row(seq: int, size: int = 10) -> TimelineEntry:
        return TimelineEntry(
            seq=seq,
            time=AT,
            event="TaskStarted",
            agent="/plan/p1",
            correlation_id="p1",
            event_id=f"evt-{seq}",
            causation_id=None,
            payload={"note": "x" * size},
        )

    rows = [row(seq) for seq in range(1, EVENTS_WINDOW + 11)]
    kept = memo_record(PlanState(plan_id="p1", events=rows)).events
    assert [r.seq for r in kept] == [r.seq for r in rows[-EVENTS_WINDOW:]]
    big = [row(seq, MEMO_EVENT_BYTES // 3) for seq in range(1, 6)]
    kept = memo_record(PlanState(plan_id="p1", events=big)).events
    assert [r.seq for r in kept] == [4, 5]
