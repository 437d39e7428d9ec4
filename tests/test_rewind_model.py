"""The rewind's split of a log and the diff's alignment, without a server."""

from datetime import UTC, datetime, timedelta

import pytest

from coord.models.events.rewind import RewindOrigin
from coord.models.events.timeline import TimelineEntry
from coord.models.plan.model import PlanModel
from coord.models.plan.rewind import reused_tasks, run_again
from coord.models.plan.spec import PlanRewind, PlanSpec, TaskState
from coord.models.rewind.diff import RowStatus, diff_logs
from coord.models.rewind.plan import RewindRefused, plan_rewind

START = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)


def row(
    seq: int, event: str, event_id: str, cause: str | None = None, **payload: object
) -> TimelineEntry:
    return TimelineEntry(
        seq=seq,
        time=START + timedelta(seconds=seq),
        event=event,
        agent=f"/{event.lower()}",
        correlation_id="story",
        event_id=event_id,
        causation_id=cause,
        payload=dict(payload),
    )


STORY = [
    row(1, "FeatureRequested", "e1"),
    row(2, "RequirementsWritten", "e2", "e1"),
    row(3, "APIDesignCompleted", "e3", "e2"),
    row(4, "ImplementationFailed", "e4", "e3", error="bad python-pro"),
    row(5, "ReviewRequested", "e5"),  # from outside, after the point
    row(6, "ReviewDone", "e6", "e5"),
]


def test_rows_before_the_point_are_recorded_and_the_point_is_sent_again() -> None:
    plan = plan_rewind(STORY, original="story", copy_id="story-2", point="e3")
    assert [r.event_id for r in plan.recorded] == ["e1", "e2"]
    assert [item.row.event_id for item in plan.redelivered] == ["e3", "e5"]
    assert plan.regenerated == ["e4", "e6"]
    assert [after for after, _ in plan.schedule(speed=2)] == [0.0, 1.0]
    assert [after for after, _ in plan.schedule(speed=None)] == [0.0, 0.0]


def test_a_result_of_a_run_begun_before_the_point_is_reused_not_run_again() -> None:
    plan = plan_rewind(STORY, original="story", copy_id="story-2", point="e4")
    assert [item.row.event_id for item in plan.redelivered] == ["e4", "e5"]
    plan = plan_rewind(STORY, original="story", copy_id="story-2", point="e5")
    assert [item.row.event_id for item in plan.redelivered] == ["e5"]
    assert plan.regenerated == ["e6"]


def test_an_event_the_point_caused_is_made_anew_even_when_numbered_before_it() -> None:
    """A saga's events reach its chain as signals sent together, which may arrive out of causal
    order: `RemoveStaging`, caused by `RollbackAll`, caused by the point, came in first."""
    saga = [
        row(1, "ArtifactBuilt", "a1"),
        row(2, "StagingDeployed", "a2", "a1"),
        row(3, "RemoveStaging", "a5", "a4"),
        row(4, "ProductionFailed", "a3", "a2"),
        row(5, "RollbackAll", "a4", "a3"),
        row(6, "Noticed", "a6", "a5"),
    ]
    plan = plan_rewind(saga, original="story", copy_id="story-2", point="a3")
    assert [r.event_id for r in plan.recorded] == ["a1", "a2"]
    assert [item.row.event_id for item in plan.redelivered] == ["a3"]
    assert plan.regenerated == ["a5", "a4", "a6"]


def test_a_log_that_lost_its_beginning_is_refused_naming_what_is_missing() -> None:
    window = STORY[2:]
    with pytest.raises(RewindRefused, match="lacks its first events \\(numbers 1-2, before"):
        plan_rewind(window, original="story", copy_id="story-2", point="e4")
    # Numbers between rows are the chain's runs (one sequence numbers both), not lost events.
    numbered = [r.model_copy(update={"seq": r.seq * 3 - 2}) for r in STORY]
    assert plan_rewind(numbered, original="story", copy_id="story-2", point="e4").point_seq == 10


def test_a_rewind_names_the_field_it_cannot_use() -> None:
    assert (
        plan_rewind(STORY, original="story", copy_id="story-2", point="APIDesignCompleted").point
        == "e3"
    )
    with pytest.raises(RewindRefused, match="--to: 'nope' is neither an event id nor"):
        plan_rewind(STORY, original="story", copy_id="story-2", point="nope")
    with pytest.raises(RewindRefused, match="--as"):
        plan_rewind(STORY, original="story", copy_id="story", point="e1")


def test_a_copy_is_aligned_by_causation_not_by_ids_or_time() -> None:
    copy = [
        *STORY[:3],
        row(4, "ImplementationCompleted", "c4", "e3", files=3),
        row(5, "ReviewRequested", "e5"),
        row(7, "ReviewDone", "c6", "e5", verdict="ok"),
        row(8, "TestingCompleted", "c7", "c4"),
    ]
    diff = diff_logs("story", STORY, "story-2", copy)
    statuses = [(r.event, r.status) for r in diff.rows]
    assert statuses == [
        ("FeatureRequested", RowStatus.SAME),
        ("RequirementsWritten", RowStatus.SAME),
        ("APIDesignCompleted", RowStatus.SAME),
        ("ImplementationFailed", RowStatus.ONLY_LEFT),
        ("ImplementationCompleted", RowStatus.ONLY_RIGHT),
        ("ReviewRequested", RowStatus.SAME),
        ("ReviewDone", RowStatus.CHANGED),
        ("TestingCompleted", RowStatus.ONLY_RIGHT),
    ]
    assert diff.rows[6].changed == ["payload.verdict"]
    assert diff.counts()[RowStatus.ONLY_RIGHT] == 2 and diff.differs


def test_two_runs_of_the_same_story_with_new_ids_are_the_same() -> None:
    again = [r.model_copy(update={"event_id": f"x{r.seq}"}) for r in STORY]
    again = [
        r.model_copy(update={"causation_id": f"x{r.causation_id[1:]}" if r.causation_id else None})
        for r in again
    ]
    diff = diff_logs("story", STORY, "again", again)
    assert not diff.differs and len(diff.rows) == len(STORY)


def test_a_plan_rewound_to_a_task_runs_it_and_all_that_depends_on_it_again() -> None:
    spec = PlanSpec.model_validate(
        {
            "plan_id": "p",
            "tasks": [
                {"id": "a", "agent": "x"},
                {"id": "b", "agent": "x", "depends_on": ["a"]},
                {"id": "c", "agent": "x", "depends_on": ["b"]},
                {"id": "d", "agent": "x", "depends_on": ["a"]},
            ],
        }
    )
    state = PlanModel.begin(spec, START).state
    for record in state.tasks:
        record.state, record.result = TaskState.SUCCEEDED, {"done": record.id}
    assert run_again(spec, "b") == {"b", "c"}
    assert [t.id for t in reused_tasks(spec, state, "b")] == ["a", "d"]
    state.tasks[1].state = TaskState.ERROR
    assert [t.id for t in reused_tasks(spec, state, None)] == ["a", "c", "d"]
    with pytest.raises(ValueError, match="--to-task: 'z' is no task of plan 'p'"):
        reused_tasks(spec, state, "z")
    rewind = PlanRewind(of=RewindOrigin(original="p", at="b"), tasks=reused_tasks(spec, state, "b"))
    copy = spec.model_copy(update={"rewind": rewind})
    begun = PlanModel.begin(PlanSpec.model_validate(copy.model_dump()), START)
    assert [t.id for t in begun.graph.take_startable()] == ["b"], "a and d are done already"
