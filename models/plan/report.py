"""A plan's scratchpad files (the scratchpad layout), rendered from its spec and record:
`task-plan.md` (the graph: tasks, agents, dependencies, gates), `worker-results/<task>.json`
(one task's outcome) and `final-report.md` (per task: state, attempts, duration, outcome, review
rounds; the summary line).

Pure and deterministic, so the TaskGraph workflow renders them for `write_scratchpad` and the CLI
shows the same words. Results and messages are cut to an excerpt in the markdown (the whole
record is in each task's JSON), which keeps a report of many tasks within an activity payload."""

import json
from collections.abc import Mapping
from datetime import timedelta
from graphlib import TopologicalSorter
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coord.models.events.timeline import TimelineEntry
from coord.models.plan.announcer import EVENTS_WINDOW
from coord.models.plan.spec import (
    ApprovalDecision,
    Dispatch,
    PlanSpec,
    PlanState,
    PlanStatus,
    PlanTask,
    ReviewRound,
    TaskRecord,
    TaskState,
    counts_line,
    relative_path,
)
from coord.models.wire.durations import format_duration
from coord.models.wire.sizes import json_size, newest_within
from coord.models.wire.specs import IDENTIFIER, MAX_ITEMS, MAX_NAME

TASK_PLAN_FILE = "task-plan.md"
FINAL_REPORT_FILE = "final-report.md"
WORKER_RESULTS_DIR = "worker-results"
EXCERPT = 300
"""Characters of a result, error or note shown in the markdown."""
MEMO_EVENT_BYTES = 256 * 1024
"""JSON bytes of the events a plan's memo keeps at most (`memo_events`)."""
ON_FAILURE = {
    True: "cancel the rest and fail the plan (fail_fast)",
    False: "skip the failed task's dependents, run the rest",
}
PLACED = "placed per agent as the plan begins: a short in-process agent runs in the plan itself"
"""Where a run goes is the worker's to say once the plan has begun (after this file is
written): a local run, else where `dispatch` sends it."""
AGENT_RUNS = {
    Dispatch.AGENT_QUEUES: f"{PLACED}, any other on its agent's own task queue",
    Dispatch.COORDINATOR: f"{PLACED}, any other on the plan's own queue (dispatch: coordinator)",
}


def worker_result_file(task_id: str) -> str:
    return f"{WORKER_RESULTS_DIR}/{task_id}.json"


class ScratchpadWrite(BaseModel):
    """What `write_scratchpad` writes: `files` (path -> text) under `<root>/<directory>/<plan_id>/`,
    where the root is the worker's own. Every path is relative and never climbs with `..`; the
    activity checks that again against the resolved root."""

    model_config = ConfigDict(extra="forbid")

    directory: str = Field(min_length=1, max_length=MAX_NAME)
    plan_id: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME)
    files: dict[str, str] = Field(min_length=1, max_length=MAX_ITEMS + 2)

    @field_validator("directory")
    @classmethod
    def _directory_under_root(cls, directory: str) -> str:
        return relative_path(directory)

    @model_validator(mode="after")
    def _files_under_directory(self) -> Self:
        for path in self.files:
            try:
                relative_path(path)
            except ValueError as error:
                raise ValueError(f"files: {error}") from None
        return self


def task_plan_files(spec: PlanSpec) -> dict[str, str]:
    return {TASK_PLAN_FILE: task_plan_markdown(spec)}


def worker_result_files(record: TaskRecord) -> dict[str, str]:
    return {worker_result_file(record.id): worker_result_json(record)}


def final_report_files(state: PlanState) -> dict[str, str]:
    return {FINAL_REPORT_FILE: final_report_markdown(state)}


# --- How the plan ended ------------------------------------------------------------------------


def final_status(
    counts: Mapping[TaskState, int], total: int, *, stopped: bool, cancelled: bool
) -> PlanStatus:
    """Completed when every task succeeded, failed when none did or the plan stopped early
    (`fail_fast`), partial in between; cancelled whatever its tasks did."""
    succeeded = counts.get(TaskState.SUCCEEDED, 0)
    if cancelled:
        return PlanStatus.CANCELLED
    if succeeded == total:
        return PlanStatus.COMPLETED
    if succeeded == 0 or stopped:
        return PlanStatus.FAILED
    return PlanStatus.PARTIAL


def summary_of(counts: dict[TaskState, int], total: int, stopping: str | None) -> str:
    """`4 of 6 succeeded, 1 error, 1 skipped` (and why it stopped early, if it did)."""
    line = counts_line(counts, total)
    return f"{line} ({stopping})" if stopping else line


def memo_record(state: PlanState) -> PlanState:
    """The record kept in the memo: bounded, so without task results, transitions, review
    rounds, the team's messages and its long-lived members' memories (the result, or the
    failure's details, has them all), and with the newest of its events (`memo_events`): a
    cancelled plan has no other record, and `coord events` reads them from it."""
    tasks = [
        record.model_copy(update={"result": None, "transitions": [], "reviews": []})
        for record in state.tasks
    ]
    words = state.messages.model_copy(update={"sent": []})
    events = memo_events(state.events)
    return state.model_copy(
        update={"tasks": tasks, "events": events, "messages": words, "members": {}}
    )


def memo_events(events: list[TimelineEntry]) -> list[TimelineEntry]:
    """The newest events the memo keeps: the record's window (`EVENTS_WINDOW`) within
    MEMO_EVENT_BYTES of JSON, so the memo stays far below the server's limit (2 MiB by
    default) whatever the events carry."""
    return newest_within(events, EVENTS_WINDOW, MEMO_EVENT_BYTES, json_size)


# --- Words shared by the markdown and the terminal ---------------------------------------------


def elapsed(value: timedelta) -> str:
    """`2.1s`, `3m05s`, `1h02m`: how long, to a reader (not a spec's duration)."""
    seconds = max(0.0, value.total_seconds())
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{second:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def excerpt(text: str, limit: int = EXCERPT) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def summary_line(state: PlanState) -> str:
    """The record's own summary, or one from its counts: `4 of 6 succeeded, 1 error, 1 skipped`."""
    if state.summary:
        return state.summary
    return counts_line(state.counts(), len(state.tasks))


def outcome(record: TaskRecord) -> str:
    """A task's result, error or skip reason, in a line."""
    if record.state == TaskState.SKIPPED:
        return f"skipped: {record.skipped_because or 'a dependency'} did not succeed"
    if record.state == TaskState.CANCELLED:
        reasons = [t.reason for t in record.transitions if t.reason]
        return f"cancelled: {reasons[-1]}" if reasons else "cancelled"
    if record.error is not None:
        return excerpt(f"{record.error.type}: {record.error.message}")
    if record.ended_as is not None:
        return excerpt(record.ended_as)
    if record.result_ref is not None:
        ref = record.result_ref
        return f"stored by reference: sha256 {ref.sha256[:12]}… ({ref.bytes} bytes)"
    if record.result is not None:
        return excerpt(_compact_json(record.result))
    return record.progress or "-"


def approval_words(decision: ApprovalDecision) -> str:
    verb = "approved" if decision.approved else "rejected"
    reason = f": {excerpt(decision.reason)}" if decision.reason else ""
    return f"{verb} by {decision.by}{reason}"


def round_words(entry: ReviewRound) -> str:
    """`review spec_compliance #1: failed (reviewer: notes)`, or every verifier's verdict."""
    what = (
        f"{entry.kind} {entry.stage} #{entry.round}"
        if entry.stage
        else f"{entry.kind} #{entry.round}"
    )
    verdicts = "; ".join(
        f"{v.reviewer} {'passed' if v.passed else 'failed'}"
        + (f": {excerpt(v.notes)}" if v.notes else "")
        for v in entry.verdicts
    )
    return f"{what}: {'passed' if entry.passed else 'failed'} ({verdicts or 'no verdict'})"


# --- task-plan.md --------------------------------------------------------------------------------


def task_plan_markdown(spec: PlanSpec) -> str:
    lines = [f"# Task plan: {spec.name} ({spec.plan_id})", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    if spec.planner is not None:
        lines += [f"- goal: {spec.goal}", f"- planned by: {spec.planner.agent}"]
    lines += [
        f"- tasks: {len(spec.tasks)}; at most {spec.max_workers} running at once",
        f"- on a failure: {ON_FAILURE[spec.fail_fast]}",
        f"- agent runs: {AGENT_RUNS[spec.dispatch]}",
        "",
        "## Tasks",
        "",
        _row("Task", "Agent", "Depends on", "Priority", "Timeout", "Retries", "Gates", "Summary"),
        _row(*["---"] * 8),
    ]
    lines += [_task_row(spec, task) for task in spec.tasks]
    if spec.team:
        lines += ["", "## Team", "", _row("Member", "Role", "Agent"), _row(*["---"] * 3)]
        lines += [_row(name, m.role or "-", m.agent) for name, m in spec.team.items()]
    lines += ["", "## Order", "", "Tasks in one wave may run together (within the cap):", ""]
    lines += [f"{n}. {', '.join(wave)}" for n, wave in enumerate(waves(spec), start=1)]
    return "\n".join(lines) + "\n"


def _task_row(spec: PlanSpec, task: PlanTask) -> str:
    agent = spec.agent_of(task) + (f" (member {task.member})" if task.member else "")
    retries = "until success" if task.retry.max_retries is None else str(task.retry.max_retries)
    return _row(
        task.id,
        agent,
        ", ".join(task.depends_on) or "-",
        task.priority,
        format_duration(task.timeout),
        retries,
        "; ".join(gates(task)) or "-",
        task.summary or "-",
    )


def gates(task: PlanTask) -> list[str]:
    """What stands between a task and success besides its own run."""
    named = []
    if task.approval is not None and task.approval.required:
        named.append(f"approval (within {format_duration(task.approval.timeout)})")
    if task.review is not None:
        stages = " then ".join(task.review.stages)
        named.append(
            f"review {stages} by {task.review.reviewer}, fix budget {task.review.fix_budget}"
        )
    if task.verify is not None:
        verifiers = " and ".join(task.verify.verifiers)
        named.append(f"verified by {verifiers}, fix budget {task.verify.fix_budget}")
    return named


def waves(spec: PlanSpec) -> list[list[str]]:
    """The graph's topological levels, each in declaration order: what can run together."""
    order = {task.id: i for i, task in enumerate(spec.tasks)}
    sorter = TopologicalSorter({task.id: task.depends_on for task in spec.tasks})
    sorter.prepare()
    levels = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=order.__getitem__)
        levels.append(ready)
        sorter.done(*ready)
    return levels


# --- worker-results/<task>.json and final-report.md ---------------------------------------------


def worker_result_json(record: TaskRecord) -> str:
    """The task's whole record: state, attempts, result (or its reference), error, reviews,
    approval and every transition."""
    return record.model_dump_json(indent=2, exclude_none=True) + "\n"


def final_report_markdown(state: PlanState) -> str:
    lines = [
        f"# Final report: {state.name or state.plan_id} ({state.plan_id})",
        "",
        f"**{state.status}**: {summary_line(state)}",
        "",
    ]
    if state.started_at is not None and state.ended_at is not None:
        took = elapsed(state.ended_at - state.started_at)
        lines.append(
            f"- ran {state.started_at:%Y-%m-%d %H:%M:%S} to {state.ended_at:%H:%M:%S} UTC ({took})"
        )
    if state.tokens.runs:
        lines.append(f"- tokens: {state.tokens.describe()}")
    if lines[-1]:
        lines.append("")
    lines += [
        _row("Task", "Agent", "State", "Attempts", "Duration", "Reviews", "Outcome"),
        _row(*["---"] * 7),
    ]
    lines += [_record_row(record) for record in state.tasks]
    if state.scratchpad_error:
        lines += ["", f"Scratchpad not fully written: {state.scratchpad_error}"]
    details = [line for record in state.tasks for line in _task_details(record)]
    if details:
        lines += ["", "## Reviews and approvals", "", *details]
    return "\n".join(lines + team_messages_markdown(state)) + "\n"


def team_messages_markdown(state: PlanState) -> list[str]:
    """The team's messages in the plan's order, and those refused with why (none: nothing)."""
    post = state.messages
    if not post.sent and not post.refused:
        return []
    lines = ["", "## Team messages", ""]
    lines += [
        f"- {m.seq}. {m.sender} -> {m.to} ({m.task}): {excerpt(m.message)}" for m in post.sent
    ]
    lines += [f"- refused ({r.task}): {r.reason}" for r in post.refused]
    return lines


def _record_row(record: TaskRecord) -> str:
    duration = record.duration
    return _row(
        record.id,
        record.agent,
        record.state,
        str(record.attempts),
        elapsed(duration) if duration is not None else "-",
        str(len(record.reviews)) if record.reviews else "-",
        outcome(record),
    )


def _task_details(record: TaskRecord) -> list[str]:
    lines = []
    if record.approval is not None:
        lines.append(f"- {record.id}: {approval_words(record.approval)}")
    lines += [f"- {record.id}: {round_words(entry)}" for entry in record.reviews]
    return lines


def _row(*cells: str) -> str:
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _cell(text: str) -> str:
    """User text inside a markdown table cell: one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|") or "-"


def _compact_json(value: object) -> str:
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False, sort_keys=True)
