"""The coordinator-mode demo plan (examples/plan-seed003.yaml): it has shape, the
demo agents run it to completion (through a fix round of each gate when told to reject), and an
injected failure skips exactly the failed task's dependents while the other branch completes."""

import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from coord.models.plan.spec import PlanSpec, PlanState, PlanStatus, ReviewStage, TaskState
from coord.models.wire.specs import load_spec
from coord.starter import api
from coord.starter.demo import plan_run
from coord.worker import build_worker, default_registry
from tests.helpers import quick_demo_plan_steps

PLAN_EXAMPLE = Path(__file__).parent.parent / "examples" / "plan-seed003.yaml"


@pytest.fixture(autouse=True)
def _quick_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    quick_demo_plan_steps(monkeypatch)


def test_the_example_has_seed_003s_shape_and_the_demo_agents_run_it() -> None:
    spec = load_spec(PlanSpec, PLAN_EXAMPLE)
    graph = {task.id: task.depends_on for task in spec.tasks}
    assert graph == {
        "analyze-code": [],
        "scan-security": [],
        "fix-findings": ["analyze-code", "scan-security"],
        "write-docs": [],
        "test-docs": ["write-docs"],
        "release": ["fix-findings", "test-docs"],
    }
    gated = {task.id for task in spec.tasks if task.review is not None}
    verified = {task.id for task in spec.tasks if task.verify is not None}
    assert (gated, verified) == ({"fix-findings"}, {"release"})
    registry = default_registry(demo_agents=True)
    assert [agent for _, agent in spec.agents_named() if agent not in registry] == []


async def run_demo_plan(client: Client, task_queue: str, inject: dict[str, Any]) -> PlanState:
    """The example as `coord demo` runs it (the demo's own injection), on a worker of its own."""
    spec = plan_run(load_spec(PlanSpec, PLAN_EXAMPLE), f"demo-{uuid.uuid4().hex[:8]}", inject)
    async with build_worker(client, task_queue, default_registry(demo_agents=True)):
        return await api.plan_outcome(await api.start_plan(client, spec, queue=task_queue))


def states(state: PlanState) -> dict[str, TaskState]:
    return {task.id: task.state for task in state.tasks}


async def test_the_example_completes_and_each_task_gets_its_dependencies_results(
    client: Client, task_queue: str
) -> None:
    state = await run_demo_plan(client, task_queue, {})
    assert state.status == PlanStatus.COMPLETED
    assert set(states(state).values()) == {TaskState.SUCCEEDED}
    results = {task.id: task.result or {} for task in state.tasks}
    used = results["release"]["used"]
    assert used == {
        "fix-findings": results["fix-findings"]["ref"],
        "test-docs": results["test-docs"]["ref"],
    }


async def test_a_rejected_first_result_is_fixed_then_passes_each_gate(
    client: Client, task_queue: str
) -> None:
    state = await run_demo_plan(client, task_queue, {"reject": ["reviewer", "verifier-b"]})
    assert state.status == PlanStatus.COMPLETED
    fixed, released = (
        next(t for t in state.tasks if t.id == i) for i in ("fix-findings", "release")
    )
    assert [(r.stage, r.passed) for r in fixed.reviews] == [
        (ReviewStage.SPEC_COMPLIANCE, False),
        (ReviewStage.SPEC_COMPLIANCE, True),
        (ReviewStage.CODE_QUALITY, True),
    ]
    verdicts = [{v.reviewer: v.passed for v in r.verdicts} for r in released.reviews]
    assert verdicts == [
        {"verifier-b": False, "verifier-c": True},
        {"verifier-b": True, "verifier-c": True},
    ]
    assert (fixed.fixes, released.fixes) == (1, 1)


async def test_an_injected_failure_skips_exactly_its_dependents(
    client: Client, task_queue: str
) -> None:
    state = await run_demo_plan(client, task_queue, {"fail": ["scan-security"]})
    assert state.status == PlanStatus.PARTIAL
    assert states(state) == {
        "analyze-code": TaskState.SUCCEEDED,
        "scan-security": TaskState.ERROR,
        "fix-findings": TaskState.SKIPPED,
        "write-docs": TaskState.SUCCEEDED,
        "test-docs": TaskState.SUCCEEDED,
        "release": TaskState.SKIPPED,
    }
    skipped = {t.id: t.skipped_because for t in state.tasks if t.state == TaskState.SKIPPED}
    assert skipped == {"fix-findings": "scan-security", "release": "scan-security"}
    scan = next(task for task in state.tasks if task.id == "scan-security")
    assert scan.attempts == 3
