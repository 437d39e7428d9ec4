"""The agent ledger on the real dev server: the `AgentLedger` entity workflow started by the
first report (update-with-start), read by `read_ledgers`, and the circuit breaker as workflows
see it through `run_agent`."""

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.infra.ledgers import LedgerClient, read_ledgers
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentFn, AgentRegistry
from coord.models.mesh.breaker import SUCCEEDED, failure_verdict
from coord.models.mesh.config import PythonAgent
from coord.models.mesh.health import AgentHealth
from coord.models.mesh.ledger import (
    AgentLedgerState,
    BreakerConfig,
    LedgerStart,
    RunStats,
    duration_bin,
)
from coord.models.mesh.retry import RetryConfig
from coord.models.vote.spec import Ballot, Choice, VoteSpec
from coord.models.wire.contract import (
    AGENT_LEDGER_WORKFLOW,
    FailureType,
    Health,
    agent_ledger_workflow_id,
    agent_task_queue,
    failure,
    ledger_task_queue,
)
from coord.starter import api, render
from coord.starter.commands.agents import AgentsReport, agents_view
from coord.worker import build_worker
from tests.conftest import CONTINUE_AS_NEW_AFTER
from tests.helpers import eventually
from tests.workers import COORD, run, server_env

SLACK = timedelta(milliseconds=100)
"""Clock resolution between the worker and the server (one machine)."""


async def test_the_ledger_is_started_by_the_first_report_and_read_by_queue(
    client: Client, task_queue: str
) -> None:
    queue = agent_task_queue(f"flaky-{uuid.uuid4().hex[:8]}", task_queue)
    config = BreakerConfig(min_calls=4, recovery=timedelta(seconds=1))
    ledger = LedgerClient(client, queue, task_queue, config, worker="test")
    unknown = agent_task_queue("never-ran", task_queue)
    async with build_worker(client, task_queue):
        before = await read_ledgers(client, [queue, unknown])
        assert before[queue].breaker == "closed" and before[queue].runs == 0
        stats = RunStats()
        stats.record(SUCCEEDED, 12.0)
        stats.record(failure_verdict(config, "temporary_failure", None), 3.0)
        counted = await ledger.stats(stats)
        assert (counted.runs, counted.breaker_calls, counted.breaker_failures) == (2, 2, 0)
        down = RunStats(failed=2, counted=2, reasons={"connection": 2})
        state = await ledger.stats(down)
        assert state.breaker == "open" and state.open_until is not None
        assert not (await ledger.claim_probe("a-run")).granted
        read = (await read_ledgers(client, [queue, unknown]))[queue]
        assert (read.breaker, read.success_rate) == ("open", 0.25)
        assert read.transitions[-1].reason == "2 of 4 calls failed in 1m (50%): connection 2"
        assert read.p50_ms == pytest.approx(12, rel=0.05)
        assert (await read_ledgers(client, [unknown]))[unknown].breaker == "closed"
        description = await client.get_workflow_handle(agent_ledger_workflow_id(queue)).describe()
        assert description.task_queue == ledger_task_queue(task_queue)


async def test_a_ledger_started_on_the_coordinator_queue_before_stays_there_and_answers(
    client: Client, task_queue: str
) -> None:
    """Ledgers started before they had a queue of their own run on the coordinator queue: a
    report reaches the one running (its id is the agent queue's), served there as before."""
    queue = agent_task_queue(f"older-{uuid.uuid4().hex[:8]}", task_queue)
    await client.start_workflow(
        AGENT_LEDGER_WORKFLOW,
        LedgerStart(agent_queue=queue),
        id=agent_ledger_workflow_id(queue),
        task_queue=task_queue,
    )
    ledger = LedgerClient(client, queue, task_queue, BreakerConfig(), worker="test")
    async with build_worker(client, task_queue):
        stats = RunStats()
        stats.record(SUCCEEDED, 5.0)
        assert (await ledger.stats(stats)).runs == 1
    description = await client.get_workflow_handle(agent_ledger_workflow_id(queue)).describe()
    assert description.task_queue == task_queue


async def test_the_ledger_continues_as_new_with_its_book_when_its_history_grows(
    client: Client, task_queue: str
) -> None:
    queue = agent_task_queue(f"busy-{uuid.uuid4().hex[:8]}", task_queue)
    config = BreakerConfig(window=timedelta(hours=1), min_calls=100_000)
    ledger = LedgerClient(client, queue, task_queue, config, worker="test")
    handle = client.get_workflow_handle(agent_ledger_workflow_id(queue))
    reports = CONTINUE_AS_NEW_AFTER // 2
    async with build_worker(client, task_queue):
        first = await ledger.stats(RunStats(failed=1, counted=1, streak=1, reasons={"timeout": 1}))
        first_run = (await handle.describe()).run_id
        for _ in range(reports):
            await ledger.stats(RunStats(succeeded=1, durations={duration_bin(5.0): 1}))
        state = await ledger.read()
        assert (await handle.describe()).run_id != first_run, "continued as new"
    assert first.consecutive_failures == 1 and state.consecutive_failures == 0
    assert (state.breaker_calls, state.breaker_reasons) == (reports + 1, {"timeout": 1})
    assert state.runs == reports + 1
    assert state.p50_ms == pytest.approx(5, rel=0.05)


@dataclass
class FlakyAgent:
    """A voter whose endpoint is down while `failing`; it counts every call it gets."""

    failing: bool = True
    calls: list[datetime] = field(default_factory=list)

    async def __call__(self, event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
        self.calls.append(datetime.now(UTC))
        if self.failing:
            raise failure(FailureType.TEMPORARY_FAILURE, "endpoint down", health=Health.CONNECTION)
        return {"approve": True, "reason": "up again"}


def flaky_registry(name: str, agent: AgentFn, breaker: BreakerConfig) -> AgentRegistry:
    registry = AgentRegistry()
    declaration = PythonAgent(kind="python", callable="tests.agents:unused", breaker=breaker)
    registry.register(name, "python", declaration)(agent)
    return registry


async def ballot_of(
    client: Client, queue: str, voter: str, within: timedelta | None = None, **retry: Any
) -> Ballot:
    """One vote with one voter: its ballot says how the voter's run ended (`within`: the
    voter's whole time, past which a run waiting at an open breaker fails `circuit_open`)."""
    spec = VoteSpec(
        vote_id=f"breaker-{uuid.uuid4().hex[:8]}",
        proposal={"release": 7},
        voters=[voter],
        retry=RetryConfig.model_validate({"max_retries": 0, **retry}),
        **({"timeout": within} if within is not None else {}),
    )
    state = await api.vote_outcome(await api.start_vote(client, spec, queue=queue))
    (ballot,) = state.ballots
    return ballot


async def test_the_breaker_opens_fails_fast_without_calling_the_agent_probes_and_closes(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = dev_env.client
    name = f"flaky-{uuid.uuid4().hex[:8]}"
    agent = FlakyAgent()
    queue = agent_task_queue(name, task_queue)
    breaker = BreakerConfig(consecutive=5, recovery=timedelta(seconds=2), probes=1)

    async def ledger() -> AgentLedgerState:
        return (await read_ledgers(client, [queue]))[queue]

    async def until_half_open() -> None:
        await eventually(lambda: _is(ledger(), "half_open"))

    async with build_worker(client, task_queue, flaky_registry(name, agent, breaker)):
        for _ in range(5):
            assert (await ballot_of(client, task_queue, name)).reason.startswith(
                "temporary_failure"
            )
        opened = await ledger()
        assert (opened.breaker, opened.consecutive_failures) == ("open", 5)
        for _ in range(3):  # each would wait for the open window's end, longer than it has
            refused = await ballot_of(client, task_queue, name, within=timedelta(seconds=1))
            assert refused.reason.startswith("circuit_open")
        assert len(agent.calls) == 5, "no agent call while the breaker is open"
        assert opened.open_until is not None and datetime.now(UTC) < opened.open_until

        await until_half_open()
        probe = await ballot_of(client, task_queue, name)
        assert probe.reason.startswith("temporary_failure") and len(agent.calls) == 6
        reopened = await ledger()
        assert reopened.breaker == "open" and reopened.open_until is not None

        agent.failing = False
        retried = await ballot_of(
            client, task_queue, name, max_retries=1, initial_delay=timedelta(milliseconds=100)
        )
        assert retried.choice == Choice.APPROVE and len(agent.calls) == 7
        assert agent.calls[-1] >= reopened.open_until - SLACK, "retried after the open window"
        closed = await ledger()
        shown = await coord_agents_row(dev_env, task_queue, tmp_path, name, runs=7)
    assert closed.breaker == "closed" and closed.consecutive_failures == 0
    assert (shown["breaker"], shown["success_rate"]) == ("closed", round(1 / 7, 4))
    assert shown["p50_ms"] is not None, "the window's p50 of the one successful run"
    assert [(t.from_state, t.to_state) for t in closed.transitions] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


@dataclass
class ProbeHangs:
    """Down for its first call; its second (the probe) hangs until cancelled; then up."""

    calls: int = 0
    probing: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            raise failure(FailureType.TEMPORARY_FAILURE, "endpoint down", health=Health.CONNECTION)
        if self.calls == 2:
            self.probing.set()
            try:
                while True:
                    activity.heartbeat()
                    await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return {"approve": True, "reason": "up again"}


async def test_a_cancelled_probe_lets_the_next_run_probe_at_once(
    client: Client, task_queue: str
) -> None:
    """Without an outcome, the probe's lease (a minute) would keep the breaker half-open and
    every run failing fast with circuit_open."""
    name = f"hangs-{uuid.uuid4().hex[:8]}"
    agent = ProbeHangs()
    queue = agent_task_queue(name, task_queue)
    breaker = BreakerConfig(consecutive=1, recovery=timedelta(seconds=1), probes=1)
    registry = flaky_registry(name, agent, breaker)
    async with build_worker(client, task_queue, registry):
        assert (await ballot_of(client, task_queue, name)).reason.startswith("temporary_failure")
        await eventually(lambda: _is(read_ledger(client, queue), "half_open"))
        probe = VoteSpec(vote_id=f"probe-{uuid.uuid4().hex[:8]}", proposal={}, voters=[name])
        handle = await api.start_vote(client, probe, queue=task_queue)
        await asyncio.wait_for(agent.probing.wait(), 30)
        await handle.cancel()
        await asyncio.wait_for(agent.cancelled.wait(), 30)
        cancelled_at = time.monotonic()
        # A run asking before the ledger heard of the cancel is turned away for 2 s: retried.
        retried = await ballot_of(client, task_queue, name, max_retries=3)
        waited = time.monotonic() - cancelled_at
        closed = await read_ledger(client, queue)
    assert retried.choice == Choice.APPROVE and agent.calls == 3, retried.reason
    assert waited < 30, "probed again at once, not at the end of the abandoned probe's lease"
    assert closed.breaker == "closed"


async def read_ledger(client: Client, queue: str) -> AgentLedgerState:
    return (await read_ledgers(client, [queue]))[queue]


async def _is(state: Awaitable[AgentLedgerState], breaker: str) -> bool:
    return (await state).breaker == breaker


async def coord_agents_row(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path, agent: str, *, runs: int
) -> dict[str, Any]:
    """The agent's row of `coord agents --json`, once the workers' batches count `runs`. The CLI
    is told of the agent by an agents file (a worker built in a test reports its queues only
    every minute)."""
    row: dict[str, Any] = {}
    declared = tmp_path / "agents.yaml"
    declared.write_text(f"agents:\n  {agent}: {{kind: shell, argv: [cat]}}\n")
    command = ["agents", "--agents", str(declared), "--json"]

    async def counted() -> bool:
        nonlocal row
        code, out, err = await run(COORD, *command, env=server_env(env, task_queue))
        assert (code, err) == (0, "")
        row = next(r for r in json.loads(out) if r["agent"] == agent)
        return bool(row["runs"] == runs)

    await eventually(counted)
    return row


def test_coord_agents_shows_success_p50_and_breaker() -> None:
    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    row = AgentHealth(agent="flaky", task_queue="agent-flaky", status="healthy")
    ledger = AgentLedgerState(
        agent_queue="agent-flaky",
        breaker="open",
        open_until=now + timedelta(seconds=12),
        runs=50,
        success_rate=0.9,
        p50_ms=41.2,
    )
    text = render.plain(agents_view([row.with_ledger(ledger)], now))
    assert "90% of 50" in text and "41.2 ms" in text and "open (12s left)" in text
    unread = render.plain(agents_view([row], now))
    assert unread.splitlines()[2].endswith("| -"), "its ledger unread: no breaker shown"
    shown = AgentsReport([row]).model_dump(mode="json")[0]
    unknown = ("breaker", "breaker_calls", "probes", "runs")
    assert [shown[field] for field in unknown] == [None] * 4
    closed = ledger.model_copy(update={"breaker": "closed", "breaker_calls": 40})
    failing = closed.model_copy(update={"breaker_failure_rate": 0.1})
    assert "closed (10% of 40 failed)" in render.plain(agents_view([row.with_ledger(failing)], now))
    probing = ledger.model_copy(update={"breaker": "half_open", "probes_succeeded": 1})
    text = render.plain(agents_view([row.with_ledger(probing)], now))
    assert "half_open (1 of 3 probes ok)" in text
