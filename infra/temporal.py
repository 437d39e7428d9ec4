"""Connecting to Temporal the Temporal way: `temporalio.envconfig` reads TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TLS and API-key settings (and config-file profiles), so the same code runs
against the embedded dev server, a self-hosted cluster or Temporal Cloud."""

import asyncio
import getpass
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import TypeVar

from temporalio.client import Client
from temporalio.envconfig import ClientConfig, ClientConnectConfig
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from coord.infra.logs import core_logging
from coord.infra.payload_store import data_converter
from coord.infra.tracing import client_interceptors
from coord.models.wire.contract import DEFAULT_TASK_QUEUE, TASK_QUEUE_ENV
from coord.models.wire.errors import CoordError

T = TypeVar("T")

DEFAULT_PORT = 7233
DEFAULT_ADDRESS = f"localhost:{DEFAULT_PORT}"


def dev_ui_port(port: int) -> int:
    """Where a dev server on `port` serves its UI by default (the Temporal CLI's rule, which
    `coord server`, `demo` and `dev` follow): 7233 and 8233."""
    return port + 1000


DEFAULT_UI_URL = f"http://localhost:{dev_ui_port(DEFAULT_PORT)}"
IDENTITY_ENV = "COORD_IDENTITY"
"""Who the `coord` CLI is to the server (its client identity): recorded with what it sends, and
the author of a plan approval it sends."""


def client_identity() -> str:
    """`$COORD_IDENTITY`, else the user and the host (`ann@build-7`): the SDK's own default,
    the process id and host, says nothing of who asks."""
    return os.environ.get(IDENTITY_ENV) or f"{_user()}@{socket.gethostname()}"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or the password database
        return f"uid-{os.getuid()}"


def task_queue() -> str:
    return os.environ.get(TASK_QUEUE_ENV, DEFAULT_TASK_QUEUE)


def ui_url() -> str:
    """$COORD_UI_URL, else the UI a dev server serves beside the configured server: on a local
    address, at its port plus 1000 (the dev server's default, and `coord server`'s: 7233 and
    8233), else localhost:8233."""
    if chosen := os.environ.get("COORD_UI_URL"):
        return chosen.rstrip("/")
    host, _, port = ConnectionSettings.load().address.rpartition(":")
    if host in ("localhost", "127.0.0.1") and port.isdigit():
        return f"http://{host}:{dev_ui_port(int(port))}"
    return DEFAULT_UI_URL


class ServerUnreachable(CoordError, RuntimeError):
    """No Temporal server answers at the configured address."""


def unreachable(address: str) -> ServerUnreachable:
    """The one line every command says when no server answers at `address` (exit code 6):
    whether it could not connect, or the server went away while it waited (`server_gone`)."""
    return ServerUnreachable(
        f"cannot reach Temporal at {address}; is it running? "
        "`coord server` starts one here, TEMPORAL_ADDRESS points elsewhere"
    )


TRANSPORT_ERROR = "transport error"
"""The message of a call whose connection broke with no answer (status UNKNOWN): the server
was stopped while the call was out (a `--wait` holds one open for as long as the run runs)."""


def server_gone(error: RPCError) -> bool:
    """No server answered `error`'s call: none could be connected to (UNAVAILABLE, once the
    SDK's own retries are spent), or the connection broke under the call (UNKNOWN `transport
    error`). Not a refusal: the server never saw the call, or never answered it."""
    return error.status == RPCStatusCode.UNAVAILABLE or (
        error.status == RPCStatusCode.UNKNOWN and error.message.startswith(TRANSPORT_ERROR)
    )


@cache
def client_runtime() -> Runtime:
    """The SDK runtime of a process that only calls the server (the CLI's commands, the
    embedded server's client): the SDK's own, but its core's log lines (a call retried while
    the server is away, ...) go through Python logging (`logs.core_logging`), to stderr like
    every log line, instead of onto stdout, where they broke `--json` and piped tables. A
    process running workers has its own (`coord.worker.worker_runtime`), which does the same."""
    return Runtime(telemetry=TelemetryConfig(logging=core_logging()))


OUTAGE_TOLERANCE = timedelta(minutes=10)
"""How long a worker process keeps trying to reach the server for what its activities ask of
it (a signal, a query, a run's report sent again) while the server cannot be reached."""
WORKER_RETRY_INTERVAL = timedelta(seconds=2)
"""The longest pause between two of those tries, so they land soon after the server is back."""
WORKER_RETRY = RetryConfig(
    max_interval_millis=int(WORKER_RETRY_INTERVAL / timedelta(milliseconds=1)),
    max_elapsed_time_millis=int(OUTAGE_TOLERANCE / timedelta(milliseconds=1)),
    max_retries=int(OUTAGE_TOLERANCE / WORKER_RETRY_INTERVAL) + 20,
)
"""The connection of a process running workers: an activity's own call to the server waits an
outage out instead of failing after the SDK's default 10 s (and spending a retry of its run). A
call its caller stops waiting for (a ledger's 5 s) is abandoned, not retried on. The SDK's own
calls for its workers (polls, reports, heartbeats) keep the SDK's settings, whatever these say:
activities/reports.py sends again what they drop. Commands a person runs keep the default, so
they say at once that the server is down."""


@dataclass(frozen=True)
class ConnectionSettings:
    config: ClientConnectConfig

    @classmethod
    def load(cls) -> "ConnectionSettings":
        return cls(ClientConfig.load_client_connect_config())

    @property
    def explicit(self) -> bool:
        """True when the environment or a profile names a server, so nothing embedded starts."""
        return "target_host" in self.config

    @property
    def address(self) -> str:
        return self.config.get("target_host", DEFAULT_ADDRESS)

    @property
    def namespace(self) -> str:
        return self.config.get("namespace", "default")

    async def connect(
        self,
        runtime: Runtime | None = None,
        identity: str | None = None,
        *,
        retry: RetryConfig | None = None,
    ) -> Client:
        """A client of the server; `identity` is what the server records as its caller (the
        SDK's default, pid@host, when not given); `retry`: how its calls are retried while the
        server cannot be reached (WORKER_RETRY for workers; the SDK's default, 10 s, when None)."""
        config: ClientConnectConfig = {**self.config, "target_host": self.address}
        try:
            return await Client.connect(
                **config,
                identity=identity,
                data_converter=data_converter(),
                interceptors=client_interceptors(),
                runtime=runtime,
                retry_config=retry,
            )
        except RuntimeError:
            # The SDK's message is the Rust transport's error chain: no help to a user.
            raise unreachable(self.address) from None


async def connect(*, identity: str | None = None) -> Client:
    """A client of the configured server, as every `coord` command connects: the address,
    namespace, TLS and API key from the environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
    TEMPORAL_API_KEY, ...) or a profile of Temporal's config file (`temporalio.envconfig`), else
    localhost:7233; with the project's data converter (large payloads go to the payload store).
    `identity` is who the server records as the caller (default: $COORD_IDENTITY, else
    user@host). ServerUnreachable when no server answers."""
    return await ConnectionSettings.load().connect(identity=identity or client_identity())


def workflow_link(workflow_id: str, namespace: str = "default") -> str:
    return f"{ui_url()}/namespaces/{namespace}/workflows/{workflow_id}"


RECYCLED_CONNECTION = frozenset({RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE})
"""How a call ends when its connection goes away under it: the server closes each client's
connection at its max connection age (Temporal's `frontend.keepAliveMaxConnectionAge`, 5
minutes by default), and a call sent as it closes ends CANCELLED (UNAVAILABLE while the client
reconnects). The server never refused it: asked again, on the new connection, it is answered.
A command that waits minutes (`--wait`, `--follow`) sees this at every recycle."""


def recycled_connection(error: BaseException) -> bool:
    """`error` is a call lost with its connection (RECYCLED_CONNECTION), not a refusal: the
    server's error itself, or the CoordError the API made of it (its `__cause__`)."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, RPCError):
        cause = cause.__cause__
    return isinstance(cause, RPCError) and cause.status in RECYCLED_CONNECTION


RECONNECT_TRIES = 3
"""How often a read lost with its connection is asked again before its error is reported: the
client reconnects at once, so the second try is answered; a server that stays away fails
each, and is then reported (as ServerUnreachable, by the command) instead of awaited forever."""


async def reconnecting(read: Callable[[], Awaitable[T]], pause: float = 1.0) -> T:
    """`read()`, asked again (after `pause` seconds) when its connection was recycled under it
    (`recycled_connection`), up to RECONNECT_TRIES in all: for reads, which are safe to repeat,
    that a command waits on for minutes."""
    for _ in range(RECONNECT_TRIES - 1):
        try:
            return await read()
        except Exception as error:
            if not recycled_connection(error):
                raise
        await asyncio.sleep(pause)
    return await read()
