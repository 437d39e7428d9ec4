"""Retention: `coord gc` and the worker's sweep remove exactly what has outlived its retention and
that nothing refers to, on the real dev server, in a directory store and in an S3 bucket."""

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aioboto3
import pytest
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from coord.infra.dead_letters import park_dead_letter
from coord.infra.payload_store import (
    DEFAULT_THRESHOLD,
    DirectoryDriver,
    PayloadStoreSettings,
    StoredPayloads,
    data_converter,
)
from coord.models.chain.spec import ChainStatus
from coord.models.events.envelope import EventEnvelope
from coord.models.ops.retention import OwnerMark
from coord.models.plan.spec import PlanSpec
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import approved, eventually, letter, user_story
from tests.test_large_payloads import s3_server  # noqa: F401  (the moto server fixture)
from tests.workers import COORD, WorkerProcess, run


def big_event(correlation_id: str, marker: str) -> EventEnvelope:
    """An event over the store's threshold, so it is stored by reference (its content unique)."""
    blob = marker + "z" * DEFAULT_THRESHOLD
    return EventEnvelope.new(
        "DesignNote", "/tester", payload={"blob": blob}, correlation_id=correlation_id
    )


async def store_client(env: WorkflowEnvironment, store: str) -> Client:
    """A client of the session's server whose payload store is `store`."""
    config = env.client.service_client.config
    return await Client.connect(
        config.target_host,
        namespace=env.client.namespace,
        data_converter=data_converter(PayloadStoreSettings(store, DEFAULT_THRESHOLD)),
    )


async def chain_with_big_event(client: Client, queue: str, *, close: bool) -> str:
    correlation_id = f"gc-{uuid.uuid4().hex[:8]}"
    await api.start_chain(client, user_story(), correlation_id, queue=queue)
    await api.publish(client, big_event(correlation_id, correlation_id))
    if close:
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(api.chain_handle(client, correlation_id).result(), 60)
    return correlation_id


async def delete_workflow(client: Client, workflow_id: str) -> None:
    """What the server does once a closed workflow's namespace retention has passed."""
    request = DeleteWorkflowExecutionRequest(
        namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=workflow_id)
    )
    await client.workflow_service.delete_workflow_execution(request)

    async def gone() -> bool:
        try:
            await client.get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            return error.status == RPCStatusCode.NOT_FOUND
        return False

    await eventually(gone, timeout=60)


def objects(store: Path) -> set[str]:
    """The objects of a directory store, as `<shard>/<digest>`."""
    return {
        f"{path.parent.name}/{path.name}"
        for path in store.glob("??/*")
        if len(path.name) == 64 and path.is_file()
    }


def owned_by(store: Path, workflow_id: str) -> set[str]:
    """The objects whose owner marks name `workflow_id`."""
    return {
        f"{mark.parent.parent.name}/{mark.parent.name.removesuffix('.owners')}"
        for mark in store.glob("??/*.owners/*.json")
        if json.loads(mark.read_text())["workflow_id"] == workflow_id
    }


def payload(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


def write_scratchpad(root: Path, name: str, *extra: str) -> Path:
    directory = root / name
    (directory / "worker-results").mkdir(parents=True)
    (directory / "task-plan.md").write_text("# plan\n")
    (directory / "worker-results" / "a.json").write_text("{}")
    for file in extra:
        (directory / file).write_text("mine\n")
    return directory


async def coord_gc(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = await run(COORD, "gc", "--json", *args, env=env)
    assert code in (0, 12), err
    return code, json.loads(out)


def by_action(report: dict[str, Any], *actions: str) -> set[tuple[str, str]]:
    return {(i["kind"], i["name"]) for i in report["items"] if i["action"] in actions}


async def test_gc_removes_exactly_what_has_expired_and_nothing_refers_to(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    store, pads = tmp_path / "store", tmp_path / "scratchpads"
    client = await store_client(dev_env, str(store))
    async with build_worker(client, task_queue):
        # Dead letters age by the server's clock: these are DEAD_LETTERS_RETENTION old at gc,
        # counted from the archive (the last of them to change).
        old_parked = await park_dead_letter(client, letter("chain-x"), task_queue)
        archived = await park_dead_letter(client, letter("chain-y"), task_queue)
        await api.dlq_archive(client, archived, "done with it")
        clock = asyncio.get_running_loop().time()
        # Stored payloads and scratchpads age by their files' times, set back below.
        running = await chain_with_big_event(client, task_queue, close=False)
        closed = await chain_with_big_event(client, task_queue, close=True)
        deleted = await chain_with_big_event(client, task_queue, close=True)
        legacy = DirectoryDriver(store.resolve()).write(payload("before owners"), None)
        never = OwnerMark(workflow_id=f"never-{uuid.uuid4().hex}", namespace=client.namespace)
        orphan = await stored(store).put(payload("orphan"), never)
        live = PlanSpec(plan_id=f"live-{uuid.uuid4().hex[:6]}", tasks=[{"id": "a", "agent": "x"}])
        await api.start_plan(client, live, queue=f"{task_queue}-idle")  # no worker: it runs on
        write_scratchpad(pads, f"team/{live.plan_id}")
        write_scratchpad(pads, "team/ended", "notes.txt")
        deleted_objects = owned_by(store, f"chain-{deleted}")
        await delete_workflow(client, f"chain-{deleted}")
        set_back(store, pads)
        await asyncio.sleep(DEAD_LETTERS_SECONDS - (asyncio.get_running_loop().time() - clock))
        # Young: made now, so within every retention at gc.
        young_parked = await park_dead_letter(client, letter("chain-z"), task_queue)
        young = await stored(store).put(payload("young"), never)
        write_scratchpad(pads, "team/young")
        env = gc_env(dev_env, task_queue, store, pads, tmp_path)
        before = objects(store)
        gone = deleted_objects | {shard(orphan)}
        expected = {("payloads", name) for name in gone} | {
            ("dead_letters", archived),
            ("scratchpads", "team/ended"),
        }

        _, planned = await coord_gc(env, "--dry-run")
        assert by_action(planned, "would remove") == expected
        assert by_action(planned, "would archive") == {("dead_letters", old_parked)}
        assert objects(store) == before

        code, done = await coord_gc(env)
        assert code == 0
        assert by_action(done, "removed") == expected
        assert by_action(done, "archived") == {("dead_letters", old_parked)}
        assert objects(store) == before - gone
        reasons = {item["name"]: item["reason"] for item in done["items"]}
        assert "owner unknown" in reasons[shard(legacy.claim_data["sha256"])]
        assert "younger than 1h" in reasons[shard(young)]
        assert (pads / "team" / "ended" / "notes.txt").exists()
        assert not (pads / "team" / "ended" / "task-plan.md").exists()
        assert (pads / "team" / live.plan_id / "task-plan.md").exists()
        assert (pads / "team" / "young" / "task-plan.md").exists()
        assert (await api.dlq_entry(client, old_parked)).status == "archived"
        assert (await api.dlq_entry(client, young_parked)).status == "parked"

        # What still refers to its payloads reads them, and completes.
        assert (await api.chain_timeline(client, closed))[0].payload["blob"].startswith(closed)
        timeline = await api.chain_timeline(client, running)
        assert timeline[0].payload["blob"].startswith(running)
        await api.publish(client, approved(running))
        state = await asyncio.wait_for(api.chain_handle(client, running).result(), 60)
        assert state.status == ChainStatus.COMPLETED
        assert state.rejected_count == 0


DEAD_LETTERS_SECONDS = 10
"""Dead letters' retention in the test: long enough that the two gc runs (about a second each)
finish before the young entry is that old, even on a loaded machine (five times as long),
and what the test waits for the old entries to be that old."""


def stored(store: Path) -> StoredPayloads:
    return StoredPayloads(PayloadStoreSettings(str(store), DEFAULT_THRESHOLD))


def shard(digest: str) -> str:
    return f"{digest[:2]}/{digest}"


def set_back(*roots: Path) -> None:
    """Every file under `roots` written two hours ago (past the tests' 1h retention)."""
    past = datetime.now(UTC).timestamp() - 2 * 3600
    for root in roots:
        for path in root.rglob("*"):
            os.utime(path, (past, past), follow_symlinks=False)


def gc_env(
    env: WorkflowEnvironment, queue: str, store: Path, pads: Path, tmp_path: Path
) -> dict[str, str]:
    """What `coord gc` runs with: the test's server, queue, store and the worker's agents file
    (its scratchpad root and retention), one retention overridden by its variable."""
    agents = tmp_path / "agents.yaml"
    retention = "{payloads: 1h, results: 1h, scratchpads: 1h}"
    agents.write_text(f"worker: {{scratchpad_root: {pads}, retention: {retention}}}\n")
    return {
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "COORD_TASK_QUEUE": queue,
        "COORD_PAYLOAD_STORE": str(store),
        "COORD_AGENTS": str(agents),
        "COORD_RETENTION_DEAD_LETTERS": f"{DEAD_LETTERS_SECONDS}s",
    }


async def test_the_workers_sweep_removes_what_a_deleted_workflow_stored_and_keeps_the_rest(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    for name, value in {
        "COORD_PAYLOAD_STORE": str(store),
        "COORD_GC_EVERY": "1s",
        "COORD_RETENTION_PAYLOADS": "1h",
    }.items():
        monkeypatch.setenv(name, value)
    client = await store_client(dev_env, str(store))
    worker = await WorkerProcess.start(client, task_queue, tmp_path / "worker.log")
    try:
        running = await chain_with_big_event(client, task_queue, close=False)
        deleted = await chain_with_big_event(client, task_queue, close=True)
        kept, gone = owned_by(store, f"chain-{running}"), owned_by(store, f"chain-{deleted}")
        await delete_workflow(client, f"chain-{deleted}")
        set_back(store)
        await eventually(lambda: asyncio.to_thread(lambda: not gone & objects(store)), 60)
        assert kept <= objects(store)
        timeline = await api.chain_timeline(client, running)
        assert timeline[0].payload["blob"].startswith(running)
        await api.publish(client, approved(running))
        state = await asyncio.wait_for(api.chain_handle(client, running).result(), 60)
        assert state.status == ChainStatus.COMPLETED
        assert kept <= objects(store)
    finally:
        worker.stop()
    assert "gc sweep" in (tmp_path / "worker.log").read_text()


async def bucket_keys(bucket: str) -> set[str]:
    async with aioboto3.Session().client("s3") as s3:
        listed = await s3.list_objects_v2(Bucket=bucket)
    return {item["Key"] for item in listed.get("Contents", [])}


async def test_gc_in_an_s3_bucket_removes_only_what_nothing_refers_to(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    s3_server: str,  # noqa: F811  (the fixture)
) -> None:
    async with aioboto3.Session().client("s3") as s3:
        await s3.create_bucket(Bucket=s3_server)
    location = f"s3://{s3_server}"
    client = await store_client(dev_env, location)
    results = StoredPayloads(PayloadStoreSettings(location, DEFAULT_THRESHOLD))
    async with build_worker(client, task_queue):
        running = await chain_with_big_event(client, task_queue, close=False)
        deleted = await chain_with_big_event(client, task_queue, close=True)
        await delete_workflow(client, f"chain-{deleted}")
        never = OwnerMark(workflow_id="never-started", namespace=client.namespace, kind="results")
        holder = never.model_copy(update={"workflow_id": f"chain-{running}"})
        orphan = await results.put(payload("orphan result"), never)
        held = await results.put(payload("held result"), holder)
        keys = await bucket_keys(s3_server)
        await asyncio.sleep(2)  # the clock: everything stored is now past the 1s retention
        env = {
            "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
            "COORD_TASK_QUEUE": task_queue,
            "COORD_PAYLOAD_STORE": location,
            "COORD_RETENTION_PAYLOADS": "1s",
            "COORD_RETENTION_RESULTS": "1s",
        }
        code, report = await coord_gc(env)
        gone = {key for key in keys if f"/wi/chain-{deleted}/" in key}
        gone |= {key for key in keys if orphan in key}
        assert code == 0
        assert gone and {name for _, name in by_action(report, "removed")} <= gone
        assert await bucket_keys(s3_server) == keys - gone
        assert (await results.get(held)).data == payload("held result").data
        timeline = await api.chain_timeline(client, running)
        assert timeline[0].payload["blob"].startswith(running)
        await api.publish(client, approved(running))
        state = await asyncio.wait_for(api.chain_handle(client, running).result(), 60)
        assert state.status == ChainStatus.COMPLETED
