"""The circuit breaker on the real dev server, isolating an unhealthy agent without spreading a
failure that is not its own: runs of the real `run_agent` on the agent's own queue, driven by a
small workflow, against the agent's real `AgentLedger`.

An agent failing by its own input never opens it; an agent whose calls Temporal times out does
(the ledger counts the timeouts); a probe timing out re-opens it, a probe failing on its input
does not; and messages a ledger could not apply are refused while it keeps serving."""

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from coord.infra.ledgers import LedgerClient, read_ledgers
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry, AgentRequest, AgentResult
from coord.models.mesh.config import PythonAgent
from coord.models.mesh.ledger import AgentLedgerState, BreakerConfig, RunStats, duration_bin
from coord.models.wire.contract import (
    ACQUIRE_PERMIT_UPDATE,
    CLAIM_PROBE_UPDATE,
    REPORT_OUTCOME_UPDATE,
    REPORT_STATS_UPDATE,
    RUN_AGENT_ACTIVITY,
    FailureType,
    Health,
    agent_ledger_workflow_id,
    agent_task_queue,
    failure,
    failure_type_of,
)
from coord.worker import build_worker
from tests.helpers import eventually, task_failures


@dataclass
class Drive:
    """Runs of one agent: one per payload, `in_flight` at a time, with these time limits."""

    agent: str
    agent_queue: str
    payloads: list[dict[str, Any]]
    in_flight: int = 20
    start_to_close_s: float = 30.0
    heartbeat_s: float | None = None
    attempts: int = 1


@workflow.defn(name="BreakerTestDriver", sandboxed=False)
class BreakerTestDriver:
    """Each run's outcome: `ok`, or the failure type it ended with."""

    @workflow.run
    async def run(self, drive: Drive) -> list[str]:
        slots = asyncio.Semaphore(drive.in_flight)

        async def one(index: int, payload: dict[str, Any]) -> str:
            async with slots:
                event = EventEnvelope.new("BreakerTestRun", f"/test/{index}", payload=payload)
                try:
                    await workflow.execute_activity(
                        RUN_AGENT_ACTIVITY,
                        AgentRequest(agent=drive.agent, event=event),
                        result_type=AgentResult,
                        task_queue=drive.agent_queue,
                        start_to_close_timeout=timedelta(seconds=drive.start_to_close_s),
                        heartbeat_timeout=(
                            timedelta(seconds=drive.heartbeat_s) if drive.heartbeat_s else None
                        ),
                        retry_policy=RetryPolicy(
                            maximum_attempts=drive.attempts,
                            initial_interval=timedelta(milliseconds=100),
                            backoff_coefficient=1,
                        ),
                    )
                except ActivityError as error:
                    return failure_type_of(error)
                return "ok"

        return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(drive.payloads))))


@dataclass
class Agent:
    """A python agent doing what each run's payload says (`do`): `ok`, fail by its own input
    (`own`: `temporary_failure` as the agent's declared outcome; `bad`: `invalid_payload`), be
    unreachable (`down`), or hang until Temporal times it out, heartbeating (`beat`) or not
    (`silent`)."""

    calls: list[str] = field(default_factory=list)

    async def __call__(self, event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
        do = str(event.payload.get("do", "ok"))
        self.calls.append(do)
        if do == "own":
            raise ApplicationError("this input fails here", type=FailureType.TEMPORARY_FAILURE)
        if do == "bad":
            raise failure(FailureType.INVALID_PAYLOAD, "this input is malformed")
        if do == "down":
            raise failure(FailureType.TEMPORARY_FAILURE, "refused", health=Health.CONNECTION)
        while do in ("beat", "silent"):
            if do == "beat":
                context.heartbeat()
            await asyncio.sleep(0.1)
        return {"done": True}


@dataclass
class Setup:
    client: Client
    task_queue: str
    name: str
    agent: Agent

    @property
    def agent_queue(self) -> str:
        return agent_task_queue(self.name, self.task_queue)

    async def drive(self, *todo: str, **limits: Any) -> list[str]:
        drive = Drive(self.name, self.agent_queue, [{"do": do} for do in todo], **limits)
        return await self.client.execute_workflow(
            BreakerTestDriver.run,
            drive,
            id=f"breaker-driver-{uuid.uuid4().hex[:8]}",
            task_queue=f"{self.task_queue}-drivers",
        )

    async def ledger(self) -> AgentLedgerState:
        return (await read_ledgers(self.client, [self.agent_queue]))[self.agent_queue]

    async def until(self, check: Callable[[AgentLedgerState], bool]) -> AgentLedgerState:
        """The ledger once `check` holds (as it sets no timers, a half-open breaker reads so
        at the reader's time)."""
        state = await self.ledger()

        async def holds() -> bool:
            nonlocal state
            state = await self.ledger()
            return check(state)

        await eventually(holds, 60, 0.1)
        return state


@contextlib.asynccontextmanager
async def serving(client: Client, task_queue: str, breaker: BreakerConfig) -> AsyncIterator[Setup]:
    """A worker serving one python agent with this breaker, and one for the driver."""
    setup = Setup(client, task_queue, f"agent-{uuid.uuid4().hex[:8]}", Agent())
    registry = AgentRegistry()
    declaration = PythonAgent(kind="python", callable="tests.agents:unused", breaker=breaker)
    registry.register(setup.name, "python", declaration)(setup.agent)
    driver = Worker(client, task_queue=f"{task_queue}-drivers", workflows=[BreakerTestDriver])
    async with build_worker(client, task_queue, registry), driver:
        yield setup


def transitions(state: AgentLedgerState) -> list[tuple[str, str]]:
    return [(t.from_state, t.to_state) for t in state.transitions]


async def test_an_agent_failing_by_its_own_input_never_opens_the_breaker(
    client: Client, task_queue: str
) -> None:
    """A tenth of the runs fail by their input (the agent raises `temporary_failure`, as the
    demo's injected failures do), each retried twice, in bursts: 60 failures among 240 calls,
    30 at a time. None counts against the agent: no healthy run is turned away."""
    todo = ["own" if n % 100 < 10 else "ok" for n in range(200)]
    async with serving(client, task_queue, BreakerConfig()) as setup:
        outcomes = await setup.drive(*todo, attempts=3)
        assert outcomes.count("ok") == 180 and outcomes.count("temporary_failure") == 20
        state = await setup.until(lambda s: s.runs == 240)
    assert len(setup.agent.calls) == 240, "no run was turned away"
    assert (state.breaker, state.breaker_failures, state.transitions) == ("closed", 0, [])
    assert (state.runs, state.failed) == (240, 60), "its stats count them all the same"


HANGING = {"start_to_close_s": 3.0, "heartbeat_s": 1.0}
"""Temporal times a hanging run out: one that heartbeats by its start-to-close limit, one that
does not by its heartbeat timeout."""


async def test_an_agent_timing_out_opens_the_breaker_and_a_timed_out_probe_reopens_it(
    client: Client, task_queue: str
) -> None:
    breaker = BreakerConfig(min_calls=4, recovery=timedelta(seconds=1), probes=2)
    async with serving(client, task_queue, breaker) as setup:
        outcomes = await setup.drive("beat", "silent", "beat", "silent", **HANGING)
        opened = await setup.until(lambda s: s.breaker != "closed")
        assert outcomes == ["timeout"] * 4
        assert opened.transitions[0].reason == "4 of 4 calls failed in 1m (100%): timeout 4"
        assert (opened.runs, opened.failed) == (4, 4), "the ledger counts the timeouts"

        await setup.until(lambda s: s.breaker == "half_open")
        assert await setup.drive("beat", **HANGING) == ["timeout"]
        reopened = await setup.until(lambda s: len(s.transitions) >= 3)
        assert transitions(reopened)[2] == ("half_open", "open"), "never stuck half-open"
        assert reopened.transitions[2].reason == "probe failed: timeout"

        await setup.until(lambda s: s.breaker == "half_open")
        probes = await setup.drive("ok", "ok", attempts=5)
        closed = await setup.until(lambda s: s.breaker == "closed")
    assert probes == ["ok", "ok"]
    assert closed.transitions[-1].reason == "2 probes succeeded"
    assert transitions(closed) == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


async def test_a_probe_failing_on_its_own_input_does_not_reopen_the_breaker(
    client: Client, task_queue: str
) -> None:
    breaker = BreakerConfig(min_calls=2, recovery=timedelta(seconds=1), probes=1)
    async with serving(client, task_queue, breaker) as setup:
        assert await setup.drive("down", "down") == ["temporary_failure"] * 2
        await setup.until(lambda s: s.breaker == "half_open")
        assert await setup.drive("bad") == ["invalid_payload"]
        probed = await setup.ledger()
        assert await setup.drive("ok") == ["ok"]
        closed = await setup.until(lambda s: s.breaker == "closed")
    assert setup.agent.calls == ["down", "down", "bad", "ok"]
    assert probed.breaker == "half_open" and probed.probes_out == 0, "its place freed"
    assert transitions(closed) == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


OVERFLOWING: list[tuple[str, dict[str, Any]]] = [
    (ACQUIRE_PERMIT_UPDATE, {"run": "r", "lease_s": 1e300}),
    (ACQUIRE_PERMIT_UPDATE, {"run": "r", "size": 10**30}),
    (REPORT_STATS_UPDATE, {"stats": {"succeeded": 10**30}}),
    (REPORT_STATS_UPDATE, {"stats": {"failed": 1, "counted": 1, "reasons": {"x" * 500: 1}}}),
    (CLAIM_PROBE_UPDATE, {"run": "r" * 5000}),
    (REPORT_OUTCOME_UPDATE, {"succeeded": False, "failure_type": "t" * 500}),
    (REPORT_OUTCOME_UPDATE, {"succeeded": True, "config": {"recovery": 1e300}}),
]
"""What validated before and then failed the ledger's workflow task (a lease or a duration too
large for a date or a float), and other unbounded fields."""


async def test_updates_a_ledger_could_not_apply_are_refused_and_it_keeps_serving(
    client: Client, task_queue: str
) -> None:
    queue = agent_task_queue(f"agent-{uuid.uuid4().hex[:8]}", task_queue)
    ledger = LedgerClient(client, queue, task_queue, BreakerConfig(), "test")
    handle = client.get_workflow_handle(agent_ledger_workflow_id(queue))

    async def answered(message: Awaitable[AgentLedgerState]) -> AgentLedgerState:
        return await asyncio.wait_for(message, 10)

    async with build_worker(client, task_queue):
        await answered(ledger.stats(RunStats(succeeded=1, durations={duration_bin(5.0): 1})))
        for update, arg in OVERFLOWING:
            with pytest.raises(WorkflowUpdateFailedError):
                await asyncio.wait_for(handle.execute_update(update, arg), 10)
            await answered(ledger.stats(RunStats(succeeded=1)))
        far = {"stats": {"succeeded": 1, "durations": {"100000": 1, "-100000": 1}}}
        await asyncio.wait_for(handle.execute_update(REPORT_STATS_UPDATE, far), 10)
        state = await answered(ledger.stats(RunStats(succeeded=1)))
        assert await task_failures(handle) == []
    assert state.runs == 2 + len(OVERFLOWING) + 1
    assert state.p50_ms is not None and state.p50_ms < 1e11, "a far bin counts in the last one"
