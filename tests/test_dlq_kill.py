"""A bulk `coord dlq replay --all` whose worker and whose CLI process are both SIGKILLed in the
middle: after a restart every entry is replayed exactly once or still parked and replayable,
asking again replays the rest, and the target receives each replayed event once."""

import asyncio
import os
import uuid
from collections import Counter
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from coord.infra.dead_letters import park_dead_letter
from coord.models.dlq.letter import DlqSelection
from coord.models.wire import contract
from coord.starter import api
from tests.helpers import eventually, history_events, letter, parked, routing_spec
from tests.workers import COORD, worker_process

ENTRIES = 150
KILL_AFTER = 10
"""Entries replayed (as visibility counts them) before the worker and the CLI are killed."""


async def replay_all(client: Client, task_queue: str) -> asyncio.subprocess.Process:
    """`coord dlq replay --all` as an operator runs it, against the test's server and queue."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": client.namespace,
        "COORD_TASK_QUEUE": task_queue,
    }
    return await asyncio.create_subprocess_exec(
        COORD,
        *("dlq", "replay", "--all", "--failure-type", "temporary_failure"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def statuses(client: Client, entry_ids: list[str]) -> Counter[str]:
    """Each entry's status as the server holds it now (its search attribute, read from the
    entry itself, not from eventually consistent visibility)."""
    found: Counter[str] = Counter()
    for entry_id in entry_ids:
        description = await client.get_workflow_handle(entry_id).describe()
        found[description.typed_search_attributes.get(contract.COORD_STATUS) or ""] += 1
    return found


@pytest.mark.slow
async def test_a_bulk_replay_killed_midway_replays_each_entry_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    correlation_id = f"kill-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "workers.log"
    replayed_query = api.dlq_query(DlqSelection(status="replayed"), queue=task_queue)
    async with worker_process(client, task_queue, log) as first:
        chain = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        letters = [
            letter(chain.id, event_type="Z", failure_type="temporary_failure")
            for _ in range(ENTRIES)
        ]
        entry_ids = list(
            await asyncio.gather(*(park_dead_letter(client, x, task_queue) for x in letters))
        )
        await parked(client, task_queue, ENTRIES)
        cli = await replay_all(client, task_queue)

        async def some_replayed() -> bool:
            return (await client.count_workflows(replayed_query)).count >= KILL_AFTER

        await eventually(some_replayed, timeout=120)
        await first.kill()
        cli.kill()
        await cli.wait()
    at_kill = await statuses(client, entry_ids)
    async with worker_process(client, task_queue, log):
        again = await replay_all(client, task_queue)
        out, err = await asyncio.wait_for(again.communicate(), 180)
        lines = out.decode().splitlines()

        async def all_replayed() -> bool:
            return (await statuses(client, entry_ids))["replayed"] == ENTRIES

        await eventually(all_replayed, timeout=120)

        async def all_taken_in() -> bool:  # an entry is replayed once its signal is delivered
            rows = await api.chain_timeline(client, correlation_id)
            return sum(1 for row in rows if row.event == "Z") >= ENTRIES

        await eventually(all_taken_in, timeout=60)
        state = await api.chain_state(client, correlation_id)
        timeline = await api.chain_timeline(client, correlation_id)
    assert at_kill["replayed"] >= KILL_AFTER and at_kill["parked"] > 0, at_kill
    assert set(at_kill) <= {"parked", "replaying", "replayed"}, at_kill
    assert again.returncode in (0, 1), err.decode()
    refused = [line for line in lines if line.startswith("refused:")]
    assert all("not parked" in line for line in refused), refused
    assert all(": replayed, delivered as" in line for line in lines if line not in refused), lines
    for entry_id in entry_ids:
        history = await history_events(client.get_workflow_handle(entry_id))
        redelivered = history.count(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
        assert redelivered == 1, (entry_id, redelivered)
    causes = Counter(row.causation_id for row in timeline if row.event == "Z")
    assert causes == Counter({x.event.event.id: 1 for x in letters if x.event}), causes
    assert state.received == state.events_seen + state.duplicates + state.rejected_count
    assert state.rejected_count == 0
