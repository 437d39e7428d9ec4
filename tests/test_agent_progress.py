"""Agents report progress through their run's heartbeat (AgentSummary: a few words,
"Reading runAgent.ts"), and the `plan_progress` reader sees it on the real server while the agent
runs: a python agent (async, or a plain `def` in a thread), a shell agent's `progress:` lines,
an agent retrying (its attempt and last failure), and details that are not ours (ignored)."""

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from coord.activities.plan.progress import PlanProgressReader
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import (
    MAX_PROGRESS,
    AgentContext,
    AgentProgress,
    AgentRegistry,
    ProgressReporter,
)
from coord.models.plan.spec import ActivityProgress
from coord.models.saga.spec import SagaSpec, SagaStatus
from coord.starter import api
from coord.worker import build_worker
from tests.agents import PYTHON, registry
from tests.helpers import eventually

READING, FIXING = "Reading runAgent.ts", "Fixing null check"


def saga(agent: str, **step: Any) -> SagaSpec:
    """A one-step saga: the simplest real workflow that runs an agent through `run_agent`. Its
    step is watched by heartbeats, so its python agent runs as an activity task (a local
    activity sends none) and its progress reaches the server."""
    return SagaSpec.model_validate(
        {
            "saga_id": f"progress-{uuid.uuid4().hex[:8]}",
            "steps": [{"name": "Step", "agent": agent, "heartbeat_timeout": "5s", **step}],
        }
    )


async def read_progress(client: Client, workflow_id: str) -> list[ActivityProgress]:
    """The reader, run as the activity it is, against the real server."""
    return await ActivityEnvironment().run(PlanProgressReader(client).plan_progress, workflow_id)


async def shows(client: Client, workflow_id: str, **expected: Any) -> None:
    """Waits until the workflow's one pending activity reads as `expected`."""

    async def check() -> bool:
        pending = await read_progress(client, workflow_id)
        return len(pending) == 1 and all(
            getattr(pending[0], field) == value for field, value in expected.items()
        )

    await eventually(check, 20)


async def run_saga(
    client: Client,
    task_queue: str,
    agents: AgentRegistry,
    spec: SagaSpec,
    watch: Callable[[], Awaitable[None]],
) -> None:
    async with build_worker(client, task_queue, agents):
        handle = await api.start_saga(client, spec, queue=task_queue)
        await watch()
        state = await asyncio.wait_for(api.saga_outcome(handle), 30)
    assert state.status == SagaStatus.COMPLETED


async def kept_after_a_later_beat(client: Client, workflow_id: str, summary: str) -> None:
    """The server keeps only the last heartbeat's details: once a keep-alive beat is recorded
    after the one that said `summary`, the reader must still read `summary`."""

    async def last_beat() -> datetime:
        described = await client.get_workflow_handle(workflow_id).describe()
        return described.raw_description.pending_activities[0].last_heartbeat_time.ToDatetime()

    said = await last_beat()

    async def beaten_again() -> bool:
        return await last_beat() > said

    await eventually(beaten_again, 20)
    [pending] = await read_progress(client, workflow_id)
    assert pending.progress == summary


class SteppedAgent:
    """Reports READING, then FIXING, each once the test has seen the one before; keeps beating
    in between (as a long agent does), which must not erase what it said."""

    def __init__(self) -> None:
        self.next_step = threading.Event()
        self.done = threading.Event()

    async def run_async(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        for summary, step in ((READING, self.next_step), (FIXING, self.done)):
            context.progress(summary)
            while not step.is_set():
                context.heartbeat()
                await asyncio.sleep(0.1)
        return {"ok": True}

    def run_sync(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        for summary, step in ((READING, self.next_step), (FIXING, self.done)):
            context.progress(summary)
            while not step.wait(0.1):
                context.heartbeat()
        return {"ok": True}


async def test_a_python_agents_progress_is_visible_while_it_runs(
    client: Client, task_queue: str
) -> None:
    agent = SteppedAgent()
    agents = AgentRegistry()
    agents.register("stepped")(agent.run_async)
    spec = saga("stepped")

    async def watch() -> None:
        await shows(client, spec.workflow_id, progress=READING, attempt=1, last_failure=None)
        await kept_after_a_later_beat(client, spec.workflow_id, READING)
        agent.next_step.set()
        await shows(client, spec.workflow_id, progress=FIXING)
        agent.done.set()

    await run_saga(client, task_queue, agents, spec, watch)


STEPPED = SteppedAgent()


def stepped_in_a_thread(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """A plain `def` agent (`kind: python`): the worker runs it in a thread."""
    return STEPPED.run_sync(event, context)


async def test_a_plain_def_agent_reports_progress_from_its_thread(
    client: Client, task_queue: str
) -> None:
    """The SDK's heartbeat cannot be called from another thread; the context hands it over."""
    agent = STEPPED
    callable_ = f"{__name__}:stepped_in_a_thread"
    agents = registry(stepped={"kind": "python", "callable": callable_})
    spec = saga("stepped")

    async def watch() -> None:
        await shows(client, spec.workflow_id, progress=READING)
        agent.next_step.set()
        await shows(client, spec.workflow_id, progress=FIXING)
        agent.done.set()

    await run_saga(client, task_queue, agents, spec, watch)


STEPPED_ON_ITS_LOOP = SteppedAgent()


async def stepped_on_its_own_loop(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """An `async def` agent (`kind: python`): the worker runs it on an event loop of its own."""
    return await STEPPED_ON_ITS_LOOP.run_async(event, context)


async def test_an_async_def_agent_reports_progress_from_its_own_loop(
    client: Client, task_queue: str
) -> None:
    agent = STEPPED_ON_ITS_LOOP
    callable_ = f"{__name__}:stepped_on_its_own_loop"
    agents = registry(stepped={"kind": "python", "callable": callable_})
    spec = saga("stepped", heartbeat_timeout="2s")

    async def watch() -> None:
        await shows(client, spec.workflow_id, progress=READING)
        await kept_after_a_later_beat(client, spec.workflow_id, READING)
        agent.next_step.set()
        await shows(client, spec.workflow_id, progress=FIXING)
        agent.done.set()

    await run_saga(client, task_queue, agents, spec, watch)


SHELL_STEPS = """
import json, os, sys, time
for summary, flag in (("Reading runAgent.ts", sys.argv[1]), ("Fixing null check", sys.argv[2])):
    print("noise before", file=sys.stderr)
    print("progress: " + summary, file=sys.stderr, flush=True)
    while not os.path.exists(flag):
        time.sleep(0.05)
print(json.dumps({"ok": True}))
"""


async def test_a_shell_agents_progress_lines_are_visible_while_it_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    agents = registry(
        steps={"kind": "shell", "argv": [PYTHON, "-c", SHELL_STEPS, str(first), str(second)]}
    )
    spec = saga("steps")

    async def watch() -> None:
        await shows(client, spec.workflow_id, progress=READING)
        first.touch()
        await shows(client, spec.workflow_id, progress=FIXING)
        second.touch()

    await run_saga(client, task_queue, agents, spec, watch)


async def test_a_retried_agent_shows_its_attempt_and_last_failure(
    client: Client, task_queue: str
) -> None:
    release = asyncio.Event()

    async def flaky(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        if context.attempt == 1:
            raise RuntimeError("disk full on attempt 1")
        context.progress("Trying again")
        await release.wait()
        return {"attempt": context.attempt}

    agents = AgentRegistry()
    agents.register("flaky")(flaky)
    spec = saga("flaky", retry={"initial_delay": "100ms"})

    async def watch() -> None:
        await shows(
            client,
            spec.workflow_id,
            progress="Trying again",
            attempt=2,
            last_failure="disk full on attempt 1",
        )
        release.set()

    await run_saga(client, task_queue, agents, spec, watch)


async def test_heartbeat_details_of_another_shape_read_as_no_progress(
    client: Client, task_queue: str
) -> None:
    beating, release = asyncio.Event(), asyncio.Event()

    async def foreign(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        while not release.is_set():
            activity.heartbeat({"percent": 40}, "free text")
            beating.set()
            await asyncio.sleep(0.1)
        return {}

    agents = AgentRegistry()
    agents.register("foreign")(foreign)
    spec = saga("foreign")

    async def watch() -> None:
        await asyncio.wait_for(beating.wait(), 20)
        await shows(client, spec.workflow_id, progress=None, attempt=1)
        release.set()

    await run_saga(client, task_queue, agents, spec, watch)


async def test_an_unknown_workflow_has_no_progress(client: Client) -> None:
    assert await read_progress(client, f"plan-nowhere-{uuid.uuid4().hex[:8]}") == []


def test_progress_is_truncated_and_a_keepalive_beat_keeps_it() -> None:
    sent: list[tuple[Any, ...]] = []
    reporter = ProgressReporter(lambda *details: sent.append(details))
    context = AgentContext(agent="a", attempt=1, idempotency_key="k", reporter=reporter)
    context.heartbeat()
    context.progress("  " + "x" * 500)
    context.heartbeat()
    truncated = AgentProgress(progress="x" * MAX_PROGRESS)
    assert sent == [(), (truncated,), (truncated,)]
