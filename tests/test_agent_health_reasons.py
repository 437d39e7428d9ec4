"""The agent kinds mark the failures that say the agent itself is unhealthy with a health reason
(`Health`), which the circuit breaker reads to tell them from the failures an agent answers with,
while the failure types users see stay as they were. Against small real servers and processes,
inside a real activity context; each failure as the breaker sees it (before `run_agent` wraps
it with its attempt)."""

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.breaker import BreakerConfig
from coord.models.wire.contract import failure_type_of, health_of
from tests.agents import PYTHON, registry
from tests.chat_server import Answer, api_error, chat_server, completion

KEY_ENV = "HEALTH_TEST_KEY"
STATUSES = {"/down": 503, "/busy": 429, "/slow-request": 408, "/bad": 400}


class Service(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/hang":
            time.sleep(6)
        body = json.dumps({"ok": True}).encode()
        self.send_response(STATUSES.get(self.path, 200))
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


async def judged(agents: AgentRegistry, agent: str = "x") -> tuple[str, str | None, bool]:
    """The failure the agent raised: its type, its health reason, and whether it counts against
    the default breaker."""
    return verdict(await raised(agents, agent))


def verdict(error: BaseException) -> tuple[str, str | None, bool]:
    kind, health = failure_type_of(error), health_of(error)
    return kind, health, BreakerConfig().counts(kind, health)


async def raised(agents: AgentRegistry, agent: str = "x") -> BaseException:
    """The failure the agent raised, as its run sees it."""
    run = agents.get(agent)

    async def call() -> BaseException:
        context = AgentContext(agent=agent, attempt=1, idempotency_key="key")
        try:
            await run(EventEnvelope.new("Work", "/test", payload={}), context)
        except Exception as error:
            return error
        raise AssertionError("the agent did not fail")

    return await ActivityEnvironment().run(call)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/down", ("temporary_failure", "http_5xx", True)),
        ("/busy", ("temporary_failure", "http_429", True)),
        ("/hang", ("timeout", "timeout", True)),
        ("/slow-request", ("temporary_failure", None, False)),
        ("/bad", ("invalid_payload", None, False)),
    ],
)
async def test_http_failures_say_whether_the_server_is_unwell(
    service: str, path: str, expected: tuple[str, str | None, bool]
) -> None:
    agents = registry(x={"kind": "http", "url": f"{service}{path}", "timeout": "2s"})
    assert await judged(agents) == expected


async def test_an_http_agent_past_its_timeout_says_it_as_a_spec_would(service: str) -> None:
    agents = registry(x={"kind": "http", "url": f"{service}/hang", "timeout": "1s"})
    error = await raised(agents)
    assert str(error) == f"timeout: {service}/hang did not answer within 1s", "not 0:00:01"


async def test_an_unreachable_http_agent_is_a_connection_failure() -> None:
    agents = registry(x={"kind": "http", "url": "http://127.0.0.1:9/x"})
    assert await judged(agents) == ("temporary_failure", "connection", True)


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "signal"),
        ("import sys; sys.exit(3)", None),
    ],
)
async def test_a_shell_agent_killed_by_a_signal_is_unwell_one_exiting_non_zero_is_not(
    script: str, expected: str | None
) -> None:
    agents = registry(x={"kind": "shell", "argv": [PYTHON, "-c", script]})
    assert await judged(agents) == ("temporary_failure", expected, expected is not None)


async def test_a_shell_agent_past_its_timeout_is_a_timeout() -> None:
    agents = registry(
        x={"kind": "shell", "argv": [PYTHON, "-c", "import time; time.sleep(30)"], "timeout": "1s"}
    )
    error = await raised(agents)
    assert verdict(error) == ("timeout", "timeout", True)
    assert str(error) == f"timeout: {PYTHON} ran past its 1s timeout", "not 0:00:01"


def llm(base_url: str, **fields: Any) -> AgentRegistry:
    declaration = {
        "kind": "llm",
        "base_url": base_url,
        "model": "test-model",
        "api_key_env": KEY_ENV,
        "prompt": "Review $payload",
        **fields,
    }
    return registry({"secrets": [KEY_ENV]}, x=declaration)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (api_error(503, "overloaded"), ("temporary_failure", "http_5xx", True)),
        (api_error(429, "slow down"), ("temporary_failure", "http_429", True)),
        (api_error(400, "bad request"), ("invalid_payload", None, False)),
        (Answer(body=completion("{}").body, delay=6), ("timeout", "timeout", True)),
        (completion("not json"), ("invalid_payload", None, False)),
    ],
)
async def test_llm_failures_say_whether_the_endpoint_is_unwell(
    monkeypatch: pytest.MonkeyPatch, answer: Answer, expected: tuple[str, str | None, bool]
) -> None:
    monkeypatch.setenv(KEY_ENV, "k")
    with chat_server(answer) as chat:
        assert await judged(llm(chat.url, timeout="2s")) == expected


async def test_an_unreachable_llm_endpoint_is_a_connection_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, "k")
    assert await judged(llm("http://127.0.0.1:9/v1")) == ("temporary_failure", "connection", True)
