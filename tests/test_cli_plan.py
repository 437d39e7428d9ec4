"""`coord plan` as a user runs it, against the session's dev server: a plan started from a YAML
file and waited for, its table and its JSON record, cancel, approve, and bad input as one line
with the README's exit code."""

import asyncio
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.infra.temporal import IDENTITY_ENV
from coord.models.events.timeline import TimelineEntry
from coord.models.plan.report import task_plan_markdown
from coord.models.plan.spec import (
    ApprovalGate,
    ApprovalRequest,
    PlanSpec,
    PlanState,
    PlanStatus,
    TaskState,
)
from coord.models.wire import contract
from coord.starter import api
from coord.starter.exits import ExitCode
from coord.worker import build_worker
from tests.helpers import eventually
from tests.workers import COORD, run, server_env

NO_RETRY = {"max_retries": 0}


def plan_file(folder: Path, **fields: Any) -> tuple[str, Path]:
    """The task graph's shape in small, on the demo agents: two roots feeding `build`, a second
    branch `docs`, and `ship` joining them."""
    plan_id = f"cli-{uuid.uuid4().hex[:8]}"
    document = {
        "plan_id": plan_id,
        "name": "Ship the feature",
        "tasks": [
            {"id": "api", "agent": "backend-architect", "summary": "Design the API"},
            {"id": "db", "agent": "database-specialist"},
            {"id": "build", "agent": "python-pro", "depends_on": ["api", "db"]},
            {"id": "docs", "agent": "ux-designer"},
            {"id": "ship", "agent": "test-engineer", "depends_on": ["build", "docs"]},
        ],
        **fields,
    }
    for task in document["tasks"]:
        task.setdefault("retry", NO_RETRY)
    path = folder / f"{plan_id}.yaml"
    path.write_text(yaml.safe_dump(document))
    return plan_id, path


def table(out: str) -> dict[str, list[str]]:
    """The plan table's rows by task (cells as printed, piped)."""
    rows = [[cell.strip() for cell in line.split(" | ")] for line in out.splitlines()]
    return {row[0]: row[1:] for row in rows if len(row) == 5 and row[0] != "Task"}


async def test_start_wait_prints_the_final_table_and_state_reads_it_as_table_and_json(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = server_env(dev_env, task_queue)
    plan_id, path = plan_file(tmp_path)
    failing = {"inject": {"fail": ["python-pro"]}}
    document = yaml.safe_load(path.read_text())
    document["tasks"][2]["input"] = failing
    # no jitter: the retry waits its whole 6 s, long enough for --wait to see it waiting
    document["tasks"][2]["retry"] = {"max_retries": 1, "initial_delay": "6s", "jitter": "none"}
    # a heartbeat timeout keeps the run an activity task: a local run's retries stay in its worker
    document["tasks"][2]["heartbeat_timeout"] = "30s"
    path.write_text(yaml.safe_dump(document))
    async with build_worker(client, task_queue):
        code, out, err = await run(COORD, "plan", "start", str(path), "--wait", env=env)
        assert code == ExitCode.PLAN_NOT_COMPLETED, err
        assert out.splitlines()[0].startswith(f"started plan-{plan_id}: http")
        retry = re.compile(
            r"build: python-pro: attempt 2 \(last failure: python-pro failed \(injected, "
            r"attempt 1\)\), next retry at \d\d:\d\d:\d\d \(in \ds\)"
        )
        assert any(retry.fullmatch(line) for line in err.splitlines()), err
        rows = table(out)
        assert rows["api"][:2] == ["succeeded", "1"]
        assert rows["build"][:2] == ["error", "2"]
        assert rows["build"][3].startswith("temporary_failure: python-pro failed (injected")
        assert rows["ship"] == ["skipped", "0", "-", "skipped: build did not succeed"]
        assert rows["docs"][0] == "succeeded"
        assert f"Plan {plan_id}: partial, 3 of 5 succeeded, 1 error, 1 skipped" in out

        description = await api.plan_handle(client, plan_id).describe()
        assert await description.static_summary() == (
            f"Plan Ship the feature ({plan_id}): 5 tasks, at most 5 at once"
        )
        assert await description.static_details() == task_plan_markdown(
            PlanSpec.model_validate(document)
        )
        code, shown, _ = await run(COORD, "plan", "state", plan_id, env=env)
        assert code == 0 and table(shown) == rows
        code, line, _ = await run(COORD, "plan", "state", f"plan-{plan_id}", "--json", env=env)
    assert code == 0 and len(line.splitlines()) == 1
    state = PlanState.model_validate_json(line)
    assert state.status == PlanStatus.PARTIAL
    assert [t.state for t in state.tasks] == [
        TaskState.SUCCEEDED,
        TaskState.SUCCEEDED,
        TaskState.ERROR,
        TaskState.SUCCEEDED,
        TaskState.SKIPPED,
    ]
    assert state.tasks[0].result is not None and state.tasks[0].result["summary"]


async def test_a_plan_that_completes_exits_0_and_json_prints_the_record(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = server_env(dev_env, task_queue)
    plan_id, path = plan_file(tmp_path)
    async with build_worker(client, task_queue):
        code, out, err = await run(
            COORD, "plan", "start", str(path), "--id", f"{plan_id}-2", "--wait", "--json", env=env
        )
    assert code == 0, err
    assert f"started plan-{plan_id}-2: http" in err  # stdout is the JSON alone, for tools
    state = PlanState.model_validate_json(out)
    assert (state.plan_id, state.status) == (f"{plan_id}-2", PlanStatus.COMPLETED)
    assert state.summary == "5 of 5 succeeded"


async def test_a_plan_started_under_a_workflow_id_of_its_own_is_found_by_it(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Started from the Temporal CLI as plain JSON under any workflow id: `coord plan state`
    finds it by that id (after `plan-<id>`, which no run has)."""
    env = server_env(dev_env, task_queue)
    plan_id, path = plan_file(tmp_path)
    workflow_id = f"custom-{plan_id}"
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            contract.PLAN_WORKFLOW,
            yaml.safe_load(path.read_text()),
            id=workflow_id,
            task_queue=task_queue,
        )
        await asyncio.wait_for(handle.result(), 60)
    code, line, err = await run(COORD, "plan", "state", workflow_id, "--json", env=env)
    assert code == 0, err
    state = PlanState.model_validate_json(line)
    assert (state.plan_id, state.status) == (plan_id, PlanStatus.COMPLETED)
    code, _, err = await run(COORD, "plan", "state", plan_id, env=env)
    assert (code, err) == (ExitCode.NOT_FOUND, f"error: plan {plan_id!r} does not exist\n")


async def test_cancel_cancels_the_running_tasks_and_the_record_says_so(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = server_env(dev_env, task_queue)
    plan_id, path = plan_file(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["tasks"][0]["input"] = {"inject": {"slow": {"backend-architect": 60}}}
    # a heartbeat timeout keeps the run an activity task (a local run is never cancelled); a
    # short one has the cancel reach it within seconds (with its next heartbeat sent, at most
    # 0.8 of the timeout after the last)
    document["tasks"][0]["heartbeat_timeout"] = "5s"
    path.write_text(yaml.safe_dump(document))
    async with build_worker(client, task_queue):
        code, _, err = await run(COORD, "plan", "start", str(path), env=env)
        assert code == 0, err

        async def api_running() -> bool:
            state = await api.plan_state(client, plan_id)
            return state.tasks[0].state == TaskState.RUNNING

        await eventually(api_running)
        code, out, err = await run(COORD, "plan", "state", plan_id, env=env)
        assert code == 0, err
        assert table(out)["api"][0] == "running"
        assert table(out)["api"][3] == "Design the API"
        code, out, err = await run(COORD, "plan", "cancel", plan_id, env=env)
        assert code == 0, err
        assert (
            out == f"cancellation requested for plan {plan_id}; its running tasks are cancelled\n"
        )
        outcome = await asyncio.wait_for(api.plan_outcome(api.plan_handle(client, plan_id)), 60)
        code, again, refused = await run(COORD, "plan", "cancel", plan_id, env=env)
    assert (code, again) == (ExitCode.CONFLICT, "")
    assert refused == f"error: plan {plan_id!r} has already ended (cancelled); nothing to cancel\n"
    # A cancelled run has no result: the state is read from its memo, with no worker running.
    code, line, err = await run(COORD, "plan", "state", plan_id, "--json", env=env)
    assert code == 0, err
    assert PlanState.model_validate_json(line).tasks[0].state == TaskState.CANCELLED
    assert outcome.status == PlanStatus.CANCELLED
    assert outcome.tasks[0].state == TaskState.CANCELLED


async def test_bad_input_is_one_line_naming_the_field_with_the_documented_exit_code(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    env = server_env(dev_env, task_queue)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"scratchpad": "../elsewhere"}, "scratchpad: '../elsewhere' must not contain `..`"),
        ({"max_workers": 0}, "max_workers: Input should be greater than or equal to 1"),
    ]
    for fields, problem in cases:
        _, path = plan_file(tmp_path, **fields)
        code, out, err = await run(COORD, "plan", "start", str(path), env=env)
        assert (code, out) == (ExitCode.REFUSED, ""), err
        assert err.startswith(f"error: {path}: {problem}") and err.count("\n") == 1, err
    _, path = plan_file(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["tasks"][0]["depends_on"] = ["ship"]
    document["tasks"][3]["agent"] = "nobody"
    path.write_text(yaml.safe_dump(document))
    code, _, err = await run(COORD, "plan", "start", str(path), env=env)
    assert code == ExitCode.REFUSED
    cycle = "api -> build -> ship -> api"
    assert err == f"error: {path}: tasks: dependency cycle {cycle}; a plan must be acyclic\n"
    document["tasks"][0]["depends_on"] = []
    path.write_text(yaml.safe_dump(document))
    code, _, err = await run(COORD, "plan", "start", str(path), env=env)
    assert code == ExitCode.REFUSED
    assert err.startswith(f"error: {path}: tasks[3].agent: unknown agent 'nobody'; known agents: ")
    code, _, err = await run(COORD, "plan", "state", "no-such-plan", env=env)
    assert (code, err) == (ExitCode.NOT_FOUND, "error: plan 'no-such-plan' does not exist\n")
    code, _, err = await run(COORD, "plan", "approve", "no-such-plan", "api", env=env)
    assert (code, err) == (ExitCode.NOT_FOUND, "error: plan 'no-such-plan' does not exist\n")


async def test_add_tasks_refuses_an_agent_neither_known_here_nor_declared_by_the_plan(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Before sending, as `plan start` checks a spec: the plan took a task naming any agent,
    which then waited a minute on a queue no worker serves and failed `agent_unavailable`. An
    agent the plan declares inline is taken."""
    allowing = tmp_path / "agents.yaml"
    allowing.write_text(yaml.safe_dump({"worker": {"inline_agents": ["shell"]}}))
    env = {**server_env(dev_env, task_queue), "COORD_AGENTS": str(allowing)}
    helper = {"kind": "shell", "argv": ["sh", "-c", "echo {}"]}
    plan_id, path = plan_file(tmp_path, agents={"helper": helper})
    spec = PlanSpec.model_validate(yaml.safe_load(path.read_text()))
    spec.tasks[0].approval = ApprovalGate()  # api waits for a person: the plan keeps running
    unknown, declared = tmp_path / "unknown.yaml", tmp_path / "declared.yaml"
    unknown.write_text(yaml.safe_dump({"tasks": [{"id": "x", "agent": "nobody"}]}))
    added = [{"id": "helped", "agent": "helper", "depends_on": ["api"]}]
    added.append({"id": "checked", "agent": "python-pro", "depends_on": ["api"]})
    declared.write_text(yaml.safe_dump({"tasks": added}))
    async with build_worker(client, task_queue):
        await api.start_plan(client, spec, queue=task_queue)
        refused = await run(COORD, "plan", "add-tasks", plan_id, str(unknown), env=env)
        taken = await run(COORD, "plan", "add-tasks", plan_id, str(declared), env=env)
        await api.cancel_plan(client, plan_id)
    code, out, err = refused
    assert (code, out) == (ExitCode.REFUSED, "")
    assert err.startswith(f"error: {unknown}: tasks[0].agent: unknown agent 'nobody'; known ")
    assert err.endswith("; declared inline: helper\n") and err.count("\n") == 1
    assert taken == (0, f"added helped, checked to plan {plan_id} (7 tasks)\n", "")


async def test_approve_and_reject_waiting_tasks_and_a_second_decision_is_refused_in_one_line(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = server_env(dev_env, task_queue)
    plan_id, path = plan_file(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["tasks"][2]["approval"] = {"required": True}  # build
    document["tasks"][3]["approval"] = {"approvers": ["bob@ops"]}  # docs
    slow = {"inject": {"slow": {"frontend-specialist": 60}}}
    # an activity task: a minute-long local run would hold the plan's workflow task, and the
    # decisions below with it; the cancel at the end reaches it with its next heartbeat sent
    held = {"id": "long", "agent": "frontend-specialist", "input": slow, "heartbeat_timeout": "5s"}
    document["tasks"].append(held)
    path.write_text(yaml.safe_dump(document))
    async with build_worker(client, task_queue):
        code, _, err = await run(COORD, "plan", "start", str(path), env=env)
        assert code == 0, err

        async def both_waiting() -> bool:
            state = await api.plan_state(client, plan_id)
            return state.tasks[2].state == state.tasks[3].state == TaskState.AWAITING_APPROVAL

        await eventually(both_waiting)
        code, out, err = await run(COORD, "plan", "state", plan_id, env=env)
        assert code == 0, err
        assert table(out)["build"][0] == "awaiting_approval"
        waits = [line for line in out.splitlines() if line.startswith("Waiting for ")]
        assert [line.split(" (")[0] for line in waits] == [
            "Waiting for approval of build",
            "Waiting for approval of docs",
        ]
        assert f"Decide with `coord plan approve {plan_id} TASK`" in out
        decide = (COORD, "plan", "approve", plan_id)
        alice, bob, carol = ({**env, IDENTITY_ENV: who} for who in ("alice", "bob@ops", "carol"))
        code, out, err = await run(*decide, "build", "--reason", "go", env=alice)
        assert (code, out) == (0, f"approved task build of plan {plan_id} (by alice)\n"), err
        code, out, err = await run(*decide, "docs", "--reject", env=alice)
        assert (code, out) == (ExitCode.REFUSED, "")
        assert err == (
            "error: approval_refused: by: 'alice' is not one of the task's approvers (bob@ops)\n"
        )
        code, out, err = await run(*decide, "docs", "--reject", env=bob)
        assert (code, out) == (0, f"rejected task docs of plan {plan_id} (by bob@ops)\n"), err
        code, out, err = await run(*decide, "docs", env=carol)
        assert (code, out) == (ExitCode.REFUSED, "")
        assert err == "error: invalid_approval: task: 'docs' was already rejected by bob@ops\n"

        async def ship_skipped() -> bool:
            return (await api.plan_state(client, plan_id)).tasks[4].state == TaskState.SKIPPED

        await eventually(ship_skipped)
        await api.cancel_plan(client, plan_id)
        outcome = await asyncio.wait_for(api.plan_outcome(api.plan_handle(client, plan_id)), 60)
        code, _, err = await run(*decide, "docs", env=carol)
    assert code == ExitCode.CONFLICT
    assert err == (
        f"error: plan {plan_id!r} has already ended (cancelled); task 'docs' was not decided\n"
    )
    build, docs, ship, long = outcome.tasks[2:]
    assert build.state == TaskState.SUCCEEDED
    assert build.approval is not None and (build.approval.by, build.approval.reason) == (
        "alice",
        "go",
    )
    assert docs.state == TaskState.ERROR and docs.approval is not None
    assert (docs.approval.approved, docs.approval.by) == (False, "bob@ops")
    assert [(r.by, r.approve) for r in docs.refused] == [("alice", False)]
    assert (ship.state, ship.skipped_because) == (TaskState.SKIPPED, "docs")
    assert long.state == TaskState.CANCELLED


async def test_wait_warns_when_no_worker_polls_and_gives_up_leaving_the_plan_started(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan_id, path = plan_file(tmp_path)
    code, _, err = await run(
        *(COORD, "plan", "start", str(path), "--wait", "--no-worker-timeout", "1"),
        env=server_env(dev_env, task_queue),
    )
    await api.plan_handle(client, plan_id).terminate()
    assert code == ExitCode.NO_WORKER
    assert err.splitlines() == [
        f"warning: no worker polls task queue {task_queue!r}; the plan waits for one "
        "(start it with `coord worker`)",
        f"error: no worker polled task queue {task_queue!r} for 1s; plan-{plan_id} stays "
        "started and runs once a worker polls (`coord worker`)",
    ]


async def test_a_decision_no_worker_takes_up_says_so(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan_id, path = plan_file(tmp_path)
    spec = PlanSpec.model_validate(yaml.safe_load(path.read_text()))
    await api.start_plan(client, spec, queue=task_queue)
    request = ApprovalRequest(task="api")
    with pytest.raises(api.NoWorker) as refused:
        await api.approve_task(client, plan_id, request, answer_time=timedelta(seconds=1))
    await api.plan_handle(client, plan_id).terminate()
    assert str(refused.value) == (
        f"plan {plan_id!r}: no worker took the decision up within 1s (is one running on its "
        "task queue?); ask again: a task is decided once"
    )


async def test_an_unknown_fallback_is_refused_before_the_plan_starts(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """It passed `coord validate` and `plan start`, and failed once the task's agent could not
    take it, after its wait."""
    env = server_env(dev_env, task_queue)
    for fallback, problem in (
        ("nobody", "tasks[1].fallback: unknown agent 'nobody'; known agents: "),
        (
            {"capability": "nothing-at-all"},
            "tasks[1].fallback.capability: no declared agent offers more than 70% of "
            "nothing-at-all",
        ),
    ):
        _, path = plan_file(tmp_path)
        document = yaml.safe_load(path.read_text())
        document["tasks"][1]["fallback"] = fallback
        path.write_text(yaml.safe_dump(document))
        code, out, err = await run(COORD, "validate", "--demo-agents", str(path), env=env)
        assert code == ExitCode.REFUSED and out.startswith(f"{path}: {problem}"), out + err
        code, out, err = await run(COORD, "plan", "start", str(path), env=env)
        assert (code, out) == (ExitCode.REFUSED, ""), err
        assert err.startswith(f"error: {path}: {problem}") and err.count("\n") == 1, err


async def test_events_of_a_plan_without_a_chain_follow_it_until_it_ends_and_all_lists_them(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A plan's correlation has no chain: `events --follow` follows the plan while it waits for
    a person and ends with it; `--all` (no chain, so no log) prints the plan's events, saying
    where they come from."""
    env = server_env(dev_env, task_queue)
    plan_id, path = plan_file(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["tasks"] = [
        {
            "id": "api",
            "agent": "backend-architect",
            "approval": {"required": True},
            "retry": NO_RETRY,
        }
    ]
    path.write_text(yaml.safe_dump(document))
    async with build_worker(client, task_queue):
        code, _, err = await run(COORD, "plan", "start", str(path), env=env)
        assert code == 0, err

        async def waiting() -> bool:
            state = await api.plan_state(client, plan_id)
            return state.tasks[0].state == TaskState.AWAITING_APPROVAL

        await eventually(waiting)
        following = asyncio.ensure_future(
            run(COORD, "events", plan_id, "--follow", "--json", env=env)
        )
        code, out, err = await run(COORD, "events", plan_id, "--all", env=env)
        assert code == 0, err
        assert "ApprovalRequested" in out and out.splitlines()[-1].endswith(" events")
        assert err == (
            f"note: {plan_id!r} has no chain, so no log: these are the events its sagas, "
            "aggregators, plans and votes recorded\n"
        )
        await asyncio.sleep(3)
        assert not following.done()
        code, _, err = await run(COORD, "plan", "approve", plan_id, "api", env=env)
        assert code == 0, err
        code, out, err = await asyncio.wait_for(following, 60)
    assert code == 0, err
    followed = [TimelineEntry.model_validate_json(line).event for line in out.splitlines()]
    assert "ApprovalRequested" in followed and followed[-1] == "PlanCompleted", followed
