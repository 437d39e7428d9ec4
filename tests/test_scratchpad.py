"""The `write_scratchpad` activity and its trust rule: a plan writes only under the worker's own
scratchpad root, in layout, atomically and bounded."""

import asyncio
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from coord.activities.plan.scratchpad import MAX_FILE_BYTES, ScratchpadWriter
from coord.models.mesh.config import WorkerSettings
from coord.models.plan.report import (
    ScratchpadWrite,
    final_report_files,
    final_report_markdown,
    task_plan_files,
    task_plan_markdown,
    worker_result_files,
)
from coord.models.plan.spec import PlanSpec, PlanState, PlanStatus, TaskRecord, TaskState
from coord.models.wire.contract import FailureType
from coord.models.wire.specs import SpecError, parse_model
from coord.starter import api
from coord.worker import build_worker, default_registry

SPEC = PlanSpec.model_validate(
    {
        "plan_id": "p1",
        "scratchpad": "team/pads",
        "tasks": [{"id": "a", "agent": "x"}, {"id": "b", "agent": "y", "depends_on": ["a"]}],
    }
)


async def write(root: Path | None, files: dict[str, str], spec: PlanSpec = SPEC) -> list[str]:
    writer = ScratchpadWriter(WorkerSettings(scratchpad_root=str(root) if root else None))
    assert spec.scratchpad is not None
    request = ScratchpadWrite(directory=spec.scratchpad, plan_id=spec.plan_id, files=files)
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


def scratchpad_plan(scratchpad: str) -> PlanSpec:
    """The task graph's shape in small: two roots feeding `build`, which fails (injected), so `ship`
    is skipped while `docs` completes."""
    fast = {"max_retries": 0}
    return PlanSpec.model_validate(
        {
            "plan_id": f"pad-{uuid.uuid4().hex[:8]}",
            "scratchpad": scratchpad,
            "tasks": [
                {"id": "api", "agent": "backend-architect", "retry": fast},
                {"id": "db", "agent": "database-specialist", "retry": fast},
                {
                    "id": "build",
                    "agent": "python-pro",
                    "depends_on": ["api", "db"],
                    "input": {"inject": {"fail": ["python-pro"]}},
                    "retry": fast,
                },
                {"id": "ship", "agent": "test-engineer", "depends_on": ["build"], "retry": fast},
                {"id": "docs", "agent": "ux-designer", "retry": fast},
            ],
        }
    )


async def run_with_root(
    client: Client, task_queue: str, spec: PlanSpec, root: Path | None
) -> PlanState:
    registry = default_registry()
    registry.settings = WorkerSettings(scratchpad_root=str(root) if root else None)
    async with build_worker(client, task_queue, registry):
        handle = await api.start_plan(client, spec, queue=task_queue)
        return await asyncio.wait_for(api.plan_outcome(handle), 60)


async def test_a_plan_run_writes_its_scratchpad_as_it_goes(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = scratchpad_plan("runs")
    state = await run_with_root(client, task_queue, spec, tmp_path)
    assert state.status == PlanStatus.PARTIAL and state.scratchpad_error is None
    plan_dir = tmp_path / "runs" / spec.plan_id
    assert sorted(str(p.relative_to(plan_dir)) for p in plan_dir.rglob("*.*")) == [
        "final-report.md",
        "task-plan.md",
        "worker-results/api.json",
        "worker-results/build.json",
        "worker-results/db.json",
        "worker-results/docs.json",
    ]
    assert (plan_dir / "task-plan.md").read_text() == task_plan_markdown(spec)
    assert (plan_dir / "final-report.md").read_text() == final_report_markdown(state)
    build = TaskRecord.model_validate_json((plan_dir / "worker-results/build.json").read_text())
    assert build.state == TaskState.ERROR and build.error is not None
    assert "python-pro failed (injected, attempt 1)" in build.error.message


async def test_a_worker_without_a_root_records_the_refusal_and_the_plan_goes_on(
    client: Client, task_queue: str
) -> None:
    spec = scratchpad_plan("runs")
    state = await run_with_root(client, task_queue, spec, None)
    assert state.status == PlanStatus.PARTIAL
    assert state.summary == "3 of 5 succeeded, 1 error, 1 skipped"
    assert state.scratchpad_error is not None  # the first write refused: the plan's or a run's
    assert ": scratchpad_refused: this worker keeps no scratchpads" in state.scratchpad_error
