"""`kind: python` agents declared by `callable:`: an `async def` runs on an event loop of its own,
in a thread of its own, watched for a loop that stops turning (`agent_blocked`); a plain `def`
runs in a thread. On the real dev server, a blocking async agent fails while a shell agent
beside it on the same worker runs in its normal time; the rest needs no server."""

import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client

from coord.activities.kinds import load_agents
from coord.activities.kinds.python import python_agent
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import AgentsFile, PythonAgent
from coord.models.saga.spec import SagaStatus
from coord.models.wire.contract import FailureType
from coord.models.wire.specs import SpecError, parse_model
from coord.worker import build_worker
from tests.agents import failure_of, registry, run
from tests.helpers import eventually
from tests.test_agent_trust import _started, start_saga_as_json, write_agents_file

BLOCKING_S = 20
"""How long the blocking agent holds its loop: far past its `blocked_after` and the shell
agent's run, so a worker whose loop it held could not hide it."""


async def blocking_async_agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """An `async def` agent that blocks instead of awaiting (a synchronous sleep)."""
    time.sleep(BLOCKING_S)
    return {"blocked": True}


async def test_a_blocking_async_agent_fails_agent_blocked_while_a_shell_agent_beside_it_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The shell agent (a 2 s run, heartbeat timeout 2 s) shares the worker process with the
    blocked agent; on the worker's own loop the block held it for 20 s, and its heartbeats."""
    agents = load_agents(
        write_agents_file(
            tmp_path / "agents.yaml",
            "agents:\n"
            "  blocker:\n"
            "    kind: python\n"
            f"    callable: '{__name__}:blocking_async_agent'\n"
            "    blocked_after: 2s\n"
            "    execution: remote\n"  # an activity task: the test sees it pending
            "  beat: {kind: shell, argv: [sleep, '2']}\n",
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
    async with build_worker(client, task_queue, agents):
        blocker = asyncio.create_task(start_saga_as_json(client, task_queue, blocked))
        await eventually(lambda: _started(client, f"saga-{blocked['saga_id']}"))
        started = time.monotonic()
        healthy = await start_saga_as_json(client, task_queue, beating)
        took = time.monotonic() - started
        failed = await blocker
    assert healthy.status == SagaStatus.COMPLETED, healthy.failure_reason
    assert took < BLOCKING_S / 2, f"the shell agent's saga took {took:.1f}s"
    assert failed.status != SagaStatus.COMPLETED
    assert failed.failure_reason is not None and "agent_blocked" in failed.failure_reason
    assert "has not turned for" in failed.failure_reason


def declared(callable_: str, **fields: Any) -> AgentRegistry:
    return registry(agent={"kind": "python", "callable": f"{__name__}:{callable_}", **fields})


async def briefly_blocking(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    time.sleep(3)
    return {}


async def test_a_blocked_loop_is_agent_blocked_not_retried() -> None:
    started = time.monotonic()
    error = await failure_of(declared("briefly_blocking", blocked_after="1s"), "agent")
    assert (error.type, error.non_retryable) == (FailureType.AGENT_BLOCKED, True)
    assert error.message.startswith("agent: its event loop has not turned for")
    assert "blocked_after 1s" in error.message
    assert time.monotonic() - started < 2.5, "failed at the limit, not at the block's end"


AWAITED: dict[str, Any] = {}


async def awaiting(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """Awaits for longer than its `blocked_after` (its loop turns), reports progress from its
    own loop, and sees its activity's context."""
    loop = asyncio.get_running_loop()
    AWAITED.update(thread=threading.get_ident(), loop=loop, workflow=activity.info().workflow_id)
    context.progress("waiting")
    await asyncio.sleep(1.5)
    return {"slept": True, "attempt": context.attempt}


async def test_an_awaiting_agent_runs_on_a_loop_and_thread_of_its_own() -> None:
    result = await run(declared("awaiting", blocked_after="1s"), "agent")
    assert result.data == {"slept": True, "attempt": 1}
    assert AWAITED["thread"] != threading.get_ident()
    assert AWAITED["loop"] is not asyncio.get_running_loop()

    async def closed() -> bool:  # right after it handed its result over
        return bool(AWAITED["loop"].is_closed())

    await eventually(closed, timeout=10)
    assert AWAITED["workflow"] == "test"


async def failing(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    raise RuntimeError("disk full")


async def test_an_async_agents_error_is_the_runs_as_before() -> None:
    error = await failure_of(declared("failing"), "agent")
    assert (error.type, error.message, error.non_retryable) == ("RuntimeError", "disk full", False)


CLEANED = threading.Event()


async def cleaning_up(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    try:
        await asyncio.sleep(60)
    finally:
        await asyncio.sleep(0.1)  # its cleanup may await, on its own loop
        CLEANED.set()
    return {}


async def test_a_cancel_reaches_the_agent_and_waits_for_its_cleanup() -> None:
    agent = python_agent("agent", PythonAgent(kind="python", callable=f"{__name__}:cleaning_up"))
    context = AgentContext(agent="agent", attempt=1, idempotency_key="k")
    running = asyncio.ensure_future(agent(EventEnvelope.new("Work", "/test"), context))
    await asyncio.sleep(0.3)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert CLEANED.is_set()


async def trivial(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    return {"ok": True}


async def test_a_normal_async_agent_costs_about_a_millisecond_more() -> None:
    """A thread and a loop per run: the median extra cost of 100 trivial runs stays small
    (about 0.5 ms on a quiet machine; bounded generously here for a loaded one)."""
    agent = python_agent("agent", PythonAgent(kind="python", callable=f"{__name__}:trivial"))
    event = EventEnvelope.new("Work", "/test")
    context = AgentContext(agent="agent", attempt=1, idempotency_key="k")

    async def median_s(call: Any) -> float:
        times = []
        for _ in range(100):
            started = time.perf_counter()
            await call(event, context)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    extra = await median_s(agent) - await median_s(trivial)
    assert extra < 0.02, f"{extra * 1000:.2f} ms per run"


def test_blocked_after_has_a_floor() -> None:
    with pytest.raises(SpecError, match=r"agents\.x\.blocked_after: .*at least 1s"):
        parse_model(
            AgentsFile,
            {"agents": {"x": {"kind": "python", "callable": "m:f", "blocked_after": "100ms"}}},
            "agents.yaml",
        )
