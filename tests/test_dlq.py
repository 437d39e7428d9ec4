"""The dead-letter queue: what fails for good is parked, can be fixed and replayed, or archived."""

import asyncio
import socket
import uuid
from collections import Counter
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from activities.agents import AgentRegistry
from activities.delivery import park_dead_letter
from activities.demo import register_demo_agents
from infra.devserver import embedded_server
from models.agent_config import WorkerSettings
from models.chain import ChainSpec, ChainStatus
from models.dlq import ArchiveRequest, DeadLetter, DlqEntry, DlqSelection, ReplayRequest
from models.envelope import EventEnvelope
from models.saga import SagaSpec, SagaStatus
from starter import api
from tests.conftest import feature_deployment
from tests.test_chain import approved, eventually, routing_spec, run_chain, user_story
from worker import build_worker


async def parked(
    client: Client, task_queue: str, count: int, selection: DlqSelection | None = None
) -> list[DlqEntry]:
    found: list[DlqEntry] = []

    async def enough() -> bool:
        nonlocal found
        found = await api.dlq_entries(client, selection, queue=task_queue)
        return len(found) >= count

    await eventually(enough)
    return found


async def test_failed_agent_is_parked_then_fixed_and_replayed_and_the_chain_continues(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    poisoned = {"inject": {"fail": ["python-pro"], "error_type": "invalid_payload"}}
    async with build_worker(client, task_queue):
        await api.publish(
            client, approved(correlation_id, **poisoned), spec=user_story(), queue=task_queue
        )
        [entry] = await parked(client, task_queue, 1)
        assert entry.failure_type == "invalid_payload" and entry.attempts == 1
        assert entry.target_workflow == f"chain-{correlation_id}"
        assert entry.target_agent == "python-pro" and entry.replay == "rerun"
        assert entry.event is not None and entry.event.event.type == "APIDesignCompleted"

        async def announced() -> bool:
            timeline = await api.chain_timeline(client, correlation_id)
            return "EventDeadLettered" in [e.event for e in timeline]

        await eventually(announced)
        fixed = {k: v for k, v in entry.event.payload.items() if k != "inject"}
        request = ReplayRequest(selection=DlqSelection(entry_ids=[entry.entry_id]), payload=fixed)
        [replayed] = await api.dlq_replay(client, request, queue=task_queue)
        assert replayed.status == "replayed" and replayed.replays[-1].corrected
        state = await asyncio.wait_for(api.chain_handle(client, correlation_id).result(), 30)
        timeline = await api.chain_timeline(client, correlation_id)
    assert state.status == ChainStatus.COMPLETED
    assert [e.event for e in timeline][-1] == "TestingCompleted"
    assert "BackendImplementationCompleted" in [e.event for e in timeline]


async def test_invalid_envelope_is_parked_raw_and_archived_with_a_note(
    client: Client, task_queue: str
) -> None:
    raw = {"event": {"type": "A"}, "payload": "not an object"}
    async with build_worker(client, task_queue):
        await run_chain(client, task_queue, routing_spec(), [raw])
        [entry] = await parked(client, task_queue, 1)
        assert entry.failure_type == "invalid_envelope" and entry.raw == raw
        assert "event.source: Field required" in entry.message
        with pytest.raises(api.Undeliverable, match="cannot be replayed; archive it"):
            await api.dlq_replay(
                client,
                ReplayRequest(selection=DlqSelection(entry_ids=[entry.entry_id])),
                queue=task_queue,
            )
        request = ArchiveRequest(
            selection=DlqSelection(failure_type="invalid_envelope"), note="hand-written test JSON"
        )
        [archived] = await api.dlq_archive(client, request, queue=task_queue)
        counts = await api.dlq_counts(client, queue=task_queue)
        with pytest.raises(api.Undeliverable, match="no parked entry matches"):
            await api.dlq_archive(client, request, queue=task_queue)
    assert archived.status == "archived" and archived.archive_note == "hand-written test JSON"
    assert (counts.parked, counts.archived) == (0, 1)


async def test_failed_compensation_is_parked_and_replayed_by_running_the_agent(
    client: Client, task_queue: str
) -> None:
    spec = feature_deployment(
        input={"inject": {"fail": ["DeployToProduction", "RollbackProduction"]}}
    )
    for step in spec.steps:
        step.retry = step.retry.model_validate({"max_retries": 0})
        step.compensation_retry = step.compensation_retry.model_validate(
            {"max_retries": 1, "initial_delay": "100ms"}
        )
    allowing = register_demo_agents(AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    async with build_worker(client, task_queue, allowing):
        state = await api.saga_outcome(await api.start_saga(client, spec, queue=task_queue))
        assert state.status == SagaStatus.COMPENSATION_FAILED
        [entry] = await parked(client, task_queue, 1)
        assert (entry.failure_type, entry.target_agent, entry.replay) == (
            "compensation_failed",
            "RollbackProduction",
            "run_agent",
        )
        assert entry.attempts == 2
        request = ReplayRequest(
            selection=DlqSelection(entry_ids=[entry.entry_id]), payload={"feature": "xyz"}
        )
        [replayed] = await api.dlq_replay(client, request, queue=task_queue)
    assert replayed.status == "replayed"


async def test_publishing_to_an_ended_chain_parks_the_event(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(handle.result(), 30)
        late = EventEnvelope.new("A", "/late", correlation_id=correlation_id)
        with pytest.raises(api.Undeliverable, match="parked in dead-letter-queue"):
            await api.publish(client, late)
        [entry] = await parked(client, task_queue, 1)
    assert entry.failure_type == "target_ended" and entry.event == late


async def test_the_queue_survives_continue_as_new(client: Client, task_queue: str) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    count = 120
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(handle.result(), 30)
        lates = [
            EventEnvelope.new("A", "/late", correlation_id=correlation_id) for _ in range(count)
        ]
        for late in lates:
            with pytest.raises(api.Undeliverable):
                await api.publish(client, late)
        entries = await parked(client, task_queue, count)
        runs = [
            e async for e in client.list_workflows(f"WorkflowId = 'dead-letter-queue-{task_queue}'")
        ]
    assert [e.event.event.id for e in entries if e.event] == [late.event.id for late in lates]
    assert len(runs) > 1, "the queue continued as new at least once"
    assert len({e.entry_id for e in entries}) == count


async def test_accounting_identity_holds_under_a_mix_of_1000_events(
    client: Client, task_queue: str
) -> None:
    """Nothing is lost: every event is handled, a duplicate, or rejected, and every rejection and
    failed agent run is in the dead-letter queue."""
    spec = ChainSpec.model_validate(
        {
            "name": "mix",
            "triggers": ["A"],
            "alerts": None,
            "max_concurrency": 8,
            "subscriptions": [
                {
                    "agent": "python-pro",
                    "events": "A",
                    "filter": "payload.n % 20 == 0",
                    "retry": {"max_retries": 0},
                }
            ],
        }
    )
    poison = {"fail": ["python-pro"], "error_type": "invalid_payload"}
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"

    def a(n: int, correlation: str = correlation_id) -> dict[str, Any]:
        envelope = EventEnvelope.new(
            "A", "/mix", payload={"n": n, "inject": poison}, correlation_id=correlation
        )
        return envelope.model_dump(mode="json")

    valid = [a(n) for n in range(700)]
    invalid = [{"event": {"type": "A", "source": "/mix"}, "payload": n} for n in range(100)]
    foreign = [a(n, "elsewhere") for n in range(100)]
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, spec, correlation_id, queue=task_queue)
        for raw in [*valid, *valid[:100], *invalid, *foreign]:
            await handle.signal("event", raw)
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 60)
        failed_runs = 700 // 20
        entries = await parked(client, task_queue, 200 + failed_runs)
    assert state.received == state.events_seen + state.duplicates + state.rejected_count
    assert (state.duplicates, state.rejected_count) == (100, 200)
    assert state.events_seen >= 700, "the 700 valid events, and the dead-letter notices"
    assert state.dead_lettered == len(entries) == 200 + failed_runs
    kinds = Counter(e.failure_type for e in entries)
    assert kinds == {
        "invalid_envelope": 100,
        "foreign_correlation": 100,
        "invalid_payload": failed_runs,
    }


async def test_the_queue_survives_a_server_restart(tmp_path: Path, task_queue: str) -> None:
    """A server of its own, on a SQLite file, stopped and started again."""
    database = tmp_path / "temporal.db"
    letter = DeadLetter(
        event=EventEnvelope.new("DeployCommand", "/ops", correlation_id="restart"),
        target_workflow="chain-restart",
        failure_type="invalid_payload",
        message="Invalid payload",
        first_failed_at=datetime.now(UTC),
        last_failed_at=datetime.now(UTC),
    )
    port, ui_port = free_port(), free_port()
    server = partial(embedded_server, port=port, ui_port=ui_port, db_file=database)
    async with server() as env, build_worker(env.client, task_queue):
        await park_dead_letter(env.client, letter, task_queue)
        await parked(env.client, task_queue, 1)
    async with server() as env, build_worker(env.client, task_queue):
        [entry] = await parked(env.client, task_queue, 1)
    assert entry.event == letter.event and entry.status == "parked"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_inline_compensation_agent_is_replayed_as_declared(
    client: Client, task_queue: str
) -> None:
    """A replay runs the agent the saga's spec declared inline, on a worker that allows it."""
    undo = (
        "import json,sys; e=json.load(sys.stdin); sys.exit(0 if e['payload'].get('fixed') else 3)"
    )
    spec = SagaSpec.model_validate(
        {
            "saga_id": f"inline-undo-{uuid.uuid4().hex[:8]}",
            "input": {"inject": {"fail": ["RunTests"]}},
            "agents": {"undo": {"kind": "shell", "argv": ["python3", "-c", undo]}},
            "steps": [
                {
                    "name": "BuildArtifact",
                    "compensation": "undo",
                    "compensation_retry": {"max_retries": 0},
                },
                {"name": "RunTests", "retry": {"max_retries": 0}},
            ],
        }
    )
    allowing = register_demo_agents(AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    async with build_worker(client, task_queue, allowing):
        state = await api.saga_outcome(await api.start_saga(client, spec, queue=task_queue))
        assert state.status == SagaStatus.COMPENSATION_FAILED
        [entry] = await parked(client, task_queue, 1)
        assert entry.agent_config is not None and entry.target_agent == "undo"
        request = ReplayRequest(
            selection=DlqSelection(entry_ids=[entry.entry_id]), payload={"fixed": True}
        )
        [replayed] = await api.dlq_replay(client, request, queue=task_queue)
    assert replayed.status == "replayed", replayed.replays
