"""Agents by kind (python, shell, http) run inside a real activity context, and a shell agent in
a saga on the real dev server; each failure comes out typed, retryable or not."""

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.exceptions import CancelledError
from temporalio.testing import ActivityEnvironment

from coord.activities.kinds import load_agents
from coord.activities.mesh.run_agent import AgentActivities
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry, AgentRequest
from coord.models.saga.spec import SagaSpec, SagaStatus
from coord.models.wire.specs import SpecError
from coord.starter import api
from coord.worker import build_worker
from tests.agents import PYTHON, failure_of, gone, registry, run

ECHO = "import json,sys; e=json.load(sys.stdin); print(json.dumps({'echo': e['payload']}))"


async def python_agent(event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
    return {"seen": event.event.type, "key": context.idempotency_key}


async def test_shell_agent_gets_the_event_on_stdin_and_never_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    hostile = {"text": f"$(touch {marker}); rm -rf x `touch {marker}` '\"; echo hi"}
    result = await run(
        registry(echo={"kind": "shell", "argv": [PYTHON, "-c", ECHO]}), "echo", hostile
    )
    assert result.data == {"echo": hostile}
    assert not marker.exists()
    assert result.metadata["duration_ms"] > 0


@pytest.mark.parametrize(
    ("code", "kind", "retryable"), [(3, "temporary_failure", True), (65, "invalid_payload", False)]
)
async def test_shell_exit_codes_are_classified(code: int, kind: str, retryable: bool) -> None:
    script = f"import sys; print('boom', file=sys.stderr); sys.exit({code})"
    error = await failure_of(registry(x={"kind": "shell", "argv": [PYTHON, "-c", script]}), "x")
    assert (error.type, error.non_retryable) == (kind, not retryable)
    assert f"exited {code}: boom" in error.message


async def test_shell_output_must_be_a_json_object() -> None:
    error = await failure_of(registry(x={"kind": "shell", "argv": ["echo", "not json"]}), "x")
    assert (error.type, error.non_retryable) == ("invalid_payload", True)


async def test_a_shell_program_that_cannot_start_fails_for_good_naming_it(tmp_path: Path) -> None:
    """Missing or not executable, it would be so on a retry too: `invalid_payload`, not the
    OSError's class name, which every retry policy took for a transient failure."""
    script = tmp_path / "tool.sh"
    script.write_text("#!/bin/sh\necho '{}'\n")  # not executable
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "missing": ({"argv": ["/nonexistent/tool"]}, "its program /nonexistent/tool is not there"),
        "on no path": ({"argv": ["no-such-tool"]}, "its program no-such-tool is not there"),
        "not executable": (
            {"argv": [str(script)]},
            f"its program {script} cannot be run (Permission denied)",
        ),
        "no cwd": (
            {"argv": [PYTHON, "-c", ECHO], "cwd": str(tmp_path / "gone")},
            f"its cwd {tmp_path / 'gone'} is not there",
        ),
    }
    for name, (declared, said) in cases.items():
        error = await failure_of(registry(x={"kind": "shell", **declared}), "x")
        assert (error.type, error.non_retryable) == ("invalid_payload", True), name
        assert error.message == (
            f"shell agent cannot start: {said} on this worker; install it or fix the agent's "
            "declaration (argv, cwd)"
        ), name


SPAWNER = (
    "import subprocess,sys,time; p=subprocess.Popen(['sleep','1000']); "
    "open(sys.argv[1],'w').write(str(p.pid)); time.sleep(1000)"
)


async def test_shell_agent_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    agents = registry(
        hang={"kind": "shell", "argv": [PYTHON, "-c", SPAWNER, str(pid_file)], "timeout": "1s"}
    )
    error = await failure_of(agents, "hang")
    assert (error.type, error.non_retryable) == ("timeout", False)
    await gone(int(pid_file.read_text()))


async def test_cancelled_shell_agent_has_its_process_group_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    agents = registry(hang={"kind": "shell", "argv": [PYTHON, "-c", SPAWNER, str(pid_file)]})
    env = ActivityEnvironment()
    event = EventEnvelope.new("Work", "/test")
    running = asyncio.create_task(
        env.run(AgentActivities(agents).run_agent, AgentRequest(agent="hang", event=event))
    )
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    env.cancel()
    with pytest.raises((CancelledError, asyncio.CancelledError)):
        await running
    await gone(int(pid_file.read_text()))


class Service(BaseHTTPRequestHandler):
    """A real HTTP service on loopback: the path picks the answer."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/hang":
            time.sleep(6)
        status = {"/ok": 200, "/bad": 400, "/auth": 401, "/busy": 429, "/down": 503}.get(
            self.path, 200
        )
        body = json.dumps({"token": self.headers.get("X-Token")}).encode()
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", "7")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def service() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


async def test_http_agent_success_sends_headers_from_the_environment(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_TOKEN", "s3cret")
    agents = registry(
        {"secrets": ["TEST_TOKEN"]},
        ok={"kind": "http", "url": f"{service}/ok", "headers_from_env": {"X-Token": "TEST_TOKEN"}},
    )
    result = await run(agents, "ok")
    assert result.data == {"token": "s3cret"}


@pytest.mark.parametrize(
    ("path", "kind", "retryable", "delay"),
    [
        ("/bad", "invalid_payload", False, None),
        ("/auth", "unauthorized", False, None),
        ("/busy", "temporary_failure", True, timedelta(seconds=7)),
        ("/down", "temporary_failure", True, None),
        ("/hang", "timeout", True, None),
    ],
)
async def test_http_statuses_are_classified(
    service: str, path: str, kind: str, retryable: bool, delay: timedelta | None
) -> None:
    agents = registry(x={"kind": "http", "url": f"{service}{path}", "timeout": "2s"})
    error = await failure_of(agents, "x")
    assert (error.type, error.non_retryable, error.next_retry_delay) == (kind, not retryable, delay)


async def test_http_connection_refused_is_temporary() -> None:
    error = await failure_of(registry(x={"kind": "http", "url": "http://127.0.0.1:9/x"}), "x")
    assert (error.type, error.non_retryable) == ("temporary_failure", False)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://", "names no host"),
        ("http:///path", "names no host"),
        ("http://host:abc/x", "Port could not be cast"),
        ("http://[::1/x", "Invalid IPv6 URL"),
        ("http://exa mple.com/x", "'exa mple.com' is not a host name"),
    ],
)
def test_a_malformed_http_url_is_refused_when_the_agents_load(url: str, why: str) -> None:
    """Sent, it failed as an untyped `InvalidURL` or a `temporary_failure`, retried for
    nothing: no retry makes it a URL."""
    with pytest.raises(ValidationError, match=why) as refused:
        registry(x={"kind": "http", "url": url})
    assert "url" in str(refused.value)


async def test_python_agents_load_from_a_file_and_a_bad_path_is_refused(tmp_path: Path) -> None:
    good = tmp_path / "agents.yaml"
    good.write_text(
        "agents:\n  py:\n    kind: python\n    callable: tests.test_agent_runs:python_agent\n"
    )
    result = await run(load_agents(good, AgentRegistry()), "py")
    assert result.data["seen"] == "Work"
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents:\n  py:\n    kind: python\n    callable: tests.nowhere:agent\n")
    with pytest.raises(SpecError, match=r"agents\.py\.callable: cannot import"):
        load_agents(bad, AgentRegistry())


def test_the_example_agents_file_loads() -> None:
    names = set(
        load_agents(Path(__file__).parent.parent / "examples" / "agents.yaml", AgentRegistry())
    )
    assert names == {"summarize", "lint", "review", "judge"}


@pytest.mark.parametrize(
    ("code", "status", "attempts"), [(0, SagaStatus.COMPLETED, 1), (65, SagaStatus.COMPENSATED, 1)]
)
async def test_shell_agent_in_a_saga_on_the_real_server(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    code: int,
    status: SagaStatus,
    attempts: int,
) -> None:
    attempts_file = tmp_path / "attempts"
    script = f"import sys; open(sys.argv[1], 'a').write('x'); sys.exit({code})"
    agents = registry(step={"kind": "shell", "argv": [PYTHON, "-c", script, str(attempts_file)]})
    spec = SagaSpec.model_validate(
        {"saga_id": f"shell-{uuid.uuid4().hex[:8]}", "steps": [{"name": "Step", "agent": "step"}]}
    )
    async with build_worker(client, task_queue, agents):
        state = await asyncio.wait_for(
            api.saga_outcome(await api.start_saga(client, spec, queue=task_queue)), 30
        )
    assert state.status == status
    assert len(attempts_file.read_text()) == attempts, "a non-retryable exit is not retried"


async def test_idempotency_key_is_stable_across_retries(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    script = (
        "import os,sys; f=open(sys.argv[1],'a'); "
        "f.write(os.environ['COORD_IDEMPOTENCY_KEY']+'\\n'); f.close(); "
        "sys.exit(3 if os.environ['COORD_ATTEMPT'] == '1' else 0)"
    )
    agents = registry(step={"kind": "shell", "argv": [PYTHON, "-c", script, str(keys)]})
    spec = SagaSpec.model_validate(
        {
            "saga_id": f"idem-{uuid.uuid4().hex[:8]}",
            "steps": [{"name": "Step", "agent": "step", "retry": {"initial_delay": "100ms"}}],
        }
    )
    async with build_worker(client, task_queue, agents):
        state = await asyncio.wait_for(
            api.saga_outcome(await api.start_saga(client, spec, queue=task_queue)), 30
        )
    assert state.status == SagaStatus.COMPLETED
    first, second = keys.read_text().splitlines()
    assert first == second and first.startswith(f"saga-{spec.saga_id}/")
