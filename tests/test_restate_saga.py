"""The bench's optional peer comparison (bench/restate_saga.py): finding Restate where
`make bench-restate-setup` puts it, the server's settings, and, when it is installed, one saga
run through a real restate-server."""

import hashlib
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.restate_saga import (
    PLAN,
    SERVICE,
    Ports,
    demo_work,
    find_server,
    installed,
    restate_saga,
    restate_side,
    server_environment,
)
from coord.models.mesh.demo import FEATURE_DEPLOYMENT_AGENTS

RESTATE = installed()
needs_restate = pytest.mark.skipif(
    RESTATE is None, reason="restate-server or restate-sdk not installed (make bench-restate-setup)"
)


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\necho restate-server 9.9.9\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_server_npm_installed_is_found_before_one_on_the_path(tmp_path: Path) -> None:
    on_path = executable(tmp_path / "bin" / "restate-server")
    restate_dir = tmp_path / "restate"
    assert find_server(restate_dir, path=str(on_path.parent)) == on_path
    bundled = executable(
        restate_dir / "node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
    )
    assert find_server(restate_dir, path=str(on_path.parent)) == bundled


def test_without_a_server_restate_is_not_installed(tmp_path: Path) -> None:
    assert find_server(tmp_path, path=str(tmp_path)) is None
    assert installed(tmp_path, path=str(tmp_path)) is None


def test_the_server_listens_on_the_ports_given_and_sends_no_telemetry() -> None:
    env = server_environment(Ports(ingress=1, admin=2, fabric=3), {"HOME": "/root"})
    assert env["HOME"] == "/root"
    assert env["RESTATE_INGRESS__BIND_ADDRESS"] == "127.0.0.1:1"
    assert env["RESTATE_ADMIN__BIND_ADDRESS"] == "127.0.0.1:2"
    assert env["RESTATE_BIND_ADDRESS"] == "127.0.0.1:3"
    assert env["RESTATE_DISABLE_TELEMETRY"] == "true"


def test_a_step_does_the_demo_agents_work() -> None:
    done = demo_work("Built", "inv-1/BuildArtifact", {"feature": "x"})
    ref = hashlib.sha256(b"inv-1/BuildArtifact").hexdigest()[:8]
    assert done == {"summary": "Built", "ref": ref, "feature": "x"}


async def journal(admin: str, saga_id: str) -> list[dict[str, Any]]:
    """The saga's journal, from the admin API's SQL introspection."""
    query = (
        "SELECT j.entry_type, j.name FROM sys_journal j JOIN sys_invocation i ON j.id = i.id "
        f"WHERE i.target_service_key = '{saga_id}' ORDER BY j.index"
    )
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{admin}/query", json={"query": query}, headers={"accept": "application/json"}
        )
    answer.raise_for_status()
    rows: list[dict[str, Any]] = answer.json()["rows"]
    return rows


@needs_restate
async def test_one_saga_runs_its_five_steps_each_a_durable_step_on_restate() -> None:
    assert RESTATE is not None
    payload = {"feature": "checkout", "version": "2.0.0"}
    async with restate_saga(RESTATE, payload) as saga:
        assert await saga.run_one("saga-a") is None
        answer = await saga.http.post(f"{saga.ingress}/{SERVICE}/saga-b/run", json=payload)
        entries = await journal(saga.admin, "saga-b")
    steps = answer.json()
    assert [step["summary"] for step in steps] == [FEATURE_DEPLOYMENT_AGENTS[n] for n, _ in PLAN]
    assert all(step["feature"] == "checkout" for step in steps)
    runs = [entry["name"] for entry in entries if entry["entry_type"] == "Command: Run"]
    assert runs == [name for name, _ in PLAN]


@needs_restate
async def test_the_bench_side_names_restates_versions() -> None:
    async with restate_side({"feature": "x"}) as (run_one, told):
        assert run_one is not None
        assert await run_one("saga-c") is None
    assert RESTATE is not None and RESTATE.describe() in told


async def test_a_bench_without_restate_wanted_runs_no_restate_side() -> None:
    async with restate_side({"feature": "x"}, wanted=False) as (run_one, told):
        assert run_one is None
    assert told == "restate: not run"
