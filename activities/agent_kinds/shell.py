"""Shell agents: an argv (never a shell), the event JSON on stdin, a JSON object on stdout."""

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from typing import Any

from temporalio import activity

from activities.agent_kinds.failures import (
    INVALID_PAYLOAD,
    TEMPORARY_FAILURE,
    TIMEOUT,
    failure,
    json_object_output,
)
from activities.context import AgentContext
from models.agent_config import ShellAgent
from models.envelope import EventEnvelope

KILL_GRACE_SECONDS = 3.0


async def run_shell(
    config: ShellAgent, event: EventEnvelope, context: AgentContext
) -> Mapping[str, Any]:
    workdir = config.cwd or tempfile.mkdtemp(prefix=f"coord-{context.agent}-")
    try:
        process = await asyncio.create_subprocess_exec(
            *config.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workdir,
            env={
                **os.environ,
                **config.env,
                "COORD_IDEMPOTENCY_KEY": context.idempotency_key,
                "COORD_ATTEMPT": str(context.attempt),
            },
            start_new_session=True,
        )
        out, err = await _communicate(process, event.model_dump_json().encode(), config)
    finally:
        if config.cwd is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return _result(config, process.returncode or 0, out, err)


async def _communicate(
    process: asyncio.subprocess.Process, stdin: bytes, config: ShellAgent
) -> tuple[bytes, bytes]:
    """Heartbeat while the process runs; on timeout or cancellation end its whole process group
    (its children too): SIGTERM, then SIGKILL after a grace period."""
    talking = asyncio.ensure_future(process.communicate(stdin))
    deadline = asyncio.get_running_loop().time() + config.timeout.total_seconds()
    try:
        while not talking.done():
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise failure(TIMEOUT, f"{config.argv[0]} ran past its {config.timeout} timeout")
            await asyncio.wait({talking}, timeout=min(1.0, left))
            activity.heartbeat()
        return talking.result()
    except BaseException:
        await _terminate(process)
        talking.cancel()
        raise


async def _terminate(process: asyncio.subprocess.Process) -> None:
    """The group is killed even when its leader left in time: its children may not have."""
    _signal_group(process, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), KILL_GRACE_SECONDS)
    _signal_group(process, signal.SIGKILL)


def _signal_group(process: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _result(config: ShellAgent, code: int, out: bytes, err: bytes) -> Mapping[str, Any]:
    if code != 0:
        kind = INVALID_PAYLOAD if code in config.non_retryable_exit_codes else TEMPORARY_FAILURE
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise failure(kind, f"{config.argv[0]} exited {code}: {' / '.join(tail)}")
    return json_object_output(out, config.argv[0])
