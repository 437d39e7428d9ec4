"""The agent ledger on the real dev server: the `AgentLedger` entity workflow started by the
first report (update-with-start), read by `read_ledgers`, and the circuit breaker as workflows
see it through `run_agent`."""

import uuid
from datetime import timedelta

import pytest
from temporalio.client import Client

from coord.infra.ledgers import LedgerClient, read_ledgers
from coord.models.agent_ledger import BreakerConfig, RunStats, duration_bin
from coord.models.contract import agent_ledger_workflow_id, agent_task_queue
from coord.worker import build_worker
from tests.conftest import CONTINUE_AS_NEW_AFTER


async def test_the_ledger_is_started_by_the_first_report_and_read_by_queue(
    client: Client, task_queue: str
) -> None:
    queue = agent_task_queue(f"flaky-{uuid.uuid4().hex[:8]}", task_queue)
    config = BreakerConfig(failures=2, recovery=timedelta(seconds=1))
    ledger = LedgerClient(client, queue, task_queue, config, worker="test")
    unknown = agent_task_queue("never-ran", task_queue)
    async with build_worker(client, task_queue):
        before = await read_ledgers(client, [queue, unknown])
        assert before[queue].breaker == "closed" and before[queue].runs == 0
        stats = RunStats()
        stats.record(True, 12.0)
        stats.record(False, 3.0)
        assert (await ledger.stats(stats)).runs == 2
        await ledger.outcome(False, failure_type="temporary_failure")
        state = await ledger.outcome(False, failure_type="temporary_failure")
        assert state.breaker == "open" and state.open_until is not None
        assert not (await ledger.claim_probe()).granted
        read = (await read_ledgers(client, [queue, unknown]))[queue]
        assert (read.breaker, read.success_rate) == ("open", 0.5)
        assert read.p50_ms == pytest.approx(12, rel=0.05)
        assert (await read_ledgers(client, [unknown]))[unknown].breaker == "closed"
        description = await client.get_workflow_handle(agent_ledger_workflow_id(queue)).describe()
        assert description.task_queue == task_queue


async def test_the_ledger_continues_as_new_with_its_book_when_its_history_grows(
    client: Client, task_queue: str
) -> None:
    queue = agent_task_queue(f"busy-{uuid.uuid4().hex[:8]}", task_queue)
    ledger = LedgerClient(client, queue, task_queue, BreakerConfig(), worker="test")
    handle = client.get_workflow_handle(agent_ledger_workflow_id(queue))
    async with build_worker(client, task_queue):
        first = await ledger.outcome(False, failure_type="timeout")
        first_run = (await handle.describe()).run_id
        for _ in range(CONTINUE_AS_NEW_AFTER // 2):
            await ledger.stats(RunStats(succeeded=1, durations={duration_bin(5.0): 1}))
        state = await ledger.read()
        assert (await handle.describe()).run_id != first_run, "continued as new"
    assert first.consecutive_failures == state.consecutive_failures == 1
    assert state.runs == CONTINUE_AS_NEW_AFTER // 2
    assert state.p50_ms == pytest.approx(5, rel=0.05)
