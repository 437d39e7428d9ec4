"""`coord` and the Temporal CLI as a user runs them, against the session's dev server."""

import asyncio
import json
import os
import re
import signal
import socket
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from coord.infra.dead_letters import park_dead_letter
from coord.infra.devserver import installed_binary
from coord.models.aggregator.spec import AggregatorSpec
from coord.models.chain.spec import ChainState
from coord.models.dlq.letter import DeadLetter
from coord.models.events.envelope import EventEnvelope
from coord.models.events.timeline import TimelineEntry
from coord.models.plan.spec import PlanSpec
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.contract import (
    AGENT_SERVED_ACTIVITY,
    RUN_AGENT_ACTIVITY,
    SEARCH_ATTRIBUTES,
)
from coord.models.wire.specs import read_document
from coord.starter import api
from coord.starter.commands.rewind import NO_CHAIN_HINT
from coord.starter.examples import SCHEMA_LINE
from coord.starter.exits import ExitCode
from coord.starter.progress import agent_attempts
from coord.worker import build_worker
from tests.conftest import FEATURE_DEPLOYMENT, ROOT
from tests.helpers import (
    PHASE1,
    demo_agents_remote,
    eventually,
    letter,
    orphaned,
    queries_refused_soon,
    user_story,
)
from tests.outages import free_port, listening
from tests.workers import COORD, run, server_env

USER_STORY = ROOT / "examples" / "user-story-chain.yaml"


async def test_invalid_spec_is_one_line_naming_file_field_and_problem(tmp_path: Path) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text("saga_id: x\nsteps:\n  - name: Build\n    timeout: soon\n")
    code, _, err = await run(COORD, "saga", "start", str(spec))
    assert code == ExitCode.REFUSED
    assert err == (
        f"error: {spec}: steps[0].timeout: 'soon' is not a duration; use 90s, 2h, 1d, 1h30m, "
        "500ms, a number of seconds, or ISO 8601 such as PT1M30S\n"
    )


async def test_help_lists_each_command_in_flowing_lines() -> None:
    """A docstring's own line breaks used to break the command list into ragged lines."""
    code, out, _ = await run(COORD, "--help", env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert code == 0
    assert "namespace; coord server and the compose stack do it themselves" in out


async def test_unreachable_server_says_so_and_hints_coord_server() -> None:
    code, _, err = await run(COORD, "saga", "state", "x", env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert code == ExitCode.UNREACHABLE
    assert err.strip() == (
        "error: cannot reach Temporal at 127.0.0.1:1; is it running? `coord server` starts one "
        "here, TEMPORAL_ADDRESS points elsewhere"
    )


def test_wait_reports_agents_attempts_not_the_workflows_own_checks() -> None:
    """A step whose agent no worker served waits on `is <agent> served again?`, an activity
    of the workflow's own: --wait used to report it as `is ghost served again?: attempt 1`."""
    run_agent, served = PendingActivityInfo(), PendingActivityInfo()
    run_agent.activity_type.name = RUN_AGENT_ACTIVITY
    served.activity_type.name = AGENT_SERVED_ACTIVITY
    assert agent_attempts([served, run_agent]) == [run_agent]


@pytest.mark.slow
async def test_saga_start_wait_state_and_cancel(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = server_env(dev_env, task_queue)
    failing = json.dumps({"inject": {"fail": ["DeployToProduction"]}})
    saga_id = f"cli-{task_queue}"
    # one retry, not jittered: it waits its whole 4 s, long enough for --wait to see it waiting;
    # the agents run as activity tasks, whose retries a describe shows (a local run's do not)
    spec = yaml.safe_load(FEATURE_DEPLOYMENT.read_text())
    production = next(s for s in spec["steps"] if s["name"] == "DeployToProduction")
    production["retry"] |= {"max_retries": 1, "initial_delay": "4s", "jitter": "none"}
    retried = tmp_path / "feature-deployment.yaml"
    retried.write_text(yaml.safe_dump(spec))
    async with build_worker(client, task_queue, demo_agents_remote()):
        code, out, progress = await run(
            COORD,
            "saga",
            "start",
            str(retried),
            "--id",
            saga_id,
            "--input",
            failing,
            "--wait",
            env=env,
        )
        assert code == ExitCode.SAGA_NOT_COMPLETED, out
        assert f"saga-{saga_id}" in out.splitlines()[0]
        retry = re.compile(
            r"DeployToProduction: attempt \d \(last failure: DeployToProduction failed "
            r"\(injected, attempt \d\)\), next retry at \d\d:\d\d:\d\d \(in \ds\)"
        )
        assert any(retry.fullmatch(line) for line in progress.splitlines()), progress
        code, out, _ = await run(COORD, "saga", "state", saga_id, "--json", env=env)
        assert len(out.splitlines()) == 1
        state = SagaState.model_validate_json(out)
        assert state.status == SagaStatus.COMPENSATED
        by_workflow_id = await run(COORD, "saga", "state", f"saga-{saga_id}", "--json", env=env)
        assert by_workflow_id == (ExitCode.OK, out, "")
        missing = await run(COORD, "saga", "state", "no-such-saga", env=env)
        assert missing == (ExitCode.NOT_FOUND, "", "error: saga 'no-such-saga' does not exist\n")
        assert [c.compensate for c in state.compensations] == [
            "RollbackProduction",
            "RemoveFromStaging",
        ]

        slow = json.dumps({"inject": {"slow": {"RunE2ETests": 30}}})
        code, _, err = await run(
            COORD,
            "saga",
            "start",
            str(FEATURE_DEPLOYMENT),
            "--id",
            f"{saga_id}-c",
            "--input",
            slow,
            env=env,
        )
        assert code == 0, err
        handle = api.saga_handle(client, f"{saga_id}-c")
        while (await api.saga_state(client, f"{saga_id}-c")).current_step != 4:
            await asyncio.sleep(0.1)
        code, out, err = await run(COORD, "saga", "cancel", f"{saga_id}-c", env=env)
        assert code == 0, out + err
        assert out.endswith("its compensations will run\n")
        await asyncio.wait_for(asyncio.gather(handle.result(), return_exceptions=True), 60)
        code, again, refused = await run(COORD, "saga", "cancel", f"{saga_id}-c", env=env)
        assert (code, again) == (ExitCode.CONFLICT, ""), refused
        assert refused == (
            f"error: saga '{saga_id}-c' has already ended (compensated); nothing to cancel, "
            "no compensation runs\n"
        )
        code, out, _ = await run(COORD, "saga", "state", f"{saga_id}-c", env=env)
    state = SagaState.model_validate_json(out)
    assert state.status == SagaStatus.COMPENSATED
    assert state.failure_reason == "saga cancelled"
    assert [c.compensate for c in state.compensations] == ["RemoveFromStaging"]


async def test_temporal_cli_starts_a_saga_with_plain_json_and_queries_it(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    address = dev_env.client.service_client.config.target_host
    temporal = installed_binary("temporal")
    spec = {
        "saga_id": f"plain-{task_queue}",
        "input": {"inject": {"fail": ["RunE2ETests"]}},
        "steps": [
            {
                "name": "DeployToStaging",
                "compensation": "RemoveFromStaging",
                "retry": {"max_retries": 0},
            },
            {"name": "RunE2ETests", "retry": {"max_retries": 0}},
        ],
    }
    workflow_id = f"saga-plain-{task_queue}"
    async with build_worker(client, task_queue):
        code, out, err = await run(
            temporal,
            "workflow",
            "start",
            "--address",
            address,
            "--type",
            "Saga",
            "--task-queue",
            task_queue,
            "--workflow-id",
            workflow_id,
            "--input",
            json.dumps(spec),
        )
        assert code == 0, err
        await asyncio.wait_for(
            asyncio.gather(
                client.get_workflow_handle(workflow_id).result(), return_exceptions=True
            ),
            60,
        )
        code, out, err = await run(
            temporal,
            "workflow",
            "query",
            "--address",
            address,
            "--workflow-id",
            workflow_id,
            "--name",
            "state",
            "--output",
            "json",
        )
    assert code == 0, err
    record = json.loads(out)["queryResult"][0]
    state = SagaState.model_validate({k: v for k, v in record.items() if v is not None})
    assert state.status == SagaStatus.COMPENSATED
    assert [c.compensate for c in state.compensations] == ["RemoveFromStaging"]


async def test_temporal_cli_alone_drives_a_chain_and_reads_its_timeline(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """No client call from Python: start, signal and query are the Temporal CLI's, plain JSON."""
    address = dev_env.client.service_client.config.target_host
    temporal = installed_binary("temporal")
    correlation_id = f"cli-{task_queue}"
    chain_input = {"spec": read_document(USER_STORY), "correlation_id": correlation_id}
    approved = {
        "event": {"type": "UserStoryApproved", "source": "/product-strategist"},
        "routing": {"topic": "project.tasks"},
    }
    common = ["--address", address, "--workflow-id", f"chain-{correlation_id}"]
    async with build_worker(client, task_queue):
        code, _, err = await run(
            temporal,
            "workflow",
            "start",
            *common,
            "--type",
            "ReactiveChain",
            "--task-queue",
            task_queue,
            "--input",
            json.dumps(chain_input),
        )
        assert code == 0, err
        # The malformed event goes first: once approved arrives the instant demo agents can
        # finish the chain before a later signal reaches it.
        for signal in ({"event": {"type": 42}}, approved):
            code, _, err = await run(
                temporal,
                "workflow",
                "signal",
                *common,
                "--name",
                "event",
                "--input",
                json.dumps(signal),
            )
            assert code == 0, err
        code, out, err = await run(temporal, "workflow", "result", *common, "--output", "json")
        assert code == 0, err
        code, out, err = await run(
            temporal, "workflow", "query", *common, "--name", "timeline", "--output", "json"
        )
    assert code == 0, err
    # Go's JSON prints an empty list as null.
    rows = json.loads(out)["queryResult"][0]
    timeline = [
        TimelineEntry.model_validate({**row, "causes": row["causes"] or []}) for row in rows
    ]
    assert timeline[0].event == "UserStoryApproved" and timeline[-1].event == "TestingCompleted"


async def test_coord_chain_publish_events_and_tree(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    env = server_env(dev_env, task_queue)
    correlation_id = f"story-{task_queue}"
    async with build_worker(client, task_queue):
        code, out, err = await run(
            COORD,
            "publish",
            "--type",
            "UserStoryApproved",
            "--source",
            "/product-strategist",
            "--correlation-id",
            correlation_id,
            "--topic",
            "project.tasks",
            "--payload",
            '{"story": "reset password"}',
            "--spec",
            str(USER_STORY),
            "--json",
            env=env,
        )
        assert code == 0, err
        published = json.loads(out)
        assert published["type"] == "UserStoryApproved"
        assert published["reached"] == [f"chain-{correlation_id}"]
        await asyncio.wait_for(api.chain_handle(client, correlation_id).result(), 60)
        code, table, _ = await run(COORD, "events", correlation_id, env=env)
        code, tree, _ = await run(COORD, "events", correlation_id, "--tree", env=env)
        code, rows, _ = await run(COORD, "events", correlation_id, "--json", env=env)
        code, record, _ = await run(COORD, "chain", "state", correlation_id, "--json", env=env)
        code, closed, refused = await run(COORD, "chain", "close", correlation_id, env=env)
        assert (code, closed) == (ExitCode.CONFLICT, "")
        assert refused == (
            f"error: the chain for correlation id {correlation_id!r} has already ended "
            "(completed); nothing to close\n"
        )
        code, _, err = await run(
            COORD,
            "publish",
            "--type",
            "Late",
            "--source",
            "/x",
            "--correlation-id",
            correlation_id,
            env=env,
        )
    assert [c.strip() for c in table.splitlines()[0].split(" | ")][:4] == [
        "Time",
        "Event",
        "Agent",
        "Correlation ID",
    ]
    assert len(table.splitlines()) == 2 + 15
    timeline = [TimelineEntry.model_validate_json(row) for row in rows.splitlines()]
    assert timeline[0].event_id == published["event_id"]
    assert len(timeline) == 15
    assert ChainState.model_validate_json(record).events_seen == 15
    assert len(record.splitlines()) == 1
    assert tree.splitlines()[0].startswith("UserStoryApproved (/product-strategist")
    assert any("└─ TestingCompleted (/test-engineer" in line for line in tree.splitlines())
    assert code == 1 and "has ended (completed)" in err
    assert len(err.splitlines()) == 1, "the error line alone: the parking is in it"


async def test_unknown_agent_in_a_chain_spec_is_rejected_at_the_edge(tmp_path: Path) -> None:
    spec = read_document(USER_STORY)
    spec["subscriptions"][3]["agent"] = "python-guru"
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(spec))
    code, _, err = await run(COORD, "chain", "start", str(path), "--correlation-id", "x")
    assert code == 1
    assert err.startswith(f"error: {path}: subscriptions[3].agent: unknown agent 'python-guru'")


async def test_a_filter_that_does_not_parse_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = read_document(USER_STORY)
    spec["subscriptions"][0]["filter"] = "payload.x =="
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(spec))
    code, _, err = await run(COORD, "chain", "start", str(path), "--correlation-id", "x")
    assert code == ExitCode.REFUSED
    assert err.startswith(
        f"error: {path}: subscriptions[0].filter: Failed to parse expression 'payload.x =='"
    )
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("targets", "refusal"),
    [
        (
            ["--all-chains", "--correlation-id", "c1"],
            "--all-chains publishes to every chain, whatever its correlation: not with --to or "
            "--correlation-id",
        ),
        (
            ["--all-chains", "--to", "chain-c1"],
            "--all-chains publishes to every chain, whatever its correlation: not with --to or "
            "--correlation-id",
        ),
        (
            ["--to", "chain-c1", "--spec", str(USER_STORY)],
            "--spec starts the correlation's chain: not with --to or --all-chains",
        ),
    ],
)
async def test_publish_refuses_targets_that_contradict_each_other(
    targets: list[str], refusal: str
) -> None:
    """Before anything is sent: `--all-chains` with `--to` published to every chain."""
    nowhere = {"TEMPORAL_ADDRESS": "127.0.0.1:1"}
    code, out, err = await run(
        COORD, "publish", "--type", "X", "--source", "/x", *targets, env=nowhere
    )
    assert (code, out, err) == (ExitCode.REFUSED, "", f"error: {refusal}\n")


async def test_version() -> None:
    code, out, _ = await run(COORD, "--version")
    assert (code, out) == (0, "coord 0.1.0\n")


async def test_a_start_on_an_existing_id_and_a_cancel_of_an_ended_run_are_conflicts(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Exit 4 (`conflict`), as a saga's: a chain or aggregator started twice exited 1, and a
    cancel of an ended aggregator exited 0 saying the cancel was requested."""
    env = server_env(dev_env, task_queue)  # no worker polls this queue
    correlation_id = f"twice-{task_queue}"
    chain = (COORD, "chain", "start", str(USER_STORY), "--correlation-id", correlation_id)
    spec = tmp_path / "phase1.yaml"
    fields = {"aggregator_id": f"p1-{task_queue}", "lookback": False}
    spec.write_text(yaml.safe_dump({**read_document(PHASE1), **fields}))
    aggregate = (COORD, "aggregate", "start", str(spec))
    outcomes = []
    for command in (chain, aggregate):
        code, _, err = await run(*command, env=env)
        assert code == 0, err
        outcomes.append(await run(*command, env=env))
    aggregator_id = f"aggregator-p1-{task_queue}"
    await client.get_workflow_handle(aggregator_id).terminate()
    outcomes.append(await run(COORD, "aggregate", "cancel", aggregator_id, env=env))
    await api.chain_handle(client, correlation_id).terminate()
    assert outcomes == [
        (
            ExitCode.CONFLICT,
            "",
            f"error: a chain for correlation id {correlation_id!r} already exists "
            "(running or ended)\n",
        ),
        (ExitCode.CONFLICT, "", f"error: {aggregator_id} already exists (running or ended)\n"),
        (
            ExitCode.CONFLICT,
            "",
            f"error: aggregator 'p1-{task_queue}' has already ended (terminated); "
            "nothing to cancel\n",
        ),
    ]


async def test_the_state_of_a_running_saga_no_worker_serves_is_refused_at_once(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """The query needs a worker, and the server would hold it 30 s: after `QUERY_PATIENCE` the
    saga's task queue is found unpolled, exit 9 (`no_worker`) naming what to start."""
    env = server_env(dev_env, task_queue)  # no worker polls this queue
    saga_id = f"unserved-{task_queue}"
    start = (COORD, "saga", "start", str(FEATURE_DEPLOYMENT), "--id", saga_id)
    code, _, err = await run(*start, env=env)
    assert code == 0, err
    began = time.monotonic()
    code, out, err = await run(COORD, "saga", "state", saga_id, env=env)
    took = time.monotonic() - began
    await api.saga_handle(client, saga_id).terminate()
    assert (code, out) == (ExitCode.NO_WORKER, "")
    assert err == (
        f"error: saga-{saga_id} cannot answer: no worker polls its task queue {task_queue!r} "
        "(start one: `coord worker`)\n"
    )
    assert took < 20, f"{took:.1f} s"


async def test_a_running_chain_whose_worker_stopped_is_refused_at_once_as_no_worker(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """`chain state` and `events` exit 9 (`no_worker`) naming what to start, within
    QUERY_PATIENCE and one bounded re-ask, not a raw error or a wait without end."""
    env = server_env(dev_env, task_queue)
    correlation_id = f"orphaned-{task_queue}"
    [handle] = await orphaned(
        client, task_queue, api.start_chain(client, user_story(), correlation_id, queue=task_queue)
    )
    outcomes = []
    for command in (("chain", "state", correlation_id), ("events", correlation_id)):
        began = time.monotonic()
        code, out, err = await run(COORD, *command, env=env)
        outcomes.append((code, out, err, time.monotonic() - began < 40))
    await handle.terminate()
    refused = (
        f"error: chain-{correlation_id} cannot answer: no worker polls its task queue "
        f"{task_queue!r} (start one: `coord worker`)\n"
    )
    assert outcomes == [(ExitCode.NO_WORKER, "", refused, True)] * 2


async def test_a_running_plan_and_dead_letter_whose_worker_stopped_are_refused_as_no_worker(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """`dlq show` and a plan's progress (`plan_progress`, which `plan state` reads too) asked
    their query without the bound the other reads have: they waited 35-40 s and exited 1 with
    the server's words. Now exit 9 (NoWorker), as `answered` says; the reads go at once."""
    env = server_env(dev_env, task_queue)
    plan_id = f"orphaned-{task_queue}"
    gated = {"id": "api", "agent": "python-pro", "approval": {"required": True}}
    spec = PlanSpec.model_validate({"plan_id": plan_id, "name": "Gated", "tasks": [gated]})

    async def parked() -> WorkflowHandle[Any, Any]:
        entry_id = await park_dead_letter(client, letter("chain-nowhere"), task_queue)
        return client.get_workflow_handle(entry_id)

    plan, entry = await orphaned(
        client, task_queue, api.start_plan(client, spec, queue=task_queue), parked()
    )

    async def progress() -> str:
        try:
            await api.plan_progress(client, plan_id)
        except api.NoWorker as refusal:
            return f"error: {refusal}\n"
        return "answered"

    began = time.monotonic()
    shown, stated, asked = await asyncio.gather(
        run(COORD, "dlq", "show", entry.id, env=env),
        run(COORD, "plan", "state", plan_id, env=env),
        progress(),
    )
    took = time.monotonic() - began
    await asyncio.gather(plan.terminate(), entry.terminate())

    def refused(workflow_id: str) -> str:
        return (
            f"error: {workflow_id} cannot answer: no worker polls its task queue {task_queue!r} "
            "(start one: `coord worker`)\n"
        )

    assert (shown, stated, asked) == (
        (ExitCode.NO_WORKER, "", refused(entry.id)),
        (ExitCode.NO_WORKER, "", refused(plan.id)),
        refused(plan.id),
    )
    # Each read gives up within its patience (QUERY_PATIENCE and one REASK_PATIENCE: 25 s),
    # plus its command's start-up: the bound the chain's reads are held to.
    assert took < 40, f"{took:.1f} s"


async def test_a_terminated_saga_whose_worker_stopped_is_refused_as_no_worker(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminated saga keeps no record: `saga_outcome` (`saga start --wait`'s) asks its
    `state` query, and `events` its record, without the bound the other reads have: each
    waited 29 s and failed with the server's words. Now NoWorker, as `answered` says
    (`queries_refused_soon`: within 2 s of patience, not 25)."""
    queries_refused_soon(monkeypatch)
    saga_id = f"terminated-{task_queue}"
    unserved = {"name": "Hold", "agent": f"nobody-{task_queue}"}  # it waits on its queue
    spec = SagaSpec.model_validate({"saga_id": saga_id, "name": "Held", "steps": [unserved]})
    [handle] = await orphaned(client, task_queue, api.start_saga(client, spec, queue=task_queue))
    await handle.terminate("by the test")

    async def refusal(read: Awaitable[Any]) -> str:
        try:
            await read
        except api.NoWorker as refused:
            return str(refused)
        return "answered"

    began = time.monotonic()
    outcome, events = await asyncio.wait_for(
        asyncio.gather(
            refusal(api.saga_outcome(handle, client)),
            refusal(api.correlation_events(client, spec.correlation_id)),
        ),
        60,
    )
    took = time.monotonic() - began
    refused = (
        f"saga-{saga_id} cannot answer: no worker polls its task queue {task_queue!r} "
        "(start one: `coord worker`)"
    )
    assert (outcome, events) == (refused, refused)
    # Each read gives up within its patience (1 s and one 1 s re-ask) and a few round trips.
    assert took < 15, f"{took:.1f} s"


async def test_saga_start_with_the_id_of_a_running_saga_is_refused(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    env = server_env(dev_env, task_queue)  # no worker polls this queue: the saga stays running
    saga_id = f"twice-{task_queue}"
    start = (COORD, "saga", "start", str(FEATURE_DEPLOYMENT), "--id", saga_id)
    code, _, err = await run(*start, env=env)
    assert code == 0, err
    code, out, err = await run(*start, env=env)
    await api.saga_handle(client, saga_id).terminate()
    assert (code, out) == (ExitCode.CONFLICT, "")
    assert err == (
        f"error: saga {saga_id!r} is already running: read it with "
        f"`coord saga state {saga_id}`, or give another --id\n"
    )


async def test_saga_wait_warns_when_no_worker_polls_and_gives_up(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    env = server_env(dev_env, task_queue)
    saga_id = f"alone-{task_queue}"
    code, _, err = await run(
        *(COORD, "saga", "start", str(FEATURE_DEPLOYMENT), "--id", saga_id),
        *("--wait", "--no-worker-timeout", "1"),
        env=env,
    )
    await api.saga_handle(client, saga_id).terminate()
    assert code == ExitCode.NO_WORKER
    assert err.splitlines() == [
        f"warning: no worker polls task queue {task_queue!r}; the saga waits for one "
        "(start it with `coord worker`)",
        f"error: no worker polled task queue {task_queue!r} for 1s; saga-{saga_id} stays "
        "started and runs once a worker polls (`coord worker`)",
    ]


@pytest.mark.parametrize("command", ["server", "demo", "dev"])
async def test_a_busy_ui_port_is_refused_in_one_line_naming_the_options(command: str) -> None:
    """`coord demo` and `dev` start their embedded server on --port and --ui-port too."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        ui_port = busy.getsockname()[1]
        env = {"TEMPORAL_ADDRESS": ""}  # none configured: the server is local, at --port
        ports = ("--port", str(free_port()), "--ui-port", str(ui_port))
        code, _, err = await run(COORD, command, *ports, env=env)
    assert code == ExitCode.SERVER_NOT_STARTED
    assert err == (
        f"error: port {ui_port} is already in use; is a Temporal server already running? "
        "(--port and --ui-port choose others)\n"
    )


@pytest.mark.parametrize("command", ["demo", "dev"])
async def test_a_port_held_by_something_else_is_refused_within_seconds(command: str) -> None:
    """`coord demo` and `dev` join a Temporal server listening at --port; a program there that
    takes the connection and never answers held them 30 s, then said no server was running; it
    now has seconds to answer (`ANSWER_TIMEOUT`)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        code, _, err = await run(COORD, command, "--port", str(port), env={"TEMPORAL_ADDRESS": ""})
    assert code == ExitCode.SERVER_NOT_STARTED
    assert err == (
        f"error: port {port} is in use, but not by a Temporal server that answers "
        "(--port chooses another)\n"
    )


async def test_bad_option_value_is_one_line_naming_the_field(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    code, _, err = await run(
        COORD, "dlq", "list", "--status", "bogus", env=server_env(dev_env, task_queue)
    )
    assert code == ExitCode.REFUSED
    assert len(err.splitlines()) == 1 and "status" in err and "Traceback" not in err


async def test_sigterm_stops_coord_dev_and_coord_demo(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """They used to wait forever for a worker whose tasks asyncio had cancelled under it."""
    env = {**os.environ, **server_env(dev_env, task_queue), "PYTHONUNBUFFERED": "1"}
    for command, started in (("dev", "worker running against"), ("demo", "▶ saga-")):
        process = await asyncio.create_subprocess_exec(
            COORD, command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        assert process.stdout is not None
        while started not in (await asyncio.wait_for(process.stdout.readline(), 60)).decode():
            pass
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == ExitCode.TERMINATED, err
        assert b"Traceback" not in err


async def coord_server(
    tmp_path: Path, port: int, ui_port: int, env: dict[str, str], command: str = "server"
) -> asyncio.subprocess.Process:
    """`coord server` (or `dev`: its embedded server and a worker) on `port` and `ui_port` in a
    process of its own (its state in `tmp_path`), not the configured server's, its output
    unbuffered, `env` added."""
    return await asyncio.create_subprocess_exec(
        *(COORD, command, "--port", str(port), "--ui-port", str(ui_port)),
        env={
            **os.environ,
            "TEMPORAL_ADDRESS": "",
            "XDG_DATA_HOME": str(tmp_path),
            "PYTHONUNBUFFERED": "1",
            **env,
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )


@pytest.mark.parametrize("command", ["server", "dev"])
async def test_a_server_with_its_own_ui_port_tells_how_to_link_to_it(
    tmp_path: Path, command: str
) -> None:
    """Other commands' `started ...` links cannot know --ui-port: the server says what to set,
    and so does `coord dev` starting its embedded one (it said nothing). The Temporal binary's
    own banner shares the output, in any order around these lines."""
    port, ui_port = free_port(), free_port()
    started = {
        "server": f"Temporal dev server on localhost:{port}, UI on http://localhost:{ui_port}\n",
        "dev": f"worker running against embedded dev server at localhost:{port} (SQLite "
        f"{tmp_path / 'event-coordinator' / 'coord.db'}); Ctrl-C to stop\n",
    }[command]
    hint = (
        f"the UI links other coord commands print point at port {port + 1000}: "
        f"set COORD_UI_URL=http://localhost:{ui_port} where they run\n"
    )
    process = await coord_server(tmp_path, port, ui_port, {}, command)
    assert process.stdout is not None
    lines: list[str] = []
    try:
        while hint not in lines:
            line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
            assert line, f"ended without the hint: {lines}"
            lines.append(line)
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.communicate(), 30)
    assert [line for line in lines if line in (started, hint)] == [started, hint]


async def test_a_killed_server_takes_its_temporal_with_it_and_a_set_ui_url_needs_no_hint(
    tmp_path: Path,
) -> None:
    """`kill -9` of `coord server` leaves no Temporal holding its ports (a restart would fail,
    port in use); with COORD_UI_URL already pointing at its --ui-port it prints no hint."""
    port, ui_port = free_port(), free_port()
    process = await coord_server(
        tmp_path, port, ui_port, {"COORD_UI_URL": f"http://localhost:{ui_port}"}
    )
    assert process.stdout is not None
    started = f"Temporal dev server on localhost:{port}, UI on http://localhost:{ui_port}\n"
    try:  # the Temporal binary's banner may come first
        while (line := await asyncio.wait_for(process.stdout.readline(), 60)).decode() != started:
            assert line, "ended before it said it started"
        assert await listening(port)
    finally:
        process.kill()
        rest, _ = await asyncio.wait_for(process.communicate(), 30)
    assert b"COORD_UI_URL" not in rest

    async def gone() -> bool:
        return not await listening(port) and not await listening(ui_port)

    await eventually(gone, 15)


async def test_a_shutdown_grace_that_is_no_number_of_seconds_is_refused_before_connecting() -> None:
    env = {"TEMPORAL_ADDRESS": "127.0.0.1:9", "COORD_SHUTDOWN_GRACE": "soon"}
    code, _, err = await run(COORD, "worker", env=env)
    assert (code, err) == (
        1,
        "error: COORD_SHUTDOWN_GRACE: 'soon' is not a number of seconds (0 to 86400)\n",
    )


async def test_examples_names_the_shipped_specs_and_copies_them(tmp_path: Path) -> None:
    """A user who installed the wheel has no checkout: `coord examples --copy examples` puts the
    specs where the README's commands look."""
    code, out, _ = await run(COORD, "examples")
    folder, *listed = out.splitlines()
    shipped = sorted(
        p.relative_to(ROOT / "examples").as_posix()
        for p in (ROOT / "examples").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert code == 0 and Path(folder).resolve() == (ROOT / "examples").resolve()
    assert sorted(line.strip() for line in listed) == shipped
    assert "  feature-deployment.yaml" in listed
    code, out, _ = await run(COORD, "examples", "--copy", "examples", cwd=tmp_path)
    assert (code, out) == (
        0,
        f"{len(shipped)} files copied to examples, and the 6 schemas they name to "
        "examples/schemas\n",
    )
    copied = tmp_path / "examples" / "feature-deployment.yaml"
    original = (ROOT / "examples" / "feature-deployment.yaml").read_text()
    assert copied.read_text() == original.replace("../schemas/", "schemas/", 1)
    # each schema line names a schema in the copy (it named the checkout's schemas/, outside)
    for file in shipped:
        first = (tmp_path / "examples" / file).read_text().split("\n", 1)[0]
        if first.startswith(SCHEMA_LINE):
            schema = (tmp_path / "examples" / file).parent / first.removeprefix(SCHEMA_LINE)
            assert schema.read_text() == (ROOT / "schemas" / schema.name).read_text(), file
    code, _, err = await run(COORD, "validate", "examples/feature-deployment.yaml", cwd=tmp_path)
    assert code == 0, err
    code, _, err = await run(COORD, "examples", "--copy", "examples", cwd=tmp_path)
    assert (code, err) == (
        1,
        "error: --copy: examples/agent-definitions.yaml already exists; nothing was copied\n",
    )


async def test_a_plain_dev_server_asks_for_coord_setup(tmp_path: Path) -> None:
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        installed_binary("temporal"),
        *("server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)),
        *("--log-level", "error"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    env = {"TEMPORAL_ADDRESS": f"127.0.0.1:{port}", "COORD_TASK_QUEUE": f"setup-{port}"}
    start = (COORD, "saga", "start", str(FEATURE_DEPLOYMENT), "--id", "needs-setup")
    try:
        await eventually(lambda: answers(f"127.0.0.1:{port}"), 60)
        code, _, refused = await run(*start, env=env)
        code_worker, _, worker_refused = await run(COORD, "worker", env=env)
        code_setup, registered, _ = await run(COORD, "setup", env=env)
        code_again, again, _ = await run(COORD, "setup", env=env)
        await eventually(lambda: starts(start, env), 60)
    finally:
        server.terminate()
        await server.wait()
    assert code == ExitCode.SETUP_NEEDED
    assert re.fullmatch(
        r"error: the server does not know the search attribute \w+; register the project's "
        r"search attributes once with `coord setup`\n",
        refused,
    )
    # A worker would see its workflows' tasks fail on the search attributes they upsert.
    assert code_worker == ExitCode.SETUP_NEEDED
    missing = ", ".join(key.name for key in SEARCH_ATTRIBUTES)
    assert worker_refused == (
        f"error: the server does not know the search attributes {missing}; register the "
        "project's search attributes once with `coord setup`\n"
    )
    assert code_setup == 0 and registered.startswith(f"search attributes on 127.0.0.1:{port}")
    assert "CoordPattern" in registered
    assert code_again == 0 and again.endswith("(default): none missing\n")


async def answers(address: str) -> bool:
    try:
        await Client.connect(address)
    except RuntimeError:
        return False
    return True


async def starts(argv: tuple[str, ...], env: dict[str, str]) -> bool:
    """The server's search-attribute cache catches up within a few seconds of `coord setup`."""
    code, _, _ = await run(*argv, env=env)
    return code == 0


@pytest.mark.slow
async def test_coord_dlq_list_show_replay_and_archive(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    env = server_env(dev_env, task_queue)
    now = datetime.now(UTC)
    entry_ids: list[str] = []
    async with build_worker(client, task_queue):
        aggregator = await api.start_aggregator(
            client,
            AggregatorSpec.model_validate(
                {**read_document(PHASE1), "aggregator_id": f"p1-{task_queue}", "lookback": False}
            ),
            queue=task_queue,
        )
        lost = EventEnvelope.new("APIDesignCompleted", "/backend-architect", payload={"v": 1})
        for letter in (
            DeadLetter(
                event=lost,
                target_workflow=aggregator.id,
                failure_type="timeout",
                message="Handler timeout",
                attempts=3,
                first_failed_at=now,
                last_failed_at=now,
            ),
            DeadLetter(
                raw={"bad": True},
                failure_type="invalid_envelope",
                message="Invalid payload",
                first_failed_at=now,
                last_failed_at=now,
            ),
        ):
            entry_ids.append(await park_dead_letter(client, letter, task_queue))
        lost_id, invalid_id = entry_ids
        await eventually(lambda: has_entries(client, task_queue, 2))
        code, table, err = await run(COORD, "dlq", "list", env=env)
        assert code == 0, err
        code, first, err = await run(COORD, "dlq", "list", "--page-size", "1", env=env)
        cursor = first.splitlines()[-1].removeprefix("next page: coord dlq list --cursor ")
        code, second, err = await run(COORD, "dlq", "list", "--json", "--cursor", cursor, env=env)
        assert code == 0, err
        code, _, bogus = await run(COORD, "dlq", "list", "--status", "bogus", env=env)
        assert code == 1 and bogus.startswith("error: dead-letter filter: status: ")
        code, shown, _ = await run(COORD, "dlq", "show", lost_id, env=env)
        code, replayed, err = await run(
            COORD, "dlq", "replay", lost_id, "--payload", '{"v": 2}', env=env
        )
        assert code == 0, err
        code, archived, err = await run(
            COORD,
            "dlq",
            "archive",
            "--all",
            "--failure-type",
            "invalid_envelope",
            "--note",
            "hand-written JSON",
            env=env,
        )
        assert code == 0, err
        code, _, refused = await run(COORD, "dlq", "replay", "--all", env=env)
        assert code == 1 and "no parked entry matches" in refused
        code, again, _ = await run(COORD, "dlq", "archive", lost_id, "--note", "n", env=env)
        assert code == 1 and f"refused: {lost_id} is replayed, not parked" in again
        code, counts, err = await run(COORD, "dlq", "counts", env=env)
        assert code == 0, err
        state = await api.aggregator_state(client, aggregator.id)
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert [row[0].strip() for row in rows] == [invalid_id, lost_id], "newest first"
    assert [row[-1].strip() for row in rows] == ["Investigate", "Investigate"]
    assert "timeout: Handler timeout" in table
    assert [e["entry_id"] for e in json.loads(second)["entries"]] == [lost_id]
    assert json.loads(shown)["attempts"] == 3
    assert replayed.startswith(f"{lost_id}: replayed, delivered as evt-")
    assert archived.strip() == f"{invalid_id}: archived (hand-written JSON)"
    count_rows = {line.split(" | ")[0].strip(): line for line in counts.splitlines()[2:]}
    assert set(count_rows) == {"invalid_envelope", "timeout", "Total"}
    assert state.matched == 1


async def test_a_replay_that_ran_and_was_not_delivered_exits_1(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """The entry is parked again, and the line says why; it exited 0, as if delivered."""
    env = server_env(dev_env, task_queue)
    async with build_worker(client, task_queue):
        bystander = await park_dead_letter(client, letter("chain-nowhere"), task_queue)
        misdirected = await park_dead_letter(client, letter(bystander), task_queue)
        await eventually(lambda: has_entries(client, task_queue, 2))
        code, out, err = await run(COORD, "dlq", "replay", misdirected, env=env)
    assert code == 1, err
    assert out.strip() == (
        f"{misdirected}: parked, not delivered: target_unavailable: {bystander} is a "
        "DeadLetterEntry, which takes no `event` signal: archive the entry"
    )


async def has_entries(client: Client, task_queue: str, count: int) -> bool:
    return len(await api.dlq_entries(client, queue=task_queue)) >= count


async def test_a_reader_that_stops_reading_ends_the_command_quietly(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """`coord ... | head -1`: it used to end with exit code 70, calling a BrokenPipeError a bug."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    process = await asyncio.create_subprocess_exec(
        *(COORD, "dlq", "counts"),
        env={**os.environ, **server_env(dev_env, task_queue)},
        stdout=write_end,
        stderr=asyncio.subprocess.PIPE,
    )
    os.close(write_end)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert (process.returncode, err) == (ExitCode.READER_GONE, b"")


NO_CHAIN = (
    "no chain for correlation id 'nope'; start one with "
    "`coord chain start SPEC --correlation-id ...` or publish with --spec"
)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["chain", "state", "nope"], "no chain for correlation id 'nope'"),
        (["events", "nope"], "no chain for correlation id 'nope'"),
        (["events", "nope", "--tree"], "no chain for correlation id 'nope'"),
        (["events", "nope", "--all"], "no chain for correlation id 'nope'"),
        (["diff", "nope", "nope-2"], "no chain for correlation id 'nope'"),
        (
            ["rewind", "nope", "--to", "A", "--as", "nope-2"],
            f"no chain for correlation id 'nope'; {NO_CHAIN_HINT}",
        ),
        (["publish", "--type", "A", "--source", "/x", "--correlation-id", "nope"], NO_CHAIN),
        (
            ["publish", "--type", "A", "--source", "/x", "--correlation-id", "nope", "--ack"],
            NO_CHAIN,
        ),
        (
            ["publish", "--type", "A", "--source", "/x", "--to", "chain-nope"],
            "no workflow 'chain-nope'",
        ),
        (["aggregate", "state", "nope"], "aggregator 'nope' does not exist"),
        (["aggregate", "cancel", "aggregator-nope"], "aggregator 'nope' does not exist"),
        (["plan", "rewind", "nope", "--as", "nope-2"], "plan 'nope' does not exist"),
        (
            ["saga", "rewind", "nope", "--to-step", "2", "--as", "nope-2"],
            "saga 'nope' does not exist",
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
async def test_a_read_of_what_does_not_exist_names_it_in_the_users_words(
    dev_env: WorkflowEnvironment, task_queue: str, argv: list[str], line: str
) -> None:
    """Not the API function that asked (`chain_state: workflow not found for ID: chain-nope`).
    A publish to what does not exist is a not found alike (it exited 1, as a refusal)."""
    code, out, err = await run(COORD, *argv, env=server_env(dev_env, task_queue))
    assert (code, out, err) == (ExitCode.NOT_FOUND, "", f"error: {line}\n")


async def test_the_state_of_a_run_that_refused_its_spec_is_its_failure_for_every_pattern(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """Started as plain JSON with the Temporal CLI, so nothing checked the spec before: each
    run fails `invalid_spec`, and its state says so alike (never a made-up record: an aggregator
    read `"aggregator_id": "invalid"`, waiting for nothing, and exited 0)."""
    aggregator = read_document(PHASE1)  # lookback without a correlation_id
    runs = {
        "aggregate": ("Aggregator", "aggregator", {**aggregator, "aggregator_id": "x"}),
        "plan": ("TaskGraph", "plan", {"plan_id": "x", "tasks": []}),
        "vote": ("Vote", "vote", {"vote_id": "x"}),
        "saga": ("Saga", "saga", {"saga_id": "x", "steps": []}),
    }
    address = dev_env.client.service_client.config.target_host
    temporal = installed_binary("temporal")
    env = server_env(dev_env, task_queue)
    async with build_worker(client, task_queue):
        for workflow_type, prefix, spec in runs.values():
            spec[f"{prefix}_id"] = task_queue
            workflow_id = f"{prefix}-{task_queue}"
            code, _, err = await run(
                temporal, "workflow", "start", "--address", address, "--type", workflow_type,
                "--task-queue", task_queue, "--workflow-id", workflow_id,
                "--input", json.dumps(spec),
            )  # fmt: skip
            assert code == 0, err
            ended = client.get_workflow_handle(workflow_id).result()
            await asyncio.wait_for(asyncio.gather(ended, return_exceptions=True), 60)
    lines = {}
    for command, (_, prefix, _) in runs.items():
        for json_flag in ([], ["--json"]):
            code, out, err = await run(COORD, command, "state", task_queue, *json_flag, env=env)
            assert (code, out) == (ExitCode.REFUSED, ""), err
            lines[prefix] = err
    name = repr(task_queue)
    assert lines["aggregator"] == (
        f"error: aggregator {name} failed: invalid_spec: aggregator spec: lookback: needs "
        "correlation_id (it reads that correlation's chain)\n"
    )
    assert lines["plan"].startswith(f"error: plan {name} failed: invalid_spec: plan spec: tasks: ")
    assert lines["vote"].startswith(f"error: vote {name} failed: invalid_spec: vote spec: voters: ")
    assert lines["saga"].startswith(f"error: saga {name} failed: invalid_spec: saga spec: steps: ")


async def test_dlq_refusals_name_their_entry_and_an_unknown_entry_is_not_found(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """Two entries without an event printed two alike lines `refused: invalid_dead_letter: ...`;
    an unknown id exited 1 (`refused: no dead letter ...`), though an entry is a workflow."""
    env = server_env(dev_env, task_queue)
    now = datetime.now(UTC)
    async with build_worker(client, task_queue):
        entry_ids = [
            await park_dead_letter(
                client,
                DeadLetter(
                    raw={"bad": n},
                    failure_type="invalid_envelope",
                    message="Invalid payload",
                    first_failed_at=now,
                    last_failed_at=now,
                ),
                task_queue,
            )
            for n in range(2)
        ]
        await eventually(lambda: has_entries(client, task_queue, 2))
        code, out, err = await run(COORD, "dlq", "replay", *entry_ids, env=env)
        assert code == ExitCode.REFUSED, err
        assert sorted(line.split(": ")[1] for line in out.splitlines()) == sorted(entry_ids)
        assert all(
            line.startswith(f"refused: {entry_id}: invalid_dead_letter: it holds no event")
            for line, entry_id in zip(sorted(out.splitlines()), sorted(entry_ids), strict=True)
        )
        code, out, _ = await run(COORD, "dlq", "replay", entry_ids[0], "dlq-nope", env=env)
        assert code == ExitCode.NOT_FOUND
        assert "refused: no dead letter 'dlq-nope'" in out.splitlines()
        assert len(out.splitlines()) == 2
        for argv in (["show"], ["replay"], ["archive", "--note", "n"]):
            code, out, err = await run(COORD, "dlq", *argv, "dlq-nope", env=env)
            assert code == ExitCode.NOT_FOUND
            assert "no dead letter 'dlq-nope'" in out + err


async def test_start_wait_json_prints_the_record_alone_on_stdout(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The `started ...` line went to stdout before the JSON, so `| jq` failed on it."""
    env = server_env(dev_env, task_queue)
    spec = tmp_path / "one-step.yaml"
    spec.write_text(f"saga_id: json-{task_queue}\nsteps:\n  - name: BuildArtifact\n")
    async with build_worker(client, task_queue):
        code, out, err = await run(COORD, "saga", "start", str(spec), "--wait", "--json", env=env)
        assert code == ExitCode.OK, err
        assert SagaState.model_validate_json(out).status == SagaStatus.COMPLETED
        assert f"started saga-json-{task_queue}: http" in err
        code, out, err = await run(
            COORD, "saga", "start", str(spec), "--id", "j2", "--json", env=env
        )
    assert (code, out) == (ExitCode.OK, ""), err
    assert "started saga-j2: http" in err


async def test_a_missing_agents_file_is_named_once(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """It said `error: nothere.yaml: nothere.yaml: cannot read: ...`."""
    missing = tmp_path / "nothere.yaml"
    line = f"error: {missing}: cannot read: No such file or directory\n"
    env = server_env(dev_env, task_queue)
    plan = str(ROOT / "examples" / "release-plan.yaml")
    for argv, extra in (
        (["worker", "--agents", str(missing)], {}),
        (["plan", "start", plan], {"COORD_AGENTS": str(missing)}),
    ):
        code, out, err = await run(COORD, *argv, env={**env, **extra})
        assert (code, out, err) == (ExitCode.REFUSED, "", line), argv
    code, out, err = await run(COORD, "validate", "--agents", str(missing), plan, env=env)
    assert (code, out) == (ExitCode.REFUSED, line.removeprefix("error: ")), "as a file's problem"
    assert err == "0 of 1 files valid: none was checked, their agents file is not valid\n"


async def test_an_unknown_fallback_is_refused_before_the_saga_starts(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """As an unknown agent is: it failed only once the step's agent could not take it."""
    spec = tmp_path / "fallback.yaml"
    spec.write_text("saga_id: fb\nsteps:\n  - {name: BuildArtifact, fallback: nobody}\n")
    code, out, err = await run(
        COORD, "saga", "start", str(spec), env=server_env(dev_env, task_queue)
    )
    assert (code, out) == (ExitCode.REFUSED, "")
    assert err.startswith(f"error: {spec}: steps[0].fallback: unknown agent 'nobody'; known ")


DEEP = '{"a": ' * 40 + "1" + "}" * 40
"""A payload nested past the 32 levels an event's may take."""


async def test_a_problem_names_the_option_or_field_the_user_gave_it_in(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """`--id` was blamed on the file (`FILE: saga_id: ...`), `--priority` on `event:
    routing.priority`, an empty file said `Input should be a valid dictionary or instance of
    SagaSpec`, repeated step names named no field, and `dlq replay --payload` blamed `replay:
    payload`."""
    env = server_env(dev_env, task_queue)
    empty, listed, repeated = (tmp_path / name for name in ("empty.yaml", "list.yaml", "many.yaml"))
    empty.write_text("")
    listed.write_text("- BuildArtifact\n")
    repeated.write_text(
        "saga_id: m\nsteps:\n  - {name: BuildArtifact}\n  - {name: BuildArtifact}\n"
    )
    pattern = "String should match pattern '^[A-Za-z0-9][A-Za-z0-9._:-]*$'"
    plan = str(ROOT / "examples" / "release-plan.yaml")
    publish = ["publish", "--type", "Note", "--source", "/me", "--correlation-id", "c"]
    cases = [
        (["saga", "start", str(FEATURE_DEPLOYMENT), "--id", "has space/and?"], f"--id: {pattern}"),
        (["plan", "start", plan, "--id", "a b"], f"--id: {pattern}"),
        (
            ["plan", "start", plan, "--correlation-id", "a b"],
            "--correlation-id: String should match pattern '^([A-Za-z0-9][A-Za-z0-9._:-]*)?$'",
        ),
        (
            [*publish, "--priority", "urgent"],
            "--priority: Input should be 'low', 'normal', 'high' or 'critical'",
        ),
        (["dlq", "archive", "dlq-x"], "--note: String should have at least 1 character"),
        (["dlq", "replay", "dlq-x", "--payload", DEEP], "--payload: nested deeper than 32 levels"),
        (
            ["saga", "start", str(empty)],
            f"{empty}: empty: expected a mapping of fields",
        ),
        (
            ["plan", "start", str(listed)],
            f"{listed}: expected a mapping of fields, not a list",
        ),
        (
            ["saga", "start", str(repeated)],
            f"{repeated}: steps: step names must be unique, repeated: BuildArtifact",
        ),
    ]
    for argv, line in cases:
        code, out, err = await run(COORD, *argv, env=env)
        assert (code, out, err) == (ExitCode.REFUSED, "", f"error: {line}\n"), argv
