"""The whole log on the real dev server: a chain that continued as new many times and ended still
gives every one of its events, in order, through the API and `coord events C --all`, page by page
and from `--since`; a read model rebuilt by replaying the log equals the live one."""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from coord.infra.event_log import DirectorySegments, segment_store
from coord.models.chain.spec import ChainSpec, ChainStatus
from coord.models.events.envelope import EventEnvelope
from coord.models.events.log import SEGMENT_ROWS, LogSegment
from coord.models.events.timeline import TimelineEntry
from coord.models.events.views import AgentsView, TableView, fold, view_named
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.starter import api
from coord.starter.api.chains import SIGNALS_PER_RUN_ENV
from coord.testing import Coordination
from tests.helpers import event, user_story
from tests.workers import COORD, run, server_env

EVENTS = 5_000
BURSTS = 50
"""Events published from outside: each makes the `burster` agent publish `EVENTS / BURSTS - 1`
more, so the chain records 5,000 events for 50 signals (publishing 5,000 signals one by one
takes a loaded machine a minute)."""
SIGNALS_PER_RUN = 200
"""The chain continues as new every 50 history events (a quarter of it): many times here."""


def burst_spec() -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "burst",
            "triggers": ["Burst"],
            "subscriptions": [
                {"agent": "burster", "events": ["Burst"], "publishes": {"events": ["Noise"]}}
            ],
            "max_concurrency": 4,
            "alerts": None,
        }
    )


def burst_registry() -> AgentRegistry:
    registry = AgentRegistry()

    @registry.register("burster")
    async def burster(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        burst = event.payload["n"]
        noise = [
            {"type": "Noise", "payload": {"burst": burst, "n": n}}
            for n in range(EVENTS // BURSTS - 1)
        ]
        return {"publish": noise}

    return registry


async def runs_of(coord: Coordination, workflow_id: str) -> int:
    return len([e async for e in coord.client.list_workflows(f"WorkflowId = '{workflow_id}'")])


@pytest.mark.slow
async def test_every_event_of_a_chain_that_continued_as_new_and_ended_is_read_in_order(
    coord: Coordination, dev_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SIGNALS_PER_RUN_ENV, str(SIGNALS_PER_RUN))
    correlation_id = f"log-{uuid.uuid4().hex[:8]}"
    async with coord.worker(burst_registry()):
        handle = await api.start_chain(
            coord.client, burst_spec(), correlation_id, queue=coord.task_queue
        )
        for n in range(BURSTS):
            await api.publish(coord.client, event(correlation_id, "Burst", n=n))
        await api.close_chain(coord.client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 120)
    assert state.status == ChainStatus.CLOSED and state.events_seen == EVENTS
    assert await runs_of(coord, handle.id) > 5, "the chain continued as new several times"

    # No worker from here on: an ended chain's log is read from the store alone.
    rows = [row async for row in api.read_log(coord.client, correlation_id, page_size=333)]
    seqs = [row.seq for row in rows]
    assert len(rows) == EVENTS and seqs == sorted(set(seqs)), "each once, in the chain's order"
    assert len({row.event_id for row in rows}) == EVENTS
    bursts = {row.event_id: row.payload["n"] for row in rows if row.event == "Burst"}
    for seq, row in enumerate(rows, 1):
        if row.event == "Noise":
            assert row.causation_id in bursts, f"row {seq}: caused by its burst"
            assert row.payload["burst"] == bursts[row.causation_id]
    names = await segment_store().names(correlation_id)
    assert len(names) == EVENTS // SEGMENT_ROWS, "one write per segment's worth of events"

    env = server_env(dev_env, coord.task_queue)
    code, out, err = await run(COORD, "events", correlation_id, "--all", "--json", env=env)
    assert code == 0, err
    printed = [TimelineEntry.model_validate_json(line) for line in out.splitlines()]
    assert printed == rows

    since = str(seqs[-11])
    code, out, err = await run(
        COORD, "events", correlation_id, "--since", since, "--json", "--page-size", "3", env=env
    )
    assert code == 0, err
    assert [json.loads(line)["seq"] for line in out.splitlines()] == seqs[-10:]
    page = await api.read_log_page(coord.client, correlation_id, since=seqs[-3], page_size=5)
    assert [row.seq for row in page.rows] == seqs[-2:] and page.next_since is None

    code, out, err = await run(COORD, "events", correlation_id, "--since", since, env=env)
    assert code == 0, err
    assert out.rstrip().endswith(f"10 events, seq {seqs[-10]:,}-{seqs[-1]:,}")


async def test_a_read_model_replayed_from_the_log_equals_the_live_one(
    coord: Coordination, dev_env: WorkflowEnvironment
) -> None:
    async with coord.worker():
        correlation_id = await coord.start_chain(user_story())
        await coord.publish(
            correlation_id,
            "UserStoryApproved",
            source="/product-strategist",
            topic="project.tasks",
        )
        await coord.chain_outcome(correlation_id)
        live = await api.correlation_events(coord.client, correlation_id)
    assert len({row.agent for row in live}) > 3
    # No worker from here on: the chain has ended, its log is in the store.
    for name in ("table", "agents"):
        replayed = await api.replay_into(coord.client, correlation_id, name, page_size=4)
        assert replayed == fold(view_named(name), live), name

    env = server_env(dev_env, coord.task_queue)
    code, out, err = await run(
        COORD, "events", correlation_id, "--replay-into", "agents", "--json", env=env
    )
    assert code == 0, err
    agents = AgentsView.model_validate_json(out)
    assert agents.model_dump() == fold(view_named("agents"), live).model_dump()
    code, out, err = await run(
        COORD, "events", correlation_id, "--replay-into", "table", "--json", env=env
    )
    assert code == 0, err
    assert TableView.model_validate_json(out).rows == live
    code, _, err = await run(COORD, "events", correlation_id, "--replay-into", "nope", env=env)
    assert code != 0 and "--replay-into: no view 'nope' (views: agents, table)" in err


async def test_gc_removes_a_log_once_its_chain_is_gone_and_keeps_the_others(
    coord: Coordination, dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    segments = DirectorySegments(store.resolve())
    running = await coord.start_chain(user_story())  # no worker: it stays running
    gone = f"gone-{uuid.uuid4().hex[:8]}"  # its chain's runs are gone from the server
    for correlation_id in (running, gone):
        rows = [row async for row in fake_rows(correlation_id)]
        await segments.write(LogSegment(correlation_id=correlation_id, rows=rows))
    env = {
        **server_env(dev_env, coord.task_queue),
        "COORD_PAYLOAD_STORE": str(store),
        "COORD_RETENTION_LOGS": "1ms",
    }
    code, out, err = await run(COORD, "gc", "--json", env=env)
    assert code == 0, err
    items = {(i["kind"], i["name"]): i for i in json.loads(out)["items"] if i["kind"] == "logs"}
    assert items[("logs", gone)]["action"] == "removed"
    assert items[("logs", running)]["action"] == "kept"
    assert "is on the server" in items[("logs", running)]["reason"]
    assert await segments.names(gone) == []
    assert len(await segments.names(running)) == 1


async def fake_rows(correlation_id: str) -> AsyncIterator[TimelineEntry]:
    for seq in (1, 2, 3):
        envelope = event(correlation_id, "Noise", n=seq)
        yield TimelineEntry.recording(envelope, seq=seq, correlation_id=correlation_id)
