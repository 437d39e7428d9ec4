"""A command that waits on the server (`saga start --wait`) when the server is killed under it:
it ends with the unreachable line and exit 6, as a command that cannot connect does, and the
SDK core's warnings while it retries (Rust log lines, one per try) stay off its stdout, which
`--json` keeps for the record alone: they are one log line on stderr. The real test starts and
kills a dev server of its own (about 35 s)."""

import asyncio
import json
import logging
import os
import signal
import subprocess
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError

from coord.infra.logs import (
    CORE_ENTRY,
    CORE_LOGGER,
    CORE_RETRIES,
    SERVER_AWAY,
    RetriesSaidOnce,
    core_logging,
)
from coord.infra.temporal import client_runtime
from coord.starter.exits import ExitCode
from tests.conftest import FEATURE_DEPLOYMENT
from tests.helpers import eventually
from tests.outages import OwnDevServer
from tests.workers import COORD

GONE_WITHIN = 90
"""Seconds the wait may take to give up once the server is gone: the SDK retries each read for
its default 10 s, and a wait asks up to RECONNECT_TRIES times (about 30 s in all)."""


async def test_a_wait_the_server_is_killed_under_ends_unreachable_with_stdout_clean(
    tmp_path: Path,
) -> None:
    server = OwnDevServer(tmp_path / "temporal.db", tmp_path / "server.log")
    client = await server.start()
    saga_id = f"outage-{uuid.uuid4().hex[:8]}"
    env = {
        "TEMPORAL_ADDRESS": server.address,
        "COORD_TASK_QUEUE": f"tq-{saga_id}",  # no worker: the saga waits for one
    }
    waiting = await asyncio.create_subprocess_exec(
        *(COORD, "saga", "start", str(FEATURE_DEPLOYMENT), "--id", saga_id, "--json"),
        *("--wait", "--no-worker-timeout", "600"),
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        await eventually(lambda: _exists(client, f"saga-{saga_id}"))
        server.stop(signal.SIGKILL)
        out, err = await asyncio.wait_for(waiting.communicate(), GONE_WITHIN)
    finally:
        if waiting.returncode is None:
            waiting.kill()
            await waiting.wait()
        server.stop(signal.SIGKILL)
    lines = err.decode().splitlines()
    assert waiting.returncode == ExitCode.UNREACHABLE, lines
    assert out == b""
    assert lines[-1] == (
        f"error: cannot reach Temporal at {server.address}; is it running? `coord server` "
        "starts one here, TEMPORAL_ADDRESS points elsewhere"
    )
    core = [json.loads(line) for line in lines if "temporalio_client" in line]
    assert [(c["logger"], c["event"]) for c in core] == [(CORE_RETRIES, SERVER_AWAY)], lines
    assert "\x1b" not in err.decode()


async def _exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return True


def test_the_sdk_cores_log_lines_are_forwarded_and_render_as_json() -> None:
    """What the core forwards (`core_logging`) becomes a log record of CORE_LOGGER, with the
    core's entry as an attribute: the session's JSON lines (conftest) render it without that
    object, whose repr says nothing."""
    forwarding = core_logging().forwarding
    assert forwarding is not None and forwarding.logger.name == CORE_LOGGER
    name = f"{CORE_LOGGER}-sdk_core::temporalio_client::retry"
    record = logging.getLogger(name).makeRecord(
        name,
        logging.WARNING,
        "(sdk-core)",
        0,
        "gRPC call retried 5 times",
        (),
        None,
        extra={CORE_ENTRY: object()},
    )
    line = json.loads(logging.getLogger().handlers[0].format(record))
    assert (line["logger"], line["level"], line["event"]) == (
        name,
        "warning",
        "gRPC call retried 5 times",
    )
    assert CORE_ENTRY not in line
    assert isinstance(client_runtime(), Runtime)


def test_a_command_says_the_cores_retries_once_in_words() -> None:
    """`RetriesSaidOnce`: the first retry line in words, the rest left out, any other line
    kept."""
    said = RetriesSaidOnce()

    def record(name: str, message: str) -> logging.LogRecord:
        return logging.getLogger(name).makeRecord(
            name, logging.WARNING, "(sdk-core)", 0, message, (), None
        )

    retries = [record(CORE_RETRIES, f"gRPC call retried {n} times") for n in (5, 6, 7)]
    other = record(f"{CORE_LOGGER}-sdk_core::worker", "something else")
    kept = [r for r in [*retries, other, record(CORE_RETRIES, "retried 8 times")] if said.filter(r)]
    assert [r.getMessage() for r in kept] == [SERVER_AWAY, "something else"]
