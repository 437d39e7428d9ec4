"""Child processes that end with the `coord` process that started them, even when it is killed
(SIGKILL, OOM) and has no chance to stop them: an orphaned Temporal dev server holds its ports
(the next `coord server` fails, port in use), and an orphaned shell agent goes on running while
the server hands its run to another worker (the same idempotency key running twice at once).

Linux only (`prctl(PR_SET_PDEATHSIG)`, `/proc`); elsewhere these do nothing and such children
outlive a killed parent as before."""

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1
"""linux/prctl.h: the signal a process gets when the thread that started it ends."""


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once (never in a forked child), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL = _prctl()


def die_with_parent() -> None:
    """A `preexec_fn`: the child gets SIGKILL when its parent ends. Set in the direct child
    only, so it covers what that child starts itself only if it does the same. The parent is
    the thread that forks, so start such children from a thread that lives as long as the
    process (the event loop's)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


WATCHDOG = """
import os, signal, sys, time
if sys.stdin.buffer.read(1):
    sys.exit()  # the parent stopped the child itself, and says so
pid = int(sys.argv[1])
try:
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        time.sleep(0.1)
        os.kill(pid, 0)
    os.kill(pid, signal.SIGKILL)
except ProcessLookupError:
    pass
"""
"""Waits for its parent to end (its stdin at end of file: the parent's end of the pipe closed
with it), then stops `pid` (SIGTERM, SIGKILL after 10 s). A byte on stdin instead dismisses it."""


class Watchdog:
    """Stops a child this process did not start itself (the SDK's core starts the dev server)
    once this process is gone, however it ended; `dismiss` it before stopping the child
    yourself."""

    def __init__(self, pid: int) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", WATCHDOG, str(pid)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the terminal's group is not for it
        )

    def dismiss(self) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(b"x")
            self._process.stdin.close()
        except BrokenPipeError:
            pass  # it has gone already
        self._process.wait()


def children_running(binary: Path) -> set[int]:
    """The pids of this process's children running `binary`, read from /proc (none off
    Linux)."""
    me, wanted, found = os.getpid(), os.path.realpath(binary), set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            if ppid == me and os.path.realpath(entry / "exe") == wanted:
                found.add(int(entry.name))
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return found
