"""Large events by reference: the issue's sizes against a chain, its aggregator and the dead-letter
queue, across a worker restart and continue-as-new."""

import asyncio
import json
import os
import re
import shutil
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aioboto3
import pytest
from moto.server import ThreadedMotoServer
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from temporalio.testing import WorkflowEnvironment

from coord.infra.payload_store import (
    DEFAULT_THRESHOLD,
    STORE_ENV,
    DirectoryDriver,
    PayloadStoreSettings,
    data_converter,
)
from coord.infra.state_dir import server_db_file
from coord.models.aggregator.spec import AggregatorStatus
from coord.models.chain.intake import TIMELINE_WINDOW
from coord.models.chain.spec import ChainStatus
from coord.models.dlq.letter import DlqSelection
from coord.models.events.envelope import EventEnvelope
from coord.starter import api
from coord.starter.exits import ExitCode
from coord.worker import build_worker
from tests.helpers import API, approved, eventually, parked, phase1, user_story
from tests.workers import COORD, run, server_env

MB = 1024 * 1024
PROGRESS_TIMEOUT = 300.0
"""The bound of a wait for the worker to get through megabytes of events (taking them in,
continuing as new, ending): its tasks take seconds here, tens of seconds on a loaded machine
(continue-as-new came 33 s after the wait began at a load of 13 to 19, over the 60 s once);
what counts is that it comes."""
HANDING_OVER_NEW_EVENTS = (
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND,
)


def invalid(n: int) -> dict[str, Any]:
    """An envelope with no `source`: it does not validate, and it carries a 1 MB string."""
    return {"event": {"type": f"Broken{n}"}, "payload": {"blob": "x" * MB}}


def large(
    event_type: str, correlation_id: str, size: int, source: str = "/tester"
) -> EventEnvelope:
    return EventEnvelope.new(
        event_type, source, payload={"blob": "y" * size}, correlation_id=correlation_id
    )


async def plain_client(env: WorkflowEnvironment) -> Client:
    """What the Temporal CLI is: a client without the payload store, sending raw JSON."""
    config = env.client.service_client.config
    return await Client.connect(
        config.target_host, namespace=env.client.namespace, data_converter=pydantic_data_converter
    )


async def flood_with_large_events(
    client: Client,
    plain: Client,
    workflow_id: str,
    correlation_id: str,
    big: EventEnvelope,
    settled: Callable[[], Awaitable[None]],
) -> None:
    """Ten invalid 1 MB envelopes and five valid 1 MB events through the project's client (so by
    reference), then `big` raw, as the Temporal CLI sends it, once the target has `settled`: the
    server fails a task in flight (FORCE_CLOSE_COMMAND) when the signals that arrive meanwhile
    buffer more than 2 MB, which one raw 1.9 MB signal and a few more do."""
    handle = client.get_workflow_handle(workflow_id)
    for n in range(10):
        await handle.signal("event", invalid(n))
    for n in range(5):
        note = large(f"DesignNote{n}", correlation_id, MB)
        await handle.signal("event", note.model_dump(mode="json"))
    await settled()
    await plain.get_workflow_handle(workflow_id).signal("event", big.model_dump(mode="json"))


async def failed_tasks(client: Client, workflow_id: str) -> list[str]:
    """WorkflowTaskFailed events across every run of `workflow_id`, but for the two the server
    uses to hand the worker new events, which the next task takes: UNHANDLED_COMMAND (a task
    closed the run while signals arrived) and FORCE_CLOSE_COMMAND (signals that arrived during a
    task buffered over 2 MB, as one raw 1.9 MB signal does). Neither is a failure of the
    workflow's own, and neither repeats."""
    failures = []
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        history = await client.get_workflow_handle(
            workflow_id, run_id=execution.run_id
        ).fetch_history()
        failures += [
            f"{WorkflowTaskFailedCause.Name(failed.cause)}: {failed.failure.message}"
            for failed in (
                event.workflow_task_failed_event_attributes
                for event in history.events
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
            )
            if failed.cause not in HANDING_OVER_NEW_EVENTS
        ]
    return failures


async def runs(client: Client, workflow_id: str) -> int:
    return len([e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")])


@pytest.mark.usefixtures("no_deadlock_detector")
async def test_large_events_wedge_neither_chain_nor_aggregator_nor_dead_letter_queue(
    client: Client, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """Under load the SDK's deadlock detector, which counts wall clock, failed the new worker's
    replay of megabytes of events (3 s at a load of 20): the workers here run without it, so
    that a failed task the test finds is one of sizes, what it is about."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    chain_id = f"chain-{correlation_id}"
    plain = await plain_client(dev_env)
    spec = phase1(correlation_id=correlation_id)
    async with build_worker(client, task_queue):
        await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        aggregator = await api.start_aggregator(client, spec, queue=task_queue)

        async def attached() -> bool:
            state = await api.chain_state(client, correlation_id)
            return spec.workflow_id in state.listeners

        await eventually(attached)

        async def chain_took(count: int) -> None:
            async def took() -> bool:
                return (await api.chain_state(client, correlation_id)).received == count

            await eventually(took, PROGRESS_TIMEOUT)

        async def aggregator_took_them() -> None:
            async def took() -> bool:
                state = await api.aggregator_state(client, spec.workflow_id)
                return len(state.rejected) == 10 and state.matched + state.unmatched >= 5

            await eventually(took, PROGRESS_TIMEOUT)

        chain_big = large("DesignNote", correlation_id, int(1.9 * MB))
        await flood_with_large_events(
            client, plain, chain_id, correlation_id, chain_big, lambda: chain_took(15)
        )
        aggregator_big = large(API[0], correlation_id, int(1.9 * MB), source=API[1])
        await flood_with_large_events(
            client, plain, spec.workflow_id, correlation_id, aggregator_big, aggregator_took_them
        )
        await chain_took(16)
    # A new worker starts with an empty cache: it replays the histories, references included.
    async with build_worker(client, task_queue):
        filler = [large("ProgressNote", correlation_id, 20_000) for _ in range(250)]
        for batch in range(0, len(filler), 50):
            await asyncio.gather(*(api.publish(client, e) for e in filler[batch : batch + 50]))
        await eventually(lambda: _continued(client, chain_id), PROGRESS_TIMEOUT)
        await api.publish(client, approved(correlation_id))
        chain_handle = api.chain_handle(client, correlation_id)
        chain_state = await asyncio.wait_for(chain_handle.result(), PROGRESS_TIMEOUT)
        aggregator_state = await asyncio.wait_for(aggregator.result(), PROGRESS_TIMEOUT)
        timeline = await api.chain_timeline(client, correlation_id)
        code, listed, err = await run(COORD, "dlq", "list", env=server_env(dev_env, task_queue))
    assert chain_state.status == ChainStatus.COMPLETED
    assert "TestingCompleted" in [entry.event for entry in timeline]
    assert len(timeline) <= 2 * TIMELINE_WINDOW
    assert chain_state.rejected_count == 10
    assert chain_state.received == chain_state.events_seen + chain_state.duplicates + 10
    assert aggregator_state.status == AggregatorStatus.COMPLETED
    assert aggregator_state.emitted is not None
    joined = aggregator_state.emitted.payload["inputs"].values()
    api_design = next(event for event in joined if event["type"] == API[0])
    assert len(api_design["payload"]["blob"]) == int(1.9 * MB)
    assert code == 0, err
    assert "invalid_envelope" in listed
    entries = await api.dlq_entries(client, queue=task_queue)
    assert len([e for e in entries if e.failure_type == "invalid_envelope"]) == 20
    for workflow_id in (chain_id, spec.workflow_id, *(e.entry_id for e in entries)):
        assert await failed_tasks(client, workflow_id) == [], workflow_id


async def _continued(client: Client, workflow_id: str) -> bool:
    return await runs(client, workflow_id) >= 2


@pytest.mark.usefixtures("no_deadlock_detector")
async def test_chain_carrying_200_rows_of_20_kb_continues_as_new(
    client: Client, task_queue: str
) -> None:
    """About 4 MB of carried timeline, over the server's 2 MB: the next run's input goes by
    reference. 300 events pass the session server's continue-as-new suggestion."""
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    chain_id = f"chain-{correlation_id}"
    notes = [large("ProgressNote", correlation_id, 20_000) for _ in range(300)]
    async with build_worker(client, task_queue):
        await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        for batch in range(0, len(notes), 50):
            await asyncio.gather(*(api.publish(client, e) for e in notes[batch : batch + 50]))
        await eventually(lambda: _continued(client, chain_id), PROGRESS_TIMEOUT)
        await api.publish(client, approved(correlation_id))
        ended = api.chain_handle(client, correlation_id).result()
        state = await asyncio.wait_for(ended, PROGRESS_TIMEOUT)
    assert state.status == ChainStatus.COMPLETED
    assert state.events_seen > len(notes)
    assert await failed_tasks(client, chain_id) == []
    carried = await continued_input(client, chain_id)
    assert carried.ByteSize() < 1024
    assert carried.external_payloads[0].size_bytes > 200 * 20_000


async def continued_input(client: Client, workflow_id: str) -> Payload:
    """The input of the first run that a continue-as-new started, as the history holds it."""
    first = [e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")][-1]
    history = await client.get_workflow_handle(workflow_id, run_id=first.run_id).fetch_history()
    continued = history.events[-1].workflow_execution_continued_as_new_event_attributes
    return continued.input.payloads[0]


async def test_payloads_over_the_threshold_go_to_the_store_and_history_holds_a_reference(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    note = large("DesignNote", correlation_id, DEFAULT_THRESHOLD)
    async with build_worker(client, task_queue):
        await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        await api.publish(client, note)
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(api.chain_handle(client, correlation_id).result(), 30)
        timeline = await api.chain_timeline(client, correlation_id)
    history = await api.chain_handle(client, correlation_id).fetch_history()
    signal = next(
        e.workflow_execution_signaled_event_attributes.input.payloads[0]
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    )
    assert signal.ByteSize() < 1024
    assert signal.external_payloads[0].size_bytes > DEFAULT_THRESHOLD
    assert timeline[0].payload == note.payload


async def test_a_reference_whose_object_is_gone_reads_as_an_unavailable_payload(
    tmp_path: Path,
) -> None:
    """A wiped store must not fail a workflow task forever: the value names what is missing."""
    driver = PayloadStoreSettings(str(tmp_path), DEFAULT_THRESHOLD).driver()
    assert isinstance(driver, DirectoryDriver)
    [claim] = await driver.store(
        StorageDriverStoreContext(),
        [Payload(metadata={"encoding": b"json/plain"}, data=b'"kept"')],
    )
    for stored in tmp_path.rglob(claim.claim_data["sha256"]):
        stored.unlink()
    [payload] = await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    [forged] = await driver.retrieve(
        StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data={"sha256": "../x"})]
    )
    value = pydantic_data_converter.payload_converter.from_payload(payload)
    assert value["payload_unavailable"]["sha256"] == claim.claim_data["sha256"]
    assert "not in the payload store" in value["payload_unavailable"]["reason"]
    forged_value = pydantic_data_converter.payload_converter.from_payload(forged)
    assert forged_value["payload_unavailable"]["reason"] == "not a SHA-256 reference"


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A local S3-compatible server (moto's), reached through the standard AWS variables, and a
    bucket name of this test's own: moto keeps its buckets in the process, across servers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    yield f"coord-payloads-{uuid.uuid4().hex[:8]}"
    server.stop()


async def test_an_s3_compatible_store_keeps_large_payloads_by_reference(s3_server: str) -> None:
    async with aioboto3.Session().client("s3") as s3:
        await s3.create_bucket(Bucket=s3_server)
        converter = data_converter(PayloadStoreSettings(f"s3://{s3_server}", DEFAULT_THRESHOLD))
        event = large("DesignNote", "story-s3", MB)
        [stored] = await converter.encode([event.model_dump(mode="json")])
        objects = await s3.list_objects_v2(Bucket=s3_server)
    assert stored.ByteSize() < 1024
    assert stored.external_payloads[0].size_bytes > MB
    assert objects["KeyCount"] == 1
    [value] = await converter.decode([stored], [EventEnvelope])
    assert value == event


async def test_a_client_run_elsewhere_shares_the_default_store_and_one_on_another_is_told(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """The default store is the user's, whatever the working directory: `coord` run from another
    directory than its worker hands it a large plan. A client on another store gets its large
    input and its large event reported as unavailable, naming the object, the store and the
    likely cause, not as the fields of a spec or envelope they lack."""
    shared, other = tmp_path / "data", tmp_path / "other-data"
    worker_store = shared / "event-coordinator" / "payloads"
    config = dev_env.client.service_client.config
    worker_client = await Client.connect(
        config.target_host,
        namespace=dev_env.client.namespace,
        data_converter=data_converter(PayloadStoreSettings(str(worker_store), DEFAULT_THRESHOLD)),
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    task = {"id": "api", "agent": "backend-architect", "retry": {"max_retries": 0}}
    plans = {}
    for name in ("shared", "other"):
        plan_id = f"store-{name}-{uuid.uuid4().hex[:8]}"
        plan = {"plan_id": plan_id, "tasks": [{**task, "input": {"blob": "z" * 200_000}}]}
        plans[name] = elsewhere / f"{name}.json"
        plans[name].write_text(json.dumps(plan))
    big = elsewhere / "big.json"
    big.write_text(json.dumps({"blob": "b" * 200_000}))
    correlation_id = f"store-{uuid.uuid4().hex[:8]}"
    env = server_env(dev_env, task_queue) | {"COORD_PAYLOAD_STORE": ""}
    async with build_worker(worker_client, task_queue):
        handle = await api.start_chain(
            worker_client, user_story(), correlation_id, queue=task_queue
        )
        shared_env = env | {"XDG_DATA_HOME": str(shared)}
        code, _, err = await run(
            COORD, "plan", "start", str(plans["shared"]), "--wait", env=shared_env, cwd=elsewhere
        )
        assert code == 0, err
        other_env = env | {"XDG_DATA_HOME": str(other)}
        code, _, err = await run(
            COORD, "plan", "start", str(plans["other"]), "--wait", env=other_env, cwd=elsewhere
        )
        publish = ("publish", "--type", "DesignNote", "--source", "/tester")
        sent = await run(
            COORD,
            *publish,
            *("--correlation-id", correlation_id, "--payload-file", str(big)),
            env=other_env,
            cwd=elsewhere,
        )
        assert sent[0] == 0, sent[2]
        await eventually(lambda: _rejected(worker_client, correlation_id), 60)
        await api.close_chain(worker_client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 30)
    store = other / "event-coordinator" / "payloads"
    cause = "likely cause: the client that sent it and this worker use different payload stores"
    assert code == 1
    assert re.fullmatch(
        r"error: plan_outcome: invalid_spec: plan spec: payload_unavailable: stored payload "
        rf"[0-9a-f]{{64}} cannot be read: not in the payload store {re.escape(str(worker_store))}; "
        rf"{cause} \(COORD_PAYLOAD_STORE\)\n",
        err,
    ), err
    assert list(store.rglob("*")), "the client stored it in its own default store"
    [rejected] = state.rejected
    assert rejected.reason.startswith("event: payload_unavailable: stored payload "), rejected
    assert cause in rejected.reason


async def test_an_event_whose_stored_object_is_gone_waits_for_it_and_replays_once_it_is_back(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A client on another payload store sends a large event: the chain cannot read it and parks
    the store's placeholder. The entry says which stored object it waits for; `coord dlq replay`
    is refused, naming the entry, the object and the worker's store, and leaves it parked; with
    the object put back in the worker's store, the replay delivers the real event."""
    elsewhere = tmp_path / "elsewhere"
    worker_store = Path(os.environ[STORE_ENV]).resolve()
    config = client.service_client.config
    sender = await Client.connect(
        config.target_host,
        namespace=client.namespace,
        data_converter=data_converter(PayloadStoreSettings(str(elsewhere), DEFAULT_THRESHOLD)),
    )
    env = server_env(dev_env, task_queue)
    correlation_id = f"gone-{uuid.uuid4().hex[:8]}"
    note = large("DesignNote", correlation_id, DEFAULT_THRESHOLD)
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        await api.publish(sender, note, queue=task_queue)
        [row] = await parked(client, task_queue, 1, DlqSelection(correlation_id=correlation_id))
        entry = await api.dlq_entry(client, row.entry_id)
        digest = entry.stored_object
        assert digest is not None, entry
        code, shown, said = await run(COORD, "dlq", "show", row.entry_id, env=env)
        assert code == 0, said
        code, refused, err = await run(COORD, "dlq", "replay", row.entry_id, env=env)
        assert code == ExitCode.REFUSED, err
        with pytest.raises(api.Undeliverable) as still_gone:
            await api.dlq_replay(client, row.entry_id)
        still_parked = await api.dlq_entry(client, row.entry_id)
        [sent] = elsewhere.rglob(digest)
        (worker_store / digest[:2]).mkdir(exist_ok=True)
        shutil.copyfile(sent, worker_store / digest[:2] / digest)
        code, replayed, err = await run(COORD, "dlq", "replay", row.entry_id, env=env)
        assert code == 0, err
        await eventually(lambda: _noted(client, correlation_id), 30)
        [delivered] = [
            line
            for line in await api.chain_timeline(client, correlation_id)
            if line.event == "DesignNote"
        ]
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(chain.result(), 30)
    assert json.loads(shown)["raw"]["payload_unavailable"]["sha256"] == digest
    assert said == (
        f"note: {row.entry_id} waits for stored object {digest}: a replay reads it again from "
        "the worker's payload store, and delivers it once it is there\n"
    )
    assert refused == (
        f"refused: {row.entry_id}: payload_unavailable: stored object {digest} cannot be read: "
        f"not in the payload store {worker_store}; put it back in the worker's payload store, or "
        "point the worker at the store that holds it (COORD_PAYLOAD_STORE), then replay again\n"
    )
    assert str(still_gone.value) == refused.removeprefix("refused: ").rstrip("\n")
    assert still_parked.status == "parked" and still_parked.replays == []
    assert replayed.startswith(f"{row.entry_id}: replayed, delivered as evt-"), replayed
    assert delivered.payload == note.payload
    assert delivered.causation_id == note.event.id


async def _noted(client: Client, correlation_id: str) -> bool:
    """Whether the chain has a DesignNote row, read while it runs: a query once it has ended
    replays its history, in which the note's object was gone (docs/operations.md, "Gone
    objects")."""
    timeline = await api.chain_timeline(client, correlation_id)
    return any(line.event == "DesignNote" for line in timeline)


async def _rejected(client: Client, correlation_id: str) -> bool:
    return (await api.chain_state(client, correlation_id)).rejected_count > 0


def test_the_default_store_and_server_state_are_the_users_whatever_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    state = tmp_path / "data" / "event-coordinator"
    for directory in (tmp_path, tmp_path / "elsewhere"):
        directory.mkdir(exist_ok=True)
        monkeypatch.chdir(directory)
        assert PayloadStoreSettings.load().location == str(state / "payloads")
        assert server_db_file() == state / "coord.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert server_db_file() == Path.home() / ".local" / "share" / "event-coordinator" / "coord.db"
