"""Agents you can trust, tried as an attacker who can start or signal workflows would: a worker
runs only what it declares or explicitly allows, secrets stay with the worker and its declared
origins, and an agent cannot exhaust the worker's memory, outlive its run or freeze the loop."""

import asyncio
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment

from coord.activities.kinds import load_agents
from coord.activities.kinds.http import retry_after
from coord.activities.mesh.run_agent import AgentActivities
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry, AgentRequest
from coord.models.mesh.config import WorkerSettings
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.contract import DEAD_LETTER_WORKFLOW
from coord.models.wire.specs import SpecError
from coord.starter import api
from coord.starter.commands.common import check_agents
from coord.worker import build_worker, default_registry
from tests.agents import PYTHON, failure_of, gone, registry, run
from tests.helpers import eventually, parked, unserved_replays_end_soon

SECRET = "tok-" + uuid.uuid4().hex


def touching(marker: Path) -> dict[str, Any]:
    """An inline shell agent whose only effect is to create `marker`."""
    return {"kind": "shell", "argv": ["touch", str(marker)]}


async def start_saga_as_json(client: Client, task_queue: str, spec: dict[str, Any]) -> SagaState:
    """Plain JSON, as `temporal workflow start --type Saga --input ...` sends it."""
    handle = await client.start_workflow(
        "Saga", spec, id=f"saga-{spec['saga_id']}", task_queue=task_queue, result_type=SagaState
    )
    return await asyncio.wait_for(api.saga_outcome(handle), 30)


def inline_saga(marker: Path) -> dict[str, Any]:
    return {
        "saga_id": f"pwn-{uuid.uuid4().hex[:8]}",
        "agents": {"pwn": touching(marker)},
        "steps": [{"name": "Pwn", "agent": "pwn", "retry": {"max_retries": 0}}],
    }


async def test_inline_shell_agent_is_refused_by_a_default_worker(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    async with build_worker(client, task_queue):
        state = await start_saga_as_json(client, task_queue, inline_saga(marker))
    assert state.status == SagaStatus.COMPENSATED, "nothing ran, so nothing to undo"
    assert state.failure_reason is not None
    assert "inline agent 'pwn' (kind shell) is not allowed" in state.failure_reason
    assert "inline_agents: [shell]" in state.failure_reason, "it names what to configure"
    assert not marker.exists()


async def test_inline_shell_agent_runs_on_a_worker_that_allows_the_kind(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    allowing = AgentRegistry(WorkerSettings(inline_agents=["shell"]))
    async with build_worker(client, task_queue, allowing):
        state = await start_saga_as_json(client, task_queue, inline_saga(marker))
    assert state.status == SagaStatus.COMPLETED
    assert marker.exists()


async def test_inline_agent_in_a_chain_spec_is_refused_and_parked(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    spec = ChainSpec.model_validate(
        {
            "name": "pwn",
            "triggers": ["Go"],
            "alerts": None,
            "agents": {"pwn": touching(marker)},
            "subscriptions": [{"agent": "pwn", "events": "Go", "retry": {"max_retries": 0}}],
        }
    )
    correlation_id = f"pwn-{uuid.uuid4().hex[:8]}"
    go = EventEnvelope.new("Go", "/attacker", correlation_id=correlation_id)
    async with build_worker(client, task_queue):
        await api.publish(client, go, spec=spec, queue=task_queue)
        [entry] = await parked(client, task_queue, 1)
    assert entry.failure_type == "agent_not_allowed" and entry.target_agent == "pwn"
    assert not marker.exists()


async def test_a_planted_dead_letter_with_a_shell_agent_does_not_run_on_replay(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone who can start a workflow can park an entry; replaying it runs nothing foreign: an
    entry carrying a declaration is kept raw and cannot be replayed, and one naming an agent
    runs only what the worker (or the target's own spec) declares."""
    unserved_replays_end_soon(monkeypatch)
    marker = tmp_path / "pwned"
    now = datetime.now(UTC).isoformat()
    planted = {
        "event": EventEnvelope.new("Go", "/attacker").model_dump(mode="json"),
        "target_workflow": "saga-anything",
        "target_agent": "pwn",
        "agent_config": touching(marker),
        "replay": "run_agent",
        "failure_type": "temporary_failure",
        "message": "please replay me",
        "first_failed_at": now,
        "last_failed_at": now,
    }
    named = {key: value for key, value in planted.items() if key != "agent_config"}
    async with build_worker(client, task_queue):
        for letter, suffix in ((planted, "declared"), (named, "named")):
            await client.start_workflow(
                DEAD_LETTER_WORKFLOW, letter, id=f"dlq-{suffix}-{task_queue}", task_queue=task_queue
            )
        await parked(client, task_queue, 2)
        with pytest.raises(api.Undeliverable, match=r"holds no event to deliver .*; archive it"):
            await api.dlq_replay(client, f"dlq-declared-{task_queue}")
        replayed = await api.dlq_replay(client, f"dlq-named-{task_queue}")
    assert replayed.status == "parked"
    assert "pwn" in replayed.replays[-1].outcome, replayed.replays
    assert not marker.exists()


def write_agents_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_cli_check_applies_the_workers_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SagaSpec.model_validate(inline_saga(tmp_path / "x"))
    monkeypatch.delenv("COORD_AGENTS", raising=False)
    with pytest.raises(
        SpecError, match=r"saga\.yaml: agents\.pwn: inline agent 'pwn' \(kind shell"
    ):
        check_agents(Path("saga.yaml"), spec)
    allowing = write_agents_file(tmp_path / "a.yaml", "worker:\n  inline_agents: [shell]\n")
    monkeypatch.setenv("COORD_AGENTS", str(allowing))
    check_agents(Path("saga.yaml"), spec)


def test_the_python_api_checks_agents_by_the_same_rule_as_the_cli(tmp_path: Path) -> None:
    spec = SagaSpec.model_validate(inline_saga(tmp_path / "x"))
    with pytest.raises(
        SpecError, match=r"saga\.yaml: agents\.pwn: inline agent 'pwn' \(kind shell"
    ):
        api.check_agents("saga.yaml", spec, AgentRegistry())
    api.check_agents("saga.yaml", spec, AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    named = SagaSpec.model_validate({"saga_id": "s", "steps": [{"name": "A", "agent": "nobody"}]})
    with pytest.raises(SpecError, match=r"s\.yaml: steps\[0\]\.agent: unknown agent 'nobody'"):
        api.check_agents("s.yaml", named, AgentRegistry())


async def test_a_shell_child_sees_only_allow_listed_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEMPORAL_API_KEY", SECRET)
    monkeypatch.setenv("SHARED_SETTING", "shared")
    dump = "import json,os; print(json.dumps({'env': dict(os.environ)}))"
    agents = registry(
        {"child_env": ["SHARED_SETTING"]},
        env={"kind": "shell", "argv": [PYTHON, "-c", dump], "env": {"DECLARED": "yes"}},
    )
    seen = (await run(agents, "env")).data["env"]
    assert SECRET not in json.dumps(seen) and "TEMPORAL_API_KEY" not in seen
    assert seen["SHARED_SETTING"] == "shared" and seen["DECLARED"] == "yes"
    assert "PATH" in seen and "COORD_IDEMPOTENCY_KEY" in seen


def test_headers_from_env_reads_only_variables_named_as_secrets(tmp_path: Path) -> None:
    unnamed = write_agents_file(
        tmp_path / "agents.yaml",
        "agents:\n  review:\n    kind: http\n    url: http://127.0.0.1:1/\n"
        "    headers_from_env: {Authorization: TEMPORAL_API_KEY}\n",
    )
    with pytest.raises(SpecError) as refused:
        load_agents(unnamed, AgentRegistry())
    assert str(refused.value) == (
        f"{unnamed}: agents.review.headers_from_env: TEMPORAL_API_KEY is not named under "
        "worker.secrets; add it there to let agents read it"
    )
    leaking = write_agents_file(
        tmp_path / "leak.yaml", "worker:\n  secrets: [TOKEN]\n  child_env: [TOKEN]\n"
    )
    with pytest.raises(SpecError, match="TOKEN is named in secrets"):
        load_agents(leaking, AgentRegistry())


async def test_an_allowed_inline_http_agent_still_reads_only_named_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEMPORAL_API_KEY", SECRET)
    inline = {
        "kind": "http",
        "url": "http://127.0.0.1:9/",
        "headers_from_env": {"Authorization": "TEMPORAL_API_KEY"},
    }
    request = AgentRequest(agent="steal", event=EventEnvelope.new("Go", "/attacker"), config=inline)
    allowing = AgentRegistry(WorkerSettings(inline_agents=["http"]))
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(AgentActivities(allowing).run_agent, request)
    assert (refused.value.type, refused.value.non_retryable) == ("agent_not_allowed", True)
    assert "TEMPORAL_API_KEY" in refused.value.message and SECRET not in refused.value.message


def test_demo_agents_are_served_only_when_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COORD_DEMO_AGENTS")
    monkeypatch.delenv("COORD_AGENTS", raising=False)
    assert "DeployToProduction" not in default_registry()
    assert "DeployToProduction" in default_registry(demo_agents=True)
    monkeypatch.setenv("COORD_DEMO_AGENTS", "1")
    assert "DeployToProduction" in default_registry()
    monkeypatch.delenv("COORD_DEMO_AGENTS")
    own = write_agents_file(
        tmp_path / "agents.yaml",
        "agents:\n  DeployToProduction:\n    kind: shell\n    argv: [echo, '{}']\n",
    )
    assert list(default_registry(own)) == ["DeployToProduction"]
    with pytest.raises(SpecError, match=r"agents\.DeployToProduction: the name is taken"):
        default_registry(own, demo_agents=True)


async def test_a_spec_naming_a_demo_agent_fails_clearly_on_a_plain_worker(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COORD_DEMO_AGENTS")
    step = {"name": "DeployToProduction", "schedule_to_start_timeout": "2s"}
    spec = {"saga_id": f"plain-{uuid.uuid4().hex[:8]}", "steps": [step]}
    async with build_worker(client, task_queue):
        state = await start_saga_as_json(client, task_queue, spec)
    assert state.status == SagaStatus.COMPENSATED, "nothing ran, so nothing to undo"
    assert state.failure_reason is not None
    assert "agent unavailable" in state.failure_reason
    assert "--demo-agents for the demo agents" in state.failure_reason


# HTTP: two real servers under different host names (127.0.0.1 and 127.0.0.2).


@dataclasses.dataclass
class Received:
    path: str
    method: str
    body: bytes
    headers: Mapping[str, str]


def serve(host: str, answers: dict[str, tuple[int, dict[str, str]]]) -> tuple[str, list[Received]]:
    """A loopback server: `answers` maps a path to its status and headers (200 {} otherwise);
    it records every request it receives."""
    received: list[Received] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            received.append(Received(self.path, self.command, body, dict(self.headers)))
            status, headers = answers.get(self.path, (200, {}))
            payload = json.dumps({"path": self.path}).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_POST = do_GET = _answer

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    servers.append(server)
    return f"http://{host}:{server.server_address[1]}", received


servers: list[ThreadingHTTPServer] = []


@pytest.fixture(autouse=True)
def _stop_servers() -> Iterator[None]:
    yield
    while servers:
        servers.pop().shutdown()


def http_agent(url: str, **fields: Any) -> AgentRegistry:
    return registry(
        {"secrets": ["AGENT_TOKEN"]},
        x={"kind": "http", "url": url, "headers_from_env": {"X-Token": "AGENT_TOKEN"}, **fields},
    )


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AGENT_TOKEN", SECRET)
    return SECRET


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_not_followed_by_default(token: str, status: int) -> None:
    other, other_received = serve("127.0.0.2", {})
    first, _ = serve("127.0.0.1", {"/go": (status, {"Location": f"{other}/steal"})})
    error = await failure_of(http_agent(f"{first}/go"), "x")
    assert (error.type, error.non_retryable) == ("invalid_payload", True)
    assert f"answered {status} redirecting to {other}/steal" in error.message
    assert other_received == []


async def test_an_allowed_redirect_keeps_the_post_but_drops_secrets_across_hosts(
    token: str,
) -> None:
    other, other_received = serve("127.0.0.2", {})
    first, first_received = serve(
        "127.0.0.1",
        {"/go": (307, {"Location": "/moved"}), "/moved": (308, {"Location": f"{other}/final"})},
    )
    result = await run(http_agent(f"{first}/go", follow_redirects=True), "x", {"n": 1})
    assert result.data == {"path": "/final"}
    assert [r.headers.get("X-Token") for r in first_received] == [token, token], "same origin"
    [arrived] = other_received
    assert (arrived.method, json.loads(arrived.body)["payload"]) == ("POST", {"n": 1})
    assert "X-Token" not in arrived.headers and token not in json.dumps(arrived.headers)
    assert arrived.headers["Idempotency-Key"]


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_a_redirect_that_would_turn_the_post_into_a_get_is_a_failure(
    token: str, status: int
) -> None:
    other, other_received = serve("127.0.0.2", {})
    first, _ = serve("127.0.0.1", {"/go": (status, {"Location": f"{other}/ok"})})
    error = await failure_of(http_agent(f"{first}/go", follow_redirects=True), "x")
    assert error.type == "invalid_payload" and f"redirecting to {other}/ok" in error.message
    assert other_received == []


def test_retry_after_reads_both_forms_and_is_clamped() -> None:
    hour = timedelta(hours=1)
    assert retry_after("7", hour) == timedelta(seconds=7)
    assert retry_after("99999999999999", hour) == hour
    assert retry_after("9" * 5000, hour) == hour
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    delay = retry_after(soon, hour)
    assert delay is not None and timedelta(seconds=100) < delay <= timedelta(seconds=120)
    next_year = format_datetime(datetime.now(UTC) + timedelta(days=365), usegmt=True)
    assert retry_after(next_year, hour) == hour
    past = format_datetime(datetime.now(UTC) - timedelta(days=1), usegmt=True)
    assert retry_after(past, hour) is None
    assert retry_after("soon, maybe", hour) is None and retry_after("²", hour) is None


@pytest.mark.parametrize(
    "header",
    [
        "99999999999999",
        format_datetime(datetime.now(UTC) + timedelta(days=365), usegmt=True),
    ],
    ids=["seconds", "http-date"],
)
async def test_a_huge_retry_after_is_clamped_to_the_policys_max_delay(header: str) -> None:
    url, _ = serve("127.0.0.1", {"/busy": (429, {"Retry-After": header})})
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30))
    )
    request = AgentRequest(agent="x", event=EventEnvelope.new("Work", "/test"))
    agents = registry(x={"kind": "http", "url": f"{url}/busy"})
    with pytest.raises(ApplicationError) as raised:
        await env.run(AgentActivities(agents).run_agent, request)
    assert raised.value.type == "temporary_failure"
    assert raised.value.next_retry_delay == timedelta(seconds=30)


async def test_secrets_stay_out_of_the_history(client: Client, task_queue: str, token: str) -> None:
    url, received = serve("127.0.0.1", {})
    spec = SagaSpec.model_validate(
        {"saga_id": f"secret-{uuid.uuid4().hex[:8]}", "steps": [{"name": "Call", "agent": "x"}]}
    )
    async with build_worker(client, task_queue, http_agent(f"{url}/call")):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 30)
    assert state.status == SagaStatus.COMPLETED
    assert received[0].headers["X-Token"] == token
    assert token not in (await handle.fetch_history()).to_json()


async def test_secrets_stay_out_of_the_logs(token: str, caplog: pytest.LogCaptureFixture) -> None:
    url, received = serve("127.0.0.1", {"/denied": (401, {})})
    caplog.set_level(logging.DEBUG)
    error = await failure_of(http_agent(f"{url}/denied"), "x")
    assert received[0].headers["X-Token"] == token and error.type == "unauthorized"
    assert {"httpx", "httpcore.http11"} <= {r.name for r in caplog.records}, "they did log"
    assert token not in caplog.text and token not in error.message


# Shell agents: bounded output, no survivors.

SPAWN_AND_SUCCEED = (
    "import subprocess,sys; p=subprocess.Popen(['sleep','1000'], stdout=subprocess.DEVNULL, "
    "stderr=subprocess.DEVNULL); open(sys.argv[1],'w').write(str(p.pid)); print('{}')"
)


async def test_a_background_child_does_not_outlive_a_successful_run(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    agents = registry(x={"kind": "shell", "argv": [PYTHON, "-c", SPAWN_AND_SUCCEED, str(pid_file)]})
    result = await run(agents, "x")
    assert result.data == {}
    await gone(int(pid_file.read_text()))


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_output_past_the_limit_fails_the_run(stream: str) -> None:
    flood = f"import sys; sys.{stream}.write('x' * 3_000_000); sys.{stream}.flush()"
    error = await failure_of(registry(x={"kind": "shell", "argv": [PYTHON, "-c", flood]}), "x")
    assert (error.type, error.non_retryable) == ("invalid_payload", True)
    assert error.message == f"{PYTHON} {stream} passed the worker's 1048576-byte output limit"


async def test_the_output_limit_is_configurable() -> None:
    write = "print('{\"text\": \"' + 'x' * 5000 + '\"}')"
    agents = registry({"output_limit": "4KiB"}, x={"kind": "shell", "argv": [PYTHON, "-c", write]})
    error = await failure_of(agents, "x")
    assert "passed the worker's 4096-byte output limit" in error.message


async def test_a_failure_message_carries_a_bounded_tail_of_stderr() -> None:
    noisy = "import sys; sys.stderr.write('e' * 200_000); sys.exit(3)"
    error = await failure_of(registry(x={"kind": "shell", "argv": [PYTHON, "-c", noisy]}), "x")
    assert error.type == "temporary_failure" and len(error.message) < 1000


BLOCKING = threading.Event()
"""Set once `blocking_agent` runs (a local run of its saga: no pending activity to read)."""


def blocking_agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """A plain `def` agent that blocks: it must not freeze the worker's event loop."""
    BLOCKING.set()
    time.sleep(5)
    return {"blocked": True}


async def test_a_blocking_python_agent_does_not_starve_a_heartbeating_shell_agent(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agents = load_agents(
        write_agents_file(
            tmp_path / "agents.yaml",
            "agents:\n"
            "  blocker: {kind: python, callable: 'tests.test_agent_trust:blocking_agent'}\n"
            "  beat: {kind: shell, argv: [sleep, '3']}\n",
        ),
        AgentRegistry(),
    )
    blocked = {
        "saga_id": f"block-{uuid.uuid4().hex[:8]}",
        "steps": [{"name": "B", "agent": "blocker"}],
    }
    beating = {
        "saga_id": f"beat-{uuid.uuid4().hex[:8]}",
        "steps": [
            {"name": "H", "agent": "beat", "heartbeat_timeout": "2s", "retry": {"max_retries": 0}}
        ],
    }
    BLOCKING.clear()
    async with build_worker(client, task_queue, agents):
        blocker = asyncio.create_task(start_saga_as_json(client, task_queue, blocked))
        await eventually(_blocking)
        healthy = await start_saga_as_json(client, task_queue, beating)
        assert healthy.status == SagaStatus.COMPLETED, healthy.failure_reason
        assert (await blocker).status == SagaStatus.COMPLETED


async def _blocking() -> bool:
    """Whether the blocking agent runs: a python agent served by the saga's worker runs as a
    local activity, on that worker's threads as an activity task's run would, beside the shell
    agent's heartbeats."""
    return BLOCKING.is_set()


async def _started(client: Client, workflow_id: str) -> bool:
    """Whether the workflow's agent run is an activity task a worker has (an agent declared
    `execution: remote`)."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return bool(description.raw_description.pending_activities)
