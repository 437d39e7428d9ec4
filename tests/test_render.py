"""The terminal views as scripts read them (piped, plain text): no server needed."""

from datetime import UTC, datetime, timedelta

from rich.cells import cell_len

from coord.models.aggregator.spec import AggregatorState, SlotStatus
from coord.models.dlq.letter import EntrySummary
from coord.models.events.timeline import TimelineEntry
from coord.models.plan.spec import PlanState, TaskRecord, TaskState
from coord.starter import render

AT = datetime(2026, 11, 22, 20, 33, 52, tzinfo=UTC)


def row(event: str, event_id: str, causation_id: str | None, *causes: str) -> TimelineEntry:
    return TimelineEntry(
        seq=0,
        time=AT,
        event=event,
        agent="/agent",
        correlation_id="story-1",
        event_id=event_id,
        causation_id=causation_id,
        causes=list(causes),
    )


def test_the_timeline_is_a_header_a_rule_and_one_line_per_event() -> None:
    view = render.timeline_table([row("A", "e1", None), row("B", "e2", "e1")])
    lines = render.plain(view).splitlines()
    assert [cell.strip() for cell in lines[0].split(" | ")] == list(render.TIMELINE_COLUMNS)
    assert set(lines[1]) == {"-", "+"}
    assert [line.split(" | ")[-1].strip() for line in lines[2:]] == ["-", "e1"]


def test_event_types_are_printed_as_written_never_as_markup() -> None:
    text = render.plain(render.timeline_table([row("[bold]Evil[/bold] :smile:", "e1", None)]))
    assert "[bold]Evil[/bold] :smile:" in text


def test_emoji_statuses_keep_the_columns_aligned_by_their_width_on_screen() -> None:
    """Padding by characters counted an emoji as one column: its row stood one column off."""
    slots = [
        SlotStatus(type="APIDesignCompleted", status="waiting"),
        SlotStatus(type="TestPlanCompleted", status="received", received_at=AT),
    ]
    text = render.plain(render.aggregator_table(AggregatorState(aggregator_id="p1", slots=slots)))
    table = text.splitlines()[:4]
    divider = {cell_len(line.rsplit(" | ", 1)[0]) for line in table if " | " in line}
    assert len(divider) == 1, table
    assert "✅ Received" in text and "⏳ Waiting" in text


def test_a_wide_table_is_never_wrapped_when_piped_and_a_long_failure_ends_in_an_ellipsis() -> None:
    entry = EntrySummary(
        entry_id="dlq-1",
        status="parked",
        failure_type="invalid_payload",
        message="x" * 200,
        attempts=1,
        event_id="evt-1",
        event_type="APIDesignCompleted",
        topic=None,
        correlation_id="story-1",
        target_workflow="chain-story-1",
        target_agent="python-pro",
        parked_at=AT,
    )
    lines = render.plain(render.dlq_table([entry])).splitlines()
    assert len(lines) == 3
    failure = lines[2].split(" | ")[3].strip()
    assert failure.endswith("…") and len(failure) == 60
    assert lines[2].split(" | ")[-1].strip() == "Fix and replay"


def test_the_causation_tree_nests_effects_under_causes_and_names_a_join_s_causes() -> None:
    tree = render.plain(
        render.causation_tree(
            [row("A", "e1", None), row("B", "e2", "e1"), row("C", "e3", "e2", "e2", "e1")]
        )
    )
    assert tree.splitlines() == [
        "A (/agent, 20:33:52)",
        "└─ B (/agent, 20:33:52)",
        "   └─ C (/agent, 20:33:52) ← B + A",
    ]


def test_the_plan_table_shows_state_attempts_elapsed_progress_counts_and_waits() -> None:
    """`coord plan state`: a running task shows its agent's latest progress and its time so
    far, an ended one its outcome; then the counts, what the plan waits for (the words of its
    progress query) and how to decide a task awaiting a person."""
    tasks = [
        TaskRecord(
            id="api",
            agent="x",
            state=TaskState.SUCCEEDED,
            attempts=1,
            started_at=AT,
            ended_at=AT + timedelta(seconds=3),
            result={"ok": True},
        ),
        TaskRecord(
            id="db",
            agent="x",
            state=TaskState.RUNNING,
            attempts=2,
            started_at=AT,
            progress="Reading runAgent.ts",
        ),
        TaskRecord(id="deploy", agent="x", state=TaskState.AWAITING_APPROVAL, summary="Ship"),
        TaskRecord(id="docs", agent="x", state=TaskState.READY),
    ]
    state = PlanState(plan_id="p1", max_workers=1, tasks=tasks, scratchpad_error="refused")
    waits = ["approval of deploy", "a worker slot (1 waiting, max_workers 1)"]
    lines = render.plain(render.plan_view(state, AT + timedelta(seconds=65), waits)).splitlines()
    cells = [[cell.strip() for cell in line.split(" | ")] for line in lines[:6]]
    assert cells[0] == ["Task", "State", "Attempts", "Elapsed", "Summary"]
    assert cells[2:] == [
        ["api", "succeeded", "1", "3.0s", '{"ok": true}'],
        ["db", "running", "2", "1m05s", "Reading runAgent.ts"],
        ["deploy", "awaiting_approval", "0", "-", "Ship"],
        ["docs", "ready", "0", "-", "-"],
    ]
    assert lines[6:] == [
        "",
        "Plan p1: running, 1 of 4 succeeded, 1 awaiting_approval, 1 ready, 1 running",
        "Tasks: 1 awaiting_approval, 1 ready, 1 running, 1 succeeded",
        "Waiting for approval of deploy",
        "Waiting for a worker slot (1 waiting, max_workers 1)",
        "Decide with `coord plan approve p1 TASK` (`--reject --reason TEXT` to reject)",
        "Scratchpad not written: refused",
    ]
