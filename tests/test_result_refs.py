"""Large results by reference (pass references, not large data), through a real
worker on the dev server: a result over its request's `result_limit` comes back as a reference
to the payload store, which holds the data; a request whose inputs hold that reference gives
its agent (python, shell or http) the data; neither history holds the data; a reference whose
object is gone fails the run, typed and not retried; the attempt that succeeded is reported."""

import json
import os
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aioboto3
import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.converter import JSONPlainPayloadConverter
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from coord.infra.payload_store import (
    DEFAULT_THRESHOLD,
    STORE_ENV,
    PayloadStoreSettings,
    PayloadUnavailable,
    StoredPayloads,
)
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry, AgentRequest, AgentResult
from coord.models.mesh.results import ResultReference
from coord.models.wire.contract import RUN_AGENT_ACTIVITY
from coord.worker import build_worker
from tests.agents import PYTHON, registry
from tests.test_large_payloads import s3_server  # noqa: F401 (a local S3 server)

BLOB = "x" * 100_000
"""Under the converter's own 128 KiB threshold: without references it would sit in history."""
LIMIT = 1024


class OneRun(BaseModel):
    request: AgentRequest
    queue: str
    attempts: int = 1


@workflow.defn(sandboxed=False)
class RunAgentOnce:
    """One `run_agent` activity, as a plan's task runs it: the smallest real workflow that
    shows what history holds of a request and its result."""

    @workflow.run
    async def run(self, run: OneRun) -> AgentResult:
        result: AgentResult = await workflow.execute_activity(
            RUN_AGENT_ACTIVITY,
            run.request,
            result_type=AgentResult,
            task_queue=run.queue,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(
                maximum_attempts=run.attempts, initial_interval=timedelta(milliseconds=100)
            ),
        )
        return result


async def big(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    if context.attempt < event.payload.get("fail_until", 0):
        raise RuntimeError(f"failing attempt {context.attempt} on purpose")
    return {"blob": BLOB, "size": event.payload.get("size", "large")}


async def reader(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return {"blob_length": len(context.inputs["first"]["blob"])}


SHELL_READER = (
    "import json,sys; e=json.load(sys.stdin); "
    "print(json.dumps({'blob_length': len(e['inputs']['first']['blob'])}))"
)


class Reader(BaseHTTPRequestHandler):
    """An HTTP agent reading what its POST carries."""

    def do_POST(self) -> None:
        sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"blob_length": len(sent["inputs"]["first"]["blob"])}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def http_reader() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Reader)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/read"
    server.shutdown()


def agents(http_url: str = "http://127.0.0.1:9/unused") -> AgentRegistry:
    declared = registry(
        shell_reader={"kind": "shell", "argv": [PYTHON, "-c", SHELL_READER]},
        http_reader={"kind": "http", "url": http_url},
    )
    declared.register("big")(big)
    declared.register("reader")(reader)
    return declared


def request(agent: str, **fields: Any) -> AgentRequest:
    payload = fields.pop("payload", {})
    return AgentRequest(
        agent=agent, event=EventEnvelope.new("Work", "/test", payload=payload), **fields
    )


@asynccontextmanager
async def workers(client: Client, task_queue: str, served: AgentRegistry) -> AsyncIterator[str]:
    """The project's worker for the agents, and the test's workflow on a queue of its own."""
    workflow_queue = f"{task_queue}-workflow"
    async with (
        build_worker(client, task_queue, served),
        Worker(client, task_queue=workflow_queue, workflows=[RunAgentOnce]),
    ):
        yield workflow_queue


async def start(
    client: Client, workflow_queue: str, run: OneRun
) -> WorkflowHandle[RunAgentOnce, AgentResult]:
    return await client.start_workflow(
        RunAgentOnce.run,
        run,
        id=f"result-refs-{uuid.uuid4().hex[:8]}",
        task_queue=workflow_queue,
        execution_timeout=timedelta(seconds=60),
    )


async def history_bytes(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    return sum(event.ByteSize() for event in history.events)


async def stored_value(reference: ResultReference) -> Any:
    return JSONPlainPayloadConverter().from_payload(await StoredPayloads().get(reference.sha256))


async def test_a_large_result_comes_back_as_a_reference_and_its_dependents_get_the_data(
    client: Client, task_queue: str, http_reader: str
) -> None:
    async with workers(client, task_queue, agents(http_reader)) as workflow_queue:
        produced = await start(
            client,
            workflow_queue,
            OneRun(request=request("big", result_limit=LIMIT), queue=task_queue),
        )
        result = await produced.result()
        assert result.data == {} and result.reference is not None
        assert result.reference.bytes == len(
            json.dumps({"blob": BLOB, "size": "large"}, separators=(",", ":"))
        )
        assert await stored_value(result.reference) == {"blob": BLOB, "size": "large"}
        inputs = {"first": result.reference.as_input()}
        readers = [
            await start(
                client,
                workflow_queue,
                OneRun(request=request(agent, inputs=inputs), queue=task_queue),
            )
            for agent in ("reader", "shell_reader", "http_reader")
        ]
        for handle in readers:
            assert (await handle.result()).data == {"blob_length": len(BLOB)}
    for handle in (produced, *readers):
        assert await history_bytes(handle) < 8 * 1024, "the data stays out of history"


async def test_a_result_within_the_limit_stays_inline_and_reports_its_attempt(
    client: Client, task_queue: str
) -> None:
    """The attempt that succeeded (here the second) fills in the retries a plan did not see."""
    run = OneRun(
        request=request("big", payload={"fail_until": 2}, result_limit=10 * len(BLOB)),
        queue=task_queue,
        attempts=2,
    )
    async with workers(client, task_queue, agents()) as workflow_queue:
        result = await (await start(client, workflow_queue, run)).result()
    assert result.reference is None
    assert result.data == {"blob": BLOB, "size": "large"}
    assert result.metadata["attempt"] == 2


async def test_a_reference_whose_object_is_gone_fails_the_run_typed_and_not_retried(
    client: Client, task_queue: str
) -> None:
    async with workers(client, task_queue, agents()) as workflow_queue:
        produced = await start(
            client,
            workflow_queue,
            OneRun(request=request("big", result_limit=LIMIT), queue=task_queue),
        )
        reference = (await produced.result()).reference
        assert reference is not None
        for stored in Path(os.environ[STORE_ENV]).rglob(reference.sha256):
            stored.unlink()  # the store wiped
        consumer = await start(
            client,
            workflow_queue,
            OneRun(
                request=request("reader", inputs={"first": reference.as_input()}),
                queue=task_queue,
                attempts=3,
            ),
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await consumer.result()
    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError)
    cause = activity_error.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("invalid_payload", True)
    assert f"inputs.first: result {reference.sha256} cannot be read" in cause.message
    (detail,) = cause.details
    assert detail["attempt"] == 1, "failed on its first attempt, not retried"
    assert [each["attempt"] for each in detail["run_attempts"]] == [1]


def test_only_a_well_formed_result_ref_is_a_reference() -> None:
    reference = ResultReference(sha256="a" * 64, bytes=3)
    assert ResultReference.in_input(reference.as_input()) == reference
    assert ResultReference.in_input({"result_ref": {"sha256": "short", "bytes": 3}}) is None
    assert ResultReference.in_input({"result_ref": reference.model_dump(), "more": 1}) is None
    assert ResultReference.in_input("result_ref") is None


@pytest.mark.usefixtures("s3_server")
async def test_an_s3_store_finds_a_result_by_its_digest_alone() -> None:
    """The S3 driver names objects by more than the digest; stored with no target, the digest
    is enough to find one again, and a deleted one reads as unavailable."""
    bucket = f"results-{uuid.uuid4().hex[:8]}"
    async with aioboto3.Session().client("s3") as s3:
        await s3.create_bucket(Bucket=bucket)
        store = StoredPayloads(PayloadStoreSettings(f"s3://{bucket}", DEFAULT_THRESHOLD))
        payload = JSONPlainPayloadConverter().to_payload({"blob": BLOB})
        assert payload is not None
        digest = await store.put(payload)
        assert await store.get(digest) == payload
        listed = await s3.list_objects_v2(Bucket=bucket)
        await s3.delete_object(Bucket=bucket, Key=listed["Contents"][0]["Key"])
        with pytest.raises(PayloadUnavailable, match=digest):
            await store.get(digest)
