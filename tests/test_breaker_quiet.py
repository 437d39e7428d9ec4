"""A quiet breaker on the real dev server (closed, nothing counted against its agent): the worker
watches it with few messages to the agent's ledger, and sends what it holds at once when failures
counted elsewhere make it un-quiet. Runs of the real `run_agent` on the agent's own queue, against
the agent's real `AgentLedger`; the ledger's messages are counted by the saga bench's client
interceptor."""

import time

import pytest
from temporalio.client import Client

from bench.saga_bench import LedgerMessages
from coord.activities.mesh import breakers
from coord.infra.ledgers import LedgerClient
from coord.models.mesh.breaker import Verdict
from coord.models.mesh.ledger import BreakerConfig, RunStats
from tests.helpers import eventually
from tests.test_breaker import serving


def counted(client: Client, messages: LedgerMessages) -> Client:
    config = client.config()
    config["interceptors"] = [messages]
    return Client(**config)


async def test_a_busy_worker_watches_a_quiet_breaker_with_few_messages(
    client: Client, task_queue: str
) -> None:
    """An agent run without pause for 12 s, every run succeeding: its worker reads and reports
    to the ledger about once in four seconds (QUIET_REFRESH, QUIET_STATS), not once a second,
    and the ledger still counts every run."""
    messages = LedgerMessages()
    async with serving(counted(client, messages), task_queue, BreakerConfig()) as setup:
        started, runs = time.monotonic(), 0
        while time.monotonic() - started < 12:
            outcomes = await setup.drive(*["ok"] * 10, in_flight=1)
            assert outcomes == ["ok"] * 10
            runs += 10
        per_second = messages.sent.total() / (time.monotonic() - started)
        assert per_second < 0.6, f"{messages.sent} in {time.monotonic() - started:.1f}s"
        state = await setup.until(lambda s: s.runs == runs)
    assert (state.breaker, state.succeeded) == ("closed", runs)


async def test_failures_counted_elsewhere_bring_the_runs_held_here_at_once(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs held in a quiet breaker's batch (here for as long as the test lasts) go to the
    ledger once the worker's view shows failures another worker reported: the ledger judges
    those failures with this worker's successes."""
    monkeypatch.setattr(breakers, "QUIET_STATS", 600.0)
    async with serving(client, task_queue, BreakerConfig(min_calls=20)) as setup:
        assert await setup.drive(*["ok"] * 5, in_flight=1) == ["ok"] * 5
        elsewhere = LedgerClient(
            client, setup.agent_queue, task_queue, BreakerConfig(min_calls=20), "elsewhere"
        )
        failed = RunStats()
        for _ in range(3):
            failed.record(Verdict(ended="failed", counted=True, reason="timeout"), 10.0)
        assert not (await elsewhere.stats(failed)).quiet

        async def held_runs_arrived() -> bool:
            assert await setup.drive("ok", in_flight=1) == ["ok"]
            return (await setup.ledger()).succeeded >= 5

        await eventually(held_runs_arrived, 30, 0.5)
        state = await setup.ledger()
    assert (state.breaker, state.breaker_failures) == ("closed", 3)
