"""Shell agents: an argv (never a shell), the event JSON (and the run's inputs) on stdin, a JSON
object on stdout, `progress: <summary>` lines on stderr.

The child sees only an allow-listed environment, its output is read up to the worker's limit,
and its whole process group is ended whenever the run ends, however it ends."""

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from typing import Any

from coord.activities.kinds.output import json_object_output, request_json
from coord.infra.orphans import die_with_parent
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext
from coord.models.mesh.config import CHILD_ENV_DEFAULT, ShellAgent, WorkerSettings
from coord.models.wire.contract import FailureType, Health, failure
from coord.models.wire.durations import format_duration

KILL_GRACE_SECONDS = 3.0
STDERR_TAIL_CHARS = 500
PROGRESS_PREFIX = "progress:"
"""A stderr line `progress: Reading runAgent.ts` reports progress (`AgentContext.progress`)."""
LONGEST_PROGRESS_LINE = 1024
NOT_STARTABLE = {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ENOEXEC}
"""Why a program cannot start that no retry on this worker changes: missing, not executable,
not a program it can run."""


async def run_shell(
    config: ShellAgent, settings: WorkerSettings, event: EventEnvelope, context: AgentContext
) -> Mapping[str, Any]:
    workdir = config.cwd or tempfile.mkdtemp(prefix=f"coord-{context.agent}-")
    try:
        process = await _start(config, settings, context, workdir)
        stdin = request_json(event, context)
        out, err = await _communicate(process, stdin, config, settings, context)
    finally:
        if config.cwd is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return _result(config, process.returncode or 0, out, err)


async def _start(
    config: ShellAgent, settings: WorkerSettings, context: AgentContext, workdir: str
) -> asyncio.subprocess.Process:
    """The process; a program (or declared `cwd`) that is missing or not executable on this
    worker fails the run `invalid_payload`, not retried: it would not be there on a retry
    either, and only the worker's setup or the agent's declaration can fix it."""
    try:
        return await asyncio.create_subprocess_exec(
            *config.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workdir,
            env=child_environment(config, settings, context),
            start_new_session=True,
            preexec_fn=die_with_parent,  # the worker killed: no run going on beside its retry
        )
    except OSError as error:
        if error.errno not in NOT_STARTABLE:
            raise  # out of processes or descriptors, say: a retry may find them
        raise failure(FailureType.INVALID_PAYLOAD, _not_startable(config, workdir, error)) from None


def _not_startable(config: ShellAgent, workdir: str, error: OSError) -> str:
    """Which of the program or the working directory is at fault, and why, in one line."""
    name = config.argv[0]
    if config.cwd is not None and error.filename == workdir:
        what = f"its cwd {workdir}"
    else:
        what = f"its program {name}"
    reason = "is not there" if error.errno == errno.ENOENT else f"cannot be run ({error.strerror})"
    return (
        f"shell agent cannot start: {what} {reason} on this worker; install it or fix the "
        "agent's declaration (argv, cwd)"
    )


def child_environment(
    config: ShellAgent, settings: WorkerSettings, context: AgentContext
) -> dict[str, str]:
    """Built from an allow-list, never a copy of the worker's environment (which holds its
    credentials): the default few, what `worker.child_env` names, then the declared `env`."""
    allowed = (*CHILD_ENV_DEFAULT, *settings.child_env)
    return {
        **{name: os.environ[name] for name in allowed if name in os.environ},
        **config.env,
        "COORD_IDEMPOTENCY_KEY": context.idempotency_key,
        "COORD_ATTEMPT": str(context.attempt),
        **({"COORD_SCRATCHPAD": str(context.scratchpad)} if context.scratchpad else {}),
    }


async def _communicate(
    process: asyncio.subprocess.Process,
    stdin: bytes,
    config: ShellAgent,
    settings: WorkerSettings,
    context: AgentContext,
) -> tuple[bytes, bytes]:
    """When the process exits, fails, times out or is cancelled, its whole process group is
    ended (a child it left in the background too); then what it wrote is read to the end.
    `progress: <summary>` lines on stderr are reported as they come."""
    name, limit = config.argv[0], int(settings.output_limit)
    assert process.stdout is not None and process.stderr is not None
    progress = ProgressLines(context)
    readers = (
        asyncio.ensure_future(_read_capped(process.stdout, limit, f"{name} stdout")),
        asyncio.ensure_future(_read_capped(process.stderr, limit, f"{name} stderr", progress)),
    )
    exited = asyncio.ensure_future(_feed_and_wait(process, stdin))
    try:
        await _heartbeat_until_exit(exited, readers, config, context)
    except BaseException:
        for reader in readers:
            reader.cancel()
        raise
    finally:
        exited.cancel()
        await _terminate(process)
    try:
        out, err = await asyncio.wait_for(asyncio.gather(*readers), KILL_GRACE_SECONDS)
    except TimeoutError:
        raise failure(
            FailureType.TIMEOUT,
            f"{name} exited but something outside its group kept its output open",
        ) from None
    return out, err


async def _heartbeat_until_exit(
    exited: "asyncio.Future[int]",
    readers: tuple["asyncio.Future[bytes]", ...],
    config: ShellAgent,
    context: AgentContext,
) -> None:
    """Heartbeat while the process runs; fail at its timeout or as soon as it writes too much."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.timeout.total_seconds()
    while not exited.done():
        left = deadline - loop.time()
        if left <= 0:
            raise failure(
                FailureType.TIMEOUT,
                f"{config.argv[0]} ran past its {format_duration(config.timeout)} timeout",
                health=Health.TIMEOUT,
            )
        pending: set[asyncio.Future[Any]] = {
            exited,
            *(reader for reader in readers if not reader.done()),
        }
        await asyncio.wait(pending, timeout=min(1.0, left), return_when=asyncio.FIRST_COMPLETED)
        for reader in readers:
            if reader.done() and (error := reader.exception()):
                raise error
        context.heartbeat()


async def _feed_and_wait(process: asyncio.subprocess.Process, stdin: bytes) -> int:
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        process.stdin.write(stdin)
        await process.stdin.drain()
        process.stdin.close()
    return await process.wait()


async def _read_capped(
    stream: asyncio.StreamReader, limit: int, what: str, lines: "ProgressLines | None" = None
) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise failure(
                FailureType.INVALID_PAYLOAD, f"{what} passed the worker's {limit}-byte output limit"
            )
        chunks.append(chunk)
        if lines is not None:
            lines.feed(chunk)
    return b"".join(chunks)


class ProgressLines:
    """Finds `progress: <summary>` lines in a stream as it is read, and reports each summary.
    Holds at most the head of one unfinished line: a line without an end costs nothing more."""

    def __init__(self, context: AgentContext) -> None:
        self._context = context
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        *complete, rest = (self._partial + chunk).split(b"\n")
        self._partial = rest[:LONGEST_PROGRESS_LINE]
        for line in complete:
            text = line.decode(errors="replace").strip()
            if text.startswith(PROGRESS_PREFIX):
                self._context.progress(text.removeprefix(PROGRESS_PREFIX))


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
    """Its output, or the failure its exit code means; killed by a signal (a negative code),
    the agent is unwell rather than its input (`Health.SIGNAL`)."""
    if code != 0:
        kind = (
            FailureType.INVALID_PAYLOAD
            if code in config.non_retryable_exit_codes
            else FailureType.TEMPORARY_FAILURE
        )
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        ended = f"killed by signal {-code}" if code < 0 else f"exited {code}"
        raise failure(
            kind,
            f"{config.argv[0]} {ended}: {' / '.join(tail)[-STDERR_TAIL_CHARS:]}",
            health=Health.SIGNAL if code < 0 else None,
        )
    return json_object_output(out, config.argv[0])
