"""`coord` in its own process, as deployed: a worker a test can SIGKILL (no `finally`, no
graceful shutdown, whatever it was doing is cut off), and any command run as a user would."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from coord.infra.queues import task_queue_pollers
from coord.models.wire.contract import ledger_task_queue
from tests.agents import Execution, demo_agents_file

COORD = str(Path(sys.executable).parent / "coord")
ROOT = str(Path(__file__).resolve().parents[1])


def stop_process_group(process: "subprocess.Popen[bytes]", timeout: float = 15) -> None:
    """SIGTERM the process and its children (a `coord server`'s Temporal binary), SIGKILL them
    if they are still there after `timeout`."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class WorkerProcess:
    """One `coord worker` process serving `task_queue` on the client's server (its workflows
    too, unless `workflows` is false: run with --no-workflows)."""

    def __init__(
        self,
        process: "subprocess.Popen[bytes]",
        client: Client,
        task_queue: str,
        workflows: bool = True,
    ) -> None:
        self.process = process
        self.client = client
        self.task_queue = task_queue
        self.workflows = workflows
        self.identity = f"{process.pid}@{socket.gethostname()}"

    @classmethod
    async def start(
        cls,
        client: Client,
        task_queue: str,
        log: Path,
        *args: str,
        polls: str | None = None,
        demo: bool = True,
    ) -> "WorkerProcess":
        """Start it and return once it polls the queue, or the queue `polls` names (an agent's,
        for a worker run with --no-workflows); the SDK's default identity is pid@host. Without
        `demo`, it serves only the agents its `--agents` file declares (which may name code in
        `tests`)."""
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": client.service_client.config.target_host,
            "TEMPORAL_NAMESPACE": client.namespace,
            "COORD_TASK_QUEUE": task_queue,
            "COORD_DEMO_AGENTS": "1" if demo else "",
            "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        }
        with log.open("ab") as output:
            process = subprocess.Popen(
                [COORD, "worker", *args],
                env=env,
                stdout=output,
                stderr=output,
                start_new_session=True,
            )
        worker = cls(process, client, task_queue, workflows="--no-workflows" not in args)
        await worker.wait_polling(client, polls or task_queue)
        return worker

    async def wait_polling(self, client: Client, task_queue: str, timeout: float = 120) -> None:
        """Until the server lists the worker among the queue's pollers; a description the
        server could not give this time (one came back cancelled under load) is asked again."""

        async def polling() -> None:
            while self.identity not in await pollers_or_none(client, task_queue):
                if self.process.poll() is not None:
                    raise AssertionError(f"worker exited with {self.process.returncode}")
                await asyncio.sleep(0.1)

        await asyncio.wait_for(polling(), timeout)

    async def kill(self) -> None:
        """SIGKILL: the process (and any agent child it started) ends on the spot. The server
        is then told that the workflows it cached are gone with it (`forget_sticky_queues`)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        if self.workflows:
            await forget_sticky_queues(self.client, self.task_queue)

    def stop(self) -> None:
        stop_process_group(self.process)


async def forget_sticky_queues(client: Client, task_queue: str) -> None:
    """The running workflows of the deployment on `task_queue` (and its ledgers) get their next
    workflow task on the queue itself instead of the sticky queue of the worker that cached
    them, as the SDK's graceful shutdown has the server do. A killed worker cannot: the server
    would find out only when a task it put on the dead worker's queue waited there for the
    sticky timeout (the SDK's 10 s), while a new worker, the same one anyway, replays from
    the whole history either way. A test that kills a worker proves what a new worker does
    with its runs, not how long Temporal takes to notice the old one is gone."""
    queues = " OR ".join(f"TaskQueue = '{q}'" for q in (task_queue, ledger_task_queue(task_queue)))
    async for execution in client.list_workflows(f"ExecutionStatus = 'Running' AND ({queues})"):
        request = ResetStickyTaskQueueRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=execution.id, run_id=execution.run_id),
        )
        try:
            await client.workflow_service.reset_sticky_task_queue(request)
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:  # it ended in the meantime
                raise


TRANSIENT = frozenset({RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE})


async def pollers_or_none(client: Client, task_queue: str) -> set[str]:
    """The queue's pollers, or none when the server's answer failed in passing (`TRANSIENT`)."""
    try:
        return await task_queue_pollers(client, task_queue)
    except RPCError as error:
        if error.status not in TRANSIENT:
            raise
        return set()


@asynccontextmanager
async def worker_process(
    client: Client, task_queue: str, log: Path, *args: str, demo: bool = True
) -> AsyncIterator[WorkerProcess]:
    """A worker process that is gone when the block ends, whatever happened in it."""
    worker = await WorkerProcess.start(client, task_queue, log, *args, demo=demo)
    try:
        yield worker
    finally:
        worker.stop()


async def run(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *argv,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def server_env(env: WorkflowEnvironment, task_queue: str) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "COORD_TASK_QUEUE": task_queue,
    }


def demo_agents_worker(
    client: Client, task_queue: str, tmp_path: Path, execution: Execution
) -> "AbstractAsyncContextManager[WorkerProcess]":
    """A worker process serving the saga's and the user-story chain's agents, each declared
    `execution`: `remote` for an activity task (what the server hands to the next worker when
    this one dies), `local` for a local activity of its workflow. Its log is
    `worker-<execution>.log` in `tmp_path`, beside its agents file."""
    agents = demo_agents_file(tmp_path / f"agents-{execution}.json", execution)
    log = tmp_path / f"worker-{execution}.log"
    return worker_process(client, task_queue, log, "--agents", str(agents), demo=False)
