"""Rewind and compare on the real dev server: `coord diff` beside two runs of one story."""

import asyncio
import json

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.rewind.diff import RowStatus
from coord.models.wire.specs import read_document
from coord.starter import api
from coord.starter.exits import ExitCode
from coord.worker import build_worker
from tests.helpers import eventually
from tests.test_cli import USER_STORY
from tests.workers import COORD, run, server_env

BROKEN_PYTHON_PRO = {"fail": ["python-pro"], "error_type": "invalid_payload"}


async def story(client: Client, queue: str, correlation_id: str, **payload: object) -> None:
    spec = ChainSpec.model_validate(read_document(USER_STORY))
    await api.start_chain(client, spec, correlation_id, queue=queue)
    approved = EventEnvelope.new(
        "UserStoryApproved",
        "/product-strategist",
        payload={"story": "reset password", **payload},
        correlation_id=correlation_id,
        topic="project.tasks",
    )
    await api.publish(client, approved)


async def test_coord_diff_aligns_two_runs_of_a_story_by_causation(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    env = server_env(dev_env, task_queue)
    broken, fixed = f"broken-{task_queue}", f"fixed-{task_queue}"
    async with build_worker(client, task_queue):
        await story(client, task_queue, broken, inject=BROKEN_PYTHON_PRO)
        await story(client, task_queue, fixed)
        await asyncio.wait_for(api.chain_handle(client, fixed).result(), 60)

        async def backend_failed() -> bool:
            rows = await api.correlation_events(client, broken)
            return any(row.event == "BackendImplementationFailed" for row in rows)

        await eventually(backend_failed)
        code, out, err = await run(COORD, "diff", broken, fixed, "--json", env=env)
        assert code == ExitCode.DIFFERS, err
        compared = json.loads(out)
        code, table, _ = await run(COORD, "diff", fixed, fixed, env=env)
    counts = table.splitlines()[-1]
    assert code == ExitCode.OK
    assert counts.endswith(f"same, 0 changed, 0 only in {fixed}, 0 only in {fixed}")
    rows = {(row["event"], row["status"]) for row in compared["rows"]}
    assert ("UserStoryApproved", RowStatus.CHANGED) in rows  # its payload carries the injection
    assert ("APIDesignStarted", RowStatus.SAME) in rows
    changed = {row["event"]: row["changed"] for row in compared["rows"] if row["changed"]}
    assert "payload.inject" in changed["APIDesignCompleted"]  # the demo agents carry it on
    assert ("BackendImplementationFailed", RowStatus.ONLY_LEFT) in rows
    assert ("BackendImplementationCompleted", RowStatus.ONLY_RIGHT) in rows
    assert ("TestingCompleted", RowStatus.ONLY_RIGHT) in rows
