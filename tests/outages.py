"""A dev server a test owns, on its own port and SQLite file, that it can SIGTERM or SIGKILL and
start again on the same file, as `coord server` runs one: the project's server binary and its
task-dispatch settings; the search attributes registered once, kept in the file."""

import asyncio
import os
import signal
import socket
import subprocess
from pathlib import Path

from temporalio.client import Client

from coord.infra.devserver import TASK_DISPATCH_CONFIG, TIMER_CONFIG, installed_binary
from coord.infra.payload_store import data_converter
from coord.infra.search_attributes import register_search_attributes

START_TIMEOUT = 60.0
"""Seconds a (re)started server may take to answer: it loads its SQLite file first."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def listening(port: int) -> bool:
    """Whether something on this machine accepts connections on `port`."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


class OwnDevServer:
    """`temporal server start-dev` on `db_file`, restarted on the same port and file."""

    def __init__(self, db_file: Path, log: Path) -> None:
        self.db_file = db_file
        self.log = log
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    async def start(self) -> Client:
        """Start it, and return a client once it answers (the search attributes registered)."""
        argv = [
            installed_binary("temporal"),
            *("server", "start-dev", "--headless", "--ip", "127.0.0.1"),
            *("--port", str(self.port), "--db-filename", str(self.db_file)),
            *("--log-level", "error", *TASK_DISPATCH_CONFIG, *TIMER_CONFIG),
        ]
        with self.log.open("ab") as output:
            self._process = subprocess.Popen(
                argv, stdout=output, stderr=output, start_new_session=True
            )
        client = await asyncio.wait_for(self._connected(), START_TIMEOUT)
        await register_search_attributes(client)
        return client

    async def _connected(self) -> Client:
        while True:
            if self._process is not None and self._process.poll() is not None:
                raise AssertionError(f"the dev server exited with {self._process.returncode}")
            try:
                return await Client.connect(self.address, data_converter=data_converter())
            except RuntimeError:
                await asyncio.sleep(0.2)

    def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        """SIGTERM (it shuts down in order) or SIGKILL (cut off where it stands)."""
        if self._process is None or self._process.poll() is not None:
            return
        os.killpg(self._process.pid, how)
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
