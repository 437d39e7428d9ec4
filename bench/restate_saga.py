"""The Feature Deployment saga on Restate: the bench's optional peer comparison.

    make bench-restate-setup     # once: restate-sdk and hypercorn into .venv, restate-server
                                 # into bench/.restate/ (npm)
    .venv/bin/python -m bench.restate_saga [--sagas 10] [--concurrency 1]

The same five steps as bench/saga_bench.py's hand-written saga, in the same order, each doing
the demo agents' trivial work (a small dict holding a hash of the step's identity) as one
`ctx.run` (Restate's durable step, journaled by the server before the saga goes on), with the
same compensation list, pushed before the step it undoes and unwound in reverse on a terminal
failure; the steps retry as the spec's do (4 attempts, 1s doubling to 30s), the compensations
until they succeed. Restate has no per-step timeout, so the spec's are not carried over. The
saga is a Restate workflow keyed by its saga id, as a Temporal workflow is by its workflow id,
and runs through the ingress HTTP API, one request per saga, waiting for its result.

`restate_saga` starts restate-server in a temporary directory of its own (free ports, TCP only,
no telemetry) and serves the saga in this process with hypercorn (HTTP/2, as Restate calls its
services), so the saga's Python runs on the bench's event loop as the Temporal workers' do.
Nothing here is required: `installed()` says whether both parts are there, and the bench runs
without them. The SDK is imported only by `saga_workflow` and `restate_saga`.
"""

import argparse
import asyncio
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.rounds import RunOne, timed_runs
from coord.infra.process import exit_without_teardown
from coord.models.mesh.demo import FEATURE_DEPLOYMENT_AGENTS

ROOT = Path(__file__).resolve().parent.parent
RESTATE_DIR = ROOT / "bench" / ".restate"
"""Where `make bench-restate-setup` installs restate-server (npm's folder; ignored by git)."""
SERVER = "restate-server"
SDK = "restate-sdk"
SERVICE = "FeatureDeployment"
STARTUP_DEADLINE = 60.0
"""Seconds restate-server may take to answer on its ports and know the saga."""

PLAN: tuple[tuple[str, str | None], ...] = (
    ("BuildArtifact", None),
    ("RunTests", None),
    ("DeployToStaging", "RemoveFromStaging"),
    ("RunE2ETests", None),
    ("DeployToProduction", "RollbackProduction"),
)
"""The saga's steps in order, each with the compensation pushed before it runs (the
hand-written saga's order)."""

Payload = dict[str, Any]


@dataclass(frozen=True)
class RestateInstall:
    """Where restate-server is, and the versions of it and of the SDK (for the report)."""

    server: Path
    server_version: str
    sdk_version: str

    def describe(self) -> str:
        return f"restate-server {self.server_version}, restate-sdk {self.sdk_version}"


def find_server(restate_dir: Path = RESTATE_DIR, path: str | None = None) -> Path | None:
    """restate-server's binary: the one npm installed in `restate_dir` (the package's
    platform binary, not its node wrapper), else one on `path` (default $PATH)."""
    bundled = sorted(restate_dir.glob(f"node_modules/@restatedev/{SERVER}-*/bin/{SERVER}"))
    if bundled:
        return bundled[0]
    found = shutil.which(SERVER, path=path)
    return Path(found) if found else None


def installed(restate_dir: Path = RESTATE_DIR, path: str | None = None) -> RestateInstall | None:
    """Both parts, when restate-server is found and the SDK and hypercorn import; else None."""
    server = find_server(restate_dir, path)
    modules = ("restate", "hypercorn")
    if server is None or any(importlib.util.find_spec(name) is None for name in modules):
        return None
    answer = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=30)
    server_version = answer.stdout.strip().removeprefix(SERVER).strip() or "unknown"
    return RestateInstall(server, server_version, importlib.metadata.version(SDK))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Ports:
    """restate-server's three: its ingress, its admin API, its node-to-node fabric."""

    ingress: int
    admin: int
    fabric: int

    @classmethod
    def free(cls) -> "Ports":
        return cls(free_port(), free_port(), free_port())


def server_environment(ports: Ports, base: Mapping[str, str]) -> dict[str, str]:
    """restate-server's settings (its RESTATE_* variables): the ports, no telemetry."""
    return {
        **base,
        "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{ports.ingress}",
        "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{ports.admin}",
        "RESTATE_BIND_ADDRESS": f"127.0.0.1:{ports.fabric}",
        "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{ports.fabric}/",
        "RESTATE_DISABLE_TELEMETRY": "true",
    }


def demo_work(summary: str, identity: str, payload: Payload) -> Payload:
    """What a demo agent does (bench.saga_bench's `_done`): a summary, a hash of the step's
    identity, the input."""
    ref = hashlib.sha256(identity.encode()).hexdigest()[:8]
    return {"summary": summary, "ref": ref, **payload}


def saga_workflow() -> Any:
    """The saga as a Restate workflow (the SDK is imported here: it is optional)."""
    import restate

    saga = restate.Workflow(SERVICE)
    retry = restate.RunOptions[Payload](
        max_attempts=4,
        initial_retry_interval=timedelta(seconds=1),
        retry_interval_factor=2.0,
        max_retry_interval=timedelta(seconds=30),
    )
    undo = restate.RunOptions[Payload](max_retry_interval=timedelta(minutes=1))

    async def step(ctx: Any, name: str, payload: Payload, options: Any) -> Payload:
        identity = f"{ctx.request().id}/{name}"
        summary = FEATURE_DEPLOYMENT_AGENTS[name]
        result: Payload = await ctx.run_typed(name, demo_work, options, summary, identity, payload)
        return result

    @saga.main()
    async def run(ctx: restate.WorkflowContext, payload: Payload) -> list[Payload]:
        compensations: list[str] = []
        results: list[Payload] = []
        try:
            for name, compensation in PLAN:
                if compensation is not None:
                    compensations.append(compensation)
                results.append(await step(ctx, name, payload, retry))
        except restate.TerminalError:
            for compensation in reversed(compensations):
                await step(ctx, compensation, payload, undo)
            raise
        return results

    return saga


@asynccontextmanager
async def served(port: int) -> AsyncIterator[None]:
    """The saga's ASGI app, served by hypercorn on this event loop at `port`."""
    import hypercorn.asyncio
    import hypercorn.config
    import restate

    config = hypercorn.config.Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.loglevel = "WARNING"
    config.h2_max_concurrent_streams = 1000
    config.keep_alive_timeout = 3600
    stop = asyncio.Event()
    app = restate.app(services=[saga_workflow()])
    serving = asyncio.create_task(hypercorn.asyncio.serve(app, config, shutdown_trigger=stop.wait))
    try:
        yield
    finally:
        stop.set()
        await serving


async def until_answers(http: httpx.AsyncClient, url: str, method: str = "GET", **kw: Any) -> None:
    """Waits (STARTUP_DEADLINE at most) until `url` answers 2xx."""
    async with asyncio.timeout(STARTUP_DEADLINE):
        while True:
            try:
                answer = await http.request(method, url, **kw)
                if answer.is_success:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)


@dataclass(frozen=True)
class RestateSaga:
    """A running restate-server with the saga registered: `run_one` runs one saga."""

    http: httpx.AsyncClient
    ingress: str
    admin: str
    payload: Payload

    async def run_one(self, saga_id: str) -> str | None:
        answer = await self.http.post(f"{self.ingress}/{SERVICE}/{saga_id}/run", json=self.payload)
        if answer.is_success and len(answer.json()) == len(PLAN):
            return None
        return f"{saga_id}: HTTP {answer.status_code} {answer.text[:200]}"


async def start_server(install: RestateInstall, ports: Ports, base_dir: Path) -> Any:
    log = (base_dir / "restate-server.log").open("wb")
    args = ["--no-logo", "--listen-mode", "tcp", "--base-dir", str(base_dir)]
    return await asyncio.create_subprocess_exec(
        install.server,
        *args,
        "--node-name",
        "bench",
        env=server_environment(ports, os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )


async def stop_server(process: Any) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


@asynccontextmanager
async def restate_saga(install: RestateInstall, payload: Payload) -> AsyncIterator[RestateSaga]:
    """restate-server in a temporary directory, the saga served and registered (admin API
    POST /deployments), one saga run through to be sure the ingress routes to it."""
    ports, service_port = Ports.free(), free_port()
    admin, ingress = f"http://127.0.0.1:{ports.admin}", f"http://127.0.0.1:{ports.ingress}"
    with tempfile.TemporaryDirectory(prefix="bench-restate-") as base_dir:
        process = await start_server(install, ports, Path(base_dir))
        try:
            async with served(service_port), httpx.AsyncClient(timeout=60) as http:
                await until_answers(http, f"{admin}/health")
                deployment = {"uri": f"http://127.0.0.1:{service_port}", "force": True}
                await until_answers(http, f"{admin}/deployments", "POST", json=deployment)
                ready = f"{ingress}/{SERVICE}/bench-ready/run"
                await until_answers(http, ready, "POST", json=payload)
                yield RestateSaga(http, ingress, admin, payload)
        finally:
            await stop_server(process)


@asynccontextmanager
async def restate_side(
    payload: Payload, wanted: bool = True
) -> AsyncIterator[tuple[RunOne | None, str]]:
    """A bench's Restate side, when `wanted` and installed: its `run_one` (else None), and a
    line for the bench's report saying which versions ran, or why none did."""
    install = installed() if wanted else None
    if install is None:
        why = "not installed (optional: make bench-restate-setup)" if wanted else "not run"
        yield None, f"restate: {why}"
        return
    async with restate_saga(install, payload) as saga:
        yield saga.run_one, f"restate: {install.describe()}, the saga served in this process"


async def alone(sagas: int, concurrency: int, payload: Payload) -> int:
    """The saga alone on Restate: `sagas` of them, `concurrency` at once."""
    install = installed()
    if install is None:
        print("restate-server or restate-sdk is not installed: make bench-restate-setup")
        return 2
    async with restate_saga(install, payload) as saga:
        timed = await timed_runs("restate", saga.run_one, sagas, concurrency, 60.0)
    ordered = sorted(timed.latencies)
    p50 = 1000 * ordered[(len(ordered) - 1) // 2]
    print(f"{install.describe()}: {sagas / timed.wall:.1f} sagas/s, p50 {p50:.1f} ms")
    for failure in timed.failures[:5]:
        print(f"  {failure}", file=sys.stderr)
    return 1 if timed.failures else 0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sagas", type=int, default=10, help="sagas to run")
    parser.add_argument("--concurrency", type=int, default=1, help="sagas in flight at most")
    args = parser.parse_args(argv)
    if min(args.sagas, args.concurrency) < 1:
        parser.error("--sagas and --concurrency must be at least 1")
    payload = {"feature": "bench", "version": "1.0.0"}
    exit_without_teardown(lambda: asyncio.run(alone(args.sagas, args.concurrency, payload)))


if __name__ == "__main__":
    main()
