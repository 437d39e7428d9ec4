"""The `write_scratchpad` activity and its trust rule: a plan writes only under the worker's own
scratchpad root, in seed 004's layout, atomically and bounded."""

from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from coord.activities.scratchpad import MAX_FILE_BYTES, ScratchpadWriter
from coord.models.agent_config import WorkerSettings
from coord.models.contract import FailureType
from coord.models.plan import PlanSpec, PlanState, TaskRecord, TaskState
from coord.models.plan_report import (
    ScratchpadWrite,
    final_report_files,
    task_plan_files,
    worker_result_files,
)
from coord.models.specs import SpecError, parse_model

SPEC = PlanSpec.model_validate(
    {
        "plan_id": "p1",
        "scratchpad": "team/pads",
        "tasks": [{"id": "a", "agent": "x"}, {"id": "b", "agent": "y", "depends_on": ["a"]}],
    }
)


async def write(root: Path | None, files: dict[str, str], spec: PlanSpec = SPEC) -> list[str]:
    writer = ScratchpadWriter(WorkerSettings(scratchpad_root=str(root) if root else None))
    request = ScratchpadWrite.of(spec, files)
    assert request is not None
    return await ActivityEnvironment().run(writer.write_scratchpad, request)


async def test_a_plan_writes_the_seed_layout_under_the_worker_root(tmp_path: Path) -> None:
    state = PlanState(
        plan_id="p1",
        tasks=[
            TaskRecord(id="a", agent="x", state=TaskState.SUCCEEDED, attempts=1, result={"n": 1}),
            TaskRecord(id="b", agent="y", state=TaskState.SKIPPED, skipped_because="a"),
        ],
    )
    written = await write(tmp_path, task_plan_files(SPEC))
    written += await write(tmp_path, worker_result_files(state.tasks[0]))
    written += await write(tmp_path, final_report_files(state))
    plan_dir = tmp_path / "team" / "pads" / "p1"
    assert written == [
        "team/pads/p1/task-plan.md",
        "team/pads/p1/worker-results/a.json",
        "team/pads/p1/final-report.md",
    ]
    assert sorted(str(p.relative_to(plan_dir)) for p in plan_dir.rglob("*")) == [
        "final-report.md",
        "task-plan.md",
        "worker-results",
        "worker-results/a.json",
    ]
    assert (plan_dir / "task-plan.md").read_text().startswith("# Task plan: p1 (p1)\n")
    assert TaskRecord.model_validate_json(
        (plan_dir / "worker-results/a.json").read_text()
    ).result == {"n": 1}
    assert (
        "| b | y | skipped | 0 | - | - | skipped: a did not succeed |"
        in (plan_dir / "final-report.md").read_text()
    )


async def test_a_rewrite_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    await write(tmp_path, {"final-report.md": "first"})
    await write(tmp_path, {"final-report.md": "second"})
    plan_dir = tmp_path / "team" / "pads" / "p1"
    assert [p.name for p in plan_dir.iterdir()] == ["final-report.md"]
    assert (plan_dir / "final-report.md").read_text() == "second"


async def test_refused_without_a_root_saying_how_to_allow_it() -> None:
    with pytest.raises(ApplicationError) as refused:
        await write(None, task_plan_files(SPEC))
    assert refused.value.type == FailureType.SCRATCHPAD_REFUSED
    assert refused.value.non_retryable
    assert "`worker: {scratchpad_root: /some/dir}`" in refused.value.message


def test_an_absolute_or_climbing_scratchpad_is_refused_at_the_edge_naming_the_field() -> None:
    document = {"plan_id": "p", "tasks": [{"id": "a", "agent": "x"}]}
    for directory, problem in [
        ("../out", "'../out' must not contain `..`"),
        ("pads/../../out", "'pads/../../out' must not contain `..`"),
        ("/etc", "'/etc' must be a relative path"),
    ]:
        with pytest.raises(SpecError) as refused:
            parse_model(PlanSpec, {**document, "scratchpad": directory}, "plan.yaml")
        assert str(refused.value).startswith(f"plan.yaml: scratchpad: {problem}")


async def test_the_activity_refuses_paths_leaving_the_root_even_when_a_caller_forged_them(
    tmp_path: Path,
) -> None:
    """A start from the Temporal CLI skips the CLI's checks: the activity's input model and its
    resolved-path check refuse again, and a symlink inside the root leads nowhere outside."""
    with pytest.raises(ValidationError, match=r"must not contain `\.\.`"):
        ScratchpadWrite(directory="pads", plan_id="p1", files={"../../escape.md": "x"})
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "pads").mkdir(parents=True)
    outside.mkdir()
    (root / "pads" / "p1").symlink_to(outside)
    spec = SPEC.model_copy(update={"scratchpad": "pads"})
    with pytest.raises(ApplicationError) as refused:
        await write(root, {"task-plan.md": "x"}, spec)
    assert refused.value.type == FailureType.SCRATCHPAD_REFUSED
    assert "leaves" in refused.value.message
    assert list(outside.iterdir()) == []


async def test_a_file_over_the_bound_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(ApplicationError) as refused:
        await write(tmp_path, {"task-plan.md": "ok", "final-report.md": "x" * (MAX_FILE_BYTES + 1)})
    assert refused.value.type == FailureType.SCRATCHPAD_REFUSED
    assert refused.value.non_retryable
    assert not (tmp_path / "team").exists()
