"""The dead-letter queue: what fails for good is parked, can be fixed and replayed, or archived.

Each entry is its own `DeadLetterEntry` workflow, listed and counted through visibility."""

import asyncio
import json
import socket
import uuid
from collections import Counter
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

import coord.worker
from coord.activities.events.dead_letters import DeadLetterActivities
from coord.activities.kinds.demo import register_demo_agents
from coord.infra.dead_letters import park_dead_letter
from coord.infra.devserver import embedded_server
from coord.models.calls import PARK_DEAD_LETTER
from coord.models.chain.spec import ChainSpec, ChainStatus
from coord.models.dlq.letter import (
    DeadLetter,
    DlqEntry,
    DlqSelection,
    dead_letter_id,
)
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.config import WorkerSettings
from coord.models.saga.spec import SagaSpec, SagaStatus
from coord.models.wire import contract
from coord.models.wire.specs import SpecError
from coord.starter import api
from coord.worker import build_worker
from tests.conftest import ROOT, feature_deployment
from tests.helpers import (
    approved,
    eventually,
    history_events,
    letter,
    parked,
    routing_spec,
    run_chain,
    unserved_replays_end_soon,
    user_story,
)


async def test_failed_agent_is_parked_then_fixed_and_replayed_and_the_chain_continues(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    poisoned = {"inject": {"fail": ["python-pro"], "error_type": "invalid_payload"}}
    async with build_worker(client, task_queue):
        await api.publish(
            client, approved(correlation_id, **poisoned), spec=user_story(), queue=task_queue
        )
        [row] = await parked(client, task_queue, 1)
        assert row.action == "Fix and replay"
        entry = await api.dlq_entry(client, row.entry_id)
        assert entry.failure_type == "invalid_payload" and entry.attempts == 1
        assert entry.target_workflow == f"chain-{correlation_id}"
        assert entry.target_agent == "python-pro" and entry.replay == "rerun"
        assert entry.event is not None and entry.event.event.type == "APIDesignCompleted"

        async def announced() -> bool:
            timeline = await api.chain_timeline(client, correlation_id)
            return "EventDeadLettered" in [e.event for e in timeline]

        await eventually(announced)
        fixed = {k: v for k, v in entry.event.payload.items() if k != "inject"}
        replayed = await api.dlq_replay(client, entry.entry_id, fixed)
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
        [row] = await parked(client, task_queue, 1)
        entry = await api.dlq_entry(client, row.entry_id)
        assert entry.failure_type == "invalid_envelope" and entry.raw == raw
        assert "event.source: Field required" in entry.message
        with pytest.raises(api.Undeliverable, match=r"holds no event to deliver .*; archive it"):
            await api.dlq_replay(client, row.entry_id)
        chosen = await api.dlq_selected(
            client, DlqSelection(failure_type="invalid_envelope"), queue=task_queue
        )
        [archived] = await api.dlq_archive_many(client, chosen, "hand-written test JSON")
        await parked(client, task_queue, 1, DlqSelection(status="archived"))
        counts = await api.dlq_counts(client, queue=task_queue)
        with pytest.raises(api.Undeliverable, match="is archived, not parked"):
            await api.dlq_archive(client, row.entry_id, "again")
        record = await api.dlq_entry(client, row.entry_id)
    assert (archived.status, archived.detail) == ("archived", "hand-written test JSON")
    assert record.status == "archived" and record.archive_note == "hand-written test JSON"
    assert (counts.total.parked, counts.total.archived) == (0, 1)
    assert counts.by_failure_type["invalid_envelope"].archived == 1


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
        [row] = await parked(client, task_queue, 1)
        entry = await api.dlq_entry(client, row.entry_id)
        assert (entry.failure_type, entry.target_agent, entry.replay) == (
            "compensation_failed",
            "RollbackProduction",
            "run_agent",
        )
        assert entry.attempts == 2
        assert entry.first_failed_at < entry.last_failed_at < entry.parked_at
        replayed = await api.dlq_replay(client, entry.entry_id, {"feature": "xyz"})
    assert replayed.status == "replayed"


async def test_agent_that_hits_temporals_timeout_is_parked_with_its_real_attempts(
    client: Client, task_queue: str
) -> None:
    """max_retries 3 is 4 attempts; a timeout is Temporal's, so the agent could not say so."""
    spec = ChainSpec.model_validate(
        {
            "name": "slow",
            "triggers": ["A"],
            "alerts": None,
            "subscriptions": [
                {
                    "agent": "python-pro",
                    "events": "A",
                    "timeout": "500ms",
                    "retry": {"max_retries": 3, "initial_delay": "100ms", "max_delay": "100ms"},
                }
            ],
        }
    )
    slow = EventEnvelope.new("A", "/t", payload={"inject": {"slow": {"python-pro": 5}}})
    async with build_worker(client, task_queue):
        await run_chain(client, task_queue, spec, [slow])
        [row] = await parked(client, task_queue, 1)
    assert (row.failure_type, row.attempts, row.action) == ("timeout", 4, "Investigate")


async def test_a_chain_run_that_failed_after_retries_is_dated_by_its_attempts(
    client: Client, task_queue: str
) -> None:
    """Three attempts, half a second apart: the letter says when the first and the last
    failed, as the worker reported them, not when it was parked."""
    spec = ChainSpec.model_validate(
        {
            "name": "failing",
            "triggers": ["A"],
            "alerts": None,
            "subscriptions": [
                {
                    "agent": "python-pro",
                    "events": "A",
                    "retry": {
                        "max_retries": 2,
                        "initial_delay": "500ms",
                        "max_delay": "500ms",
                        "jitter": "none",
                    },
                }
            ],
        }
    )
    failing = EventEnvelope.new("A", "/t", payload={"inject": {"fail": ["python-pro"]}})
    async with build_worker(client, task_queue):
        await run_chain(client, task_queue, spec, [failing])
        [row] = await parked(client, task_queue, 1)
        entry = await api.dlq_entry(client, row.entry_id)
    assert (entry.failure_type, entry.attempts) == ("temporary_failure", 3)
    assert entry.first_failed_at < entry.last_failed_at < entry.parked_at
    assert entry.last_failed_at - entry.first_failed_at >= timedelta(seconds=0.9)


async def test_publishing_to_an_ended_chain_parks_the_event_once(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(handle.result(), 30)
        late = EventEnvelope.new("A", "/late", correlation_id=correlation_id)
        for _ in range(2):
            with pytest.raises(api.Undeliverable, match="parked as dead letter dlq-"):
                await api.publish(client, late)
        [row] = await parked(client, task_queue, 1)
        entry = await api.dlq_entry(client, row.entry_id)
        runs = [e async for e in client.list_workflows(f"WorkflowId = '{row.entry_id}'")]
    assert entry.failure_type == "target_ended" and entry.event == late
    assert len(runs) == 1, "parking the same failure twice finds the same entry"


class FirstCompletionLost(DeadLetterActivities):
    """The worker's parks, each of whose first attempt starts the entry and then fails, as one
    whose completion never reached the server does: the server tries that park again."""

    @activity.defn(name=PARK_DEAD_LETTER.name)
    async def park(self, letter: DeadLetter) -> str:
        entry_id = await super().park(letter)
        if activity.info().attempt == 1:
            raise ApplicationError("the park's completion was lost")
        return entry_id


async def test_each_rejection_is_its_own_entry_and_a_retried_park_is_one(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same bad signal twice (`null`, no input, the same malformed JSON) is two rejections:
    two entries, as many as the chain counts dead-lettered. Each park is tried twice, and the
    retry finds the entry its first attempt started."""
    monkeypatch.setattr(coord.worker, "DeadLetterActivities", FirstCompletionLost)
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    malformed = {"event": {"type": "A"}, "payload": "not an object"}
    selection = DlqSelection(correlation_id=correlation_id)
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        for args in ([None], [None], [], [], [malformed], [malformed]):
            await chain.signal(contract.EVENT_SIGNAL, args=args)

        async def all_parked() -> bool:
            history = await chain.fetch_history()
            return (
                sum(e.HasField("activity_task_completed_event_attributes") for e in history.events)
                >= 6
            )

        await eventually(all_parked, timeout=60)
        await parked(client, task_queue, 6, selection)
        rows = await api.dlq_entries(client, selection, queue=task_queue)
        state = await api.chain_state(client, correlation_id)
        history = await chain.fetch_history()
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert attempts == [2] * 6, "every park was tried again after its lost completion"
    assert len({row.entry_id for row in rows}) == len(rows) == 6
    assert state.rejected_count == state.dead_lettered == 6
    messages = Counter(row.message for row in rows)
    assert sorted(messages.values()) == [2, 2, 2], messages
    assert "event: no input given" in messages


async def test_concurrent_replays_and_archives_of_one_entry_have_exactly_one_effect(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        entry_id = await park_dead_letter(
            client, letter(chain.id, event_type="A", correlation_id=correlation_id), task_queue
        )
        attempts = [api.dlq_replay(client, entry_id) for _ in range(6)]
        attempts += [api.dlq_archive(client, entry_id, f"note {n}") for n in range(6)]
        results = await asyncio.gather(*attempts, return_exceptions=True)
        done = [r for r in results if isinstance(r, DlqEntry)]
        refused = [r for r in results if isinstance(r, api.Undeliverable)]
        history = await history_events(client.get_workflow_handle(entry_id))
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(chain.result(), 30)
        timeline = await api.chain_timeline(client, correlation_id)
    assert len(done) == 1 and len(refused) == len(attempts) - 1, results
    assert all("not parked" in str(r) for r in refused)
    redeliveries = history.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    delivered = [e for e in timeline if e.event == "A"]
    if done[0].status == "replayed":
        assert redeliveries == len(delivered) == 1
    else:
        assert done[0].status == "archived" and redeliveries == len(delivered) == 0


async def test_entries_are_listed_page_by_page_counted_and_replayed_in_bulk(
    client: Client, task_queue: str
) -> None:
    """A few hundred entries here; `python -m bench.dlq_bench` shows 20,000."""
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    kinds = ["invalid_payload", "timeout", "temporary_failure"]
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        letters = [
            letter(
                chain.id,
                event_type="A" if n % 2 else "B",
                topic="project.tasks",
                correlation_id=correlation_id,
                failure_type=kinds[n % 3],
            )
            for n in range(300)
        ]
        await asyncio.gather(*(park_dead_letter(client, x, task_queue) for x in letters))
        await parked(client, task_queue, 300)
        pages, cursor = [], None
        while True:
            page = await api.dlq_page(client, page_size=70, cursor=cursor, queue=task_queue)
            pages.append(page.entries)
            if not (cursor := page.next_cursor):
                break
        counts = await api.dlq_counts(client, queue=task_queue)
        filtered = await api.dlq_entries(
            client, DlqSelection(failure_type="timeout", type="A"), queue=task_queue
        )
        chosen = await api.dlq_selected(
            client, DlqSelection(failure_type="invalid_payload"), queue=task_queue
        )
        outcomes = await api.dlq_replay_many(client, chosen)

        async def all_received() -> bool:
            return (await api.chain_state(client, correlation_id)).received >= 100

        await eventually(all_received)
    assert [len(p) for p in pages] == [70, 70, 70, 70, 20]
    assert len({e.entry_id for p in pages for e in p}) == 300
    assert {e.entry_id for p in pages for e in p} == {dead_letter_id(x) for x in letters}
    assert {kind: c.parked for kind, c in counts.by_failure_type.items()} == dict.fromkeys(
        kinds, 100
    )
    assert counts.total.parked == 300
    assert len(filtered) == 50 and {e.event_type for e in filtered} == {"A"}
    assert len(outcomes) == 100 and {o.status for o in outcomes} == {"replayed"}


async def test_an_entry_no_worker_takes_up_in_time_is_reported_and_the_others_replay(
    client: Client, task_queue: str
) -> None:
    """One entry of a bulk replay lives on a queue no worker polls, so its update's RPC times out
    for real: that entry is reported, the others replay. The server keeps the timed-out update,
    so once a worker serves the entry it replays, and asking again meanwhile is harmless: the
    entry is replayed once."""
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    unserved = f"{task_queue}-unserved"
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        served = [
            await park_dead_letter(client, letter(chain.id, event_type="Z"), task_queue)
            for _ in range(3)
        ]
        stuck = await park_dead_letter(client, letter(chain.id, event_type="Z"), unserved)
        outcomes = await api.dlq_replay_many(
            client, [stuck, *served], answer_time=timedelta(seconds=2)
        )
        async with build_worker(client, unserved):
            again = await api.dlq_replay_many(client, [stuck])

            async def settled() -> bool:
                return (await api.dlq_entry(client, stuck)).status == "replayed"

            await eventually(settled)
            history = await history_events(client.get_workflow_handle(stuck))
    by_entry = {outcome.entry_id: outcome for outcome in outcomes}
    assert by_entry[stuck].status is None
    assert "no worker took it up in time" in by_entry[stuck].detail
    assert [by_entry[entry_id].status for entry_id in served] == ["replayed"] * 3
    assert again[0].status == "replayed" or "not parked" in again[0].detail, again
    assert history.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) == 1


async def test_a_cursor_from_elsewhere_is_refused_in_one_line(client: Client) -> None:
    with pytest.raises(SpecError, match="--cursor: not a cursor printed by"):
        await api.dlq_page(client, cursor="bm90IGEgY3Vyc29y")


async def test_parked_event_is_announced_once_with_its_cause_and_depth_but_never_a_notice(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        ordinary = letter("chain-x", correlation_id=correlation_id, causation_depth=2)
        notice = letter("chain-x", event_type="EventDeadLettered", correlation_id=correlation_id)
        for parked_letter in (ordinary, notice):
            await park_dead_letter(client, parked_letter, task_queue)
        await parked(client, task_queue, 2)

        async def both_settled() -> bool:
            for parked_letter in (ordinary, notice):
                events = await history_events(
                    client.get_workflow_handle(dead_letter_id(parked_letter))
                )
                if EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED not in events:
                    return False
            return True

        await eventually(both_settled)
        notice_history = await history_events(client.get_workflow_handle(dead_letter_id(notice)))
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(chain.result(), 30)
        timeline = await api.chain_timeline(client, correlation_id)
    announced = [e for e in timeline if e.event == "EventDeadLettered"]
    assert ordinary.event is not None and len(announced) == 1
    assert announced[0].causation_id == ordinary.event.event.id
    assert EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED not in notice_history


async def test_entry_shows_current_details_and_coordination_attributes(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        entry_id = await park_dead_letter(client, letter("chain-gone", topic="t"), task_queue)
        handle = client.get_workflow_handle(entry_id)

        async def detailed() -> bool:
            metadata = await handle.query(
                "__temporal_workflow_metadata", result_type=WorkflowMetadata
            )
            return "**Status:** parked" in metadata.current_details

        await eventually(detailed)
        description = await handle.describe()
    assert description.workflow_type == contract.DEAD_LETTER_WORKFLOW
    attributes = description.typed_search_attributes
    assert attributes.get(contract.COORD_PATTERN) == "dlq"
    assert attributes.get(contract.COORD_STATUS) == "parked"
    assert attributes.get(contract.FAILURE_TYPE) == "invalid_payload"
    assert attributes.get(contract.EVENT_TYPE) == "DeployCommand"
    assert attributes.get(contract.TOPIC) == "t"


async def test_an_entry_parked_from_outside_cannot_declare_the_agent_a_replay_runs(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead letter carrying an agent declaration is not a dead letter: it is kept raw, and
    cannot be replayed; one naming an agent runs only what the worker or the saga declares."""
    unserved_replays_end_soon(monkeypatch)
    hostile = letter("saga-nowhere", replay="run_agent", target_agent="rm-everything")
    smuggled = {
        **hostile.model_dump(mode="json"),
        "agent_config": {"kind": "shell", "argv": ["sh", "-c", "touch /tmp/owned"]},
    }
    async with build_worker(client, task_queue):
        raw = await client.start_workflow(
            contract.DEAD_LETTER_WORKFLOW,
            smuggled,
            id=f"dlq-raw-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        named = await park_dead_letter(client, hostile, task_queue)
        await parked(client, task_queue, 2)
        with pytest.raises(api.Undeliverable, match=r"holds no event to deliver .*; archive it"):
            await api.dlq_replay(client, raw.id)
        unknown = await api.dlq_replay(client, named)
        smuggled_entry = await api.dlq_entry(client, raw.id)
    assert smuggled_entry.failure_type == "invalid_dead_letter"
    assert unknown.status == "parked"
    assert "rm-everything" in unknown.replays[-1].outcome, unknown.replays


@pytest.mark.parametrize(
    ("update", "request_", "message"),
    [
        ("replay", {"payload": "notadict"}, "request: payload: Input should be a valid dictionary"),
        ("archive", {"note": 123}, "request: note: Input should be a valid string"),
        ("archive", {}, "request: note: Field required"),
        (
            "replay",
            {"payload": json.loads('{"a": ' * 33 + "{}" + "}" * 33)},
            "request: payload: nested deeper than 32 levels",
        ),
    ],
)
async def test_a_malformed_update_is_refused_in_one_line_naming_the_field(
    client: Client, task_queue: str, update: str, request_: dict[str, Any], message: str
) -> None:
    """As the Temporal CLI may send it: refused by the validator, typed, not retried."""
    async with build_worker(client, task_queue):
        entry = await park_dead_letter(client, letter("chain-nowhere"), task_queue)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await client.get_workflow_handle(entry).execute_update(update, request_)
        still = await api.dlq_entry(client, entry)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable, cause.message) == ("invalid_input", True, message)
    assert still.status == "parked"


async def test_an_id_of_another_kind_or_none_is_no_dead_letter(
    client: Client, task_queue: str
) -> None:
    """`coord dlq show chain-x` said "Query handler for 'entry' expected but not found" (exit 70)
    and a saga's id printed its record's validation errors."""
    async with build_worker(client, task_queue):
        correlation_id = f"c-{uuid.uuid4().hex[:8]}"
        chain = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        for named in (chain.id, "", "dlq-nothing-here"):
            with pytest.raises(api.NotFound, match=rf"^no dead letter '{named}'$"):
                await api.dlq_entry(client, named)
            with pytest.raises(api.NotFound, match=rf"^no dead letter '{named}'$"):
                await api.dlq_replay(client, named)
        await api.close_chain(client, correlation_id)


async def test_a_replay_to_a_workflow_that_takes_no_events_stays_parked(
    client: Client, task_queue: str
) -> None:
    """An entry may name any workflow as its target (whoever parks one is not trusted): one
    that would record the event and drop it is not delivered to, and the entry says why."""
    async with build_worker(client, task_queue):
        bystander = await park_dead_letter(client, letter("chain-nowhere"), task_queue)
        misdirected = await park_dead_letter(client, letter(bystander), task_queue)
        await parked(client, task_queue, 2)
        replayed = await api.dlq_replay(client, misdirected)
    assert replayed.status == "parked"
    assert replayed.replays[-1].outcome == (
        f"not delivered: target_unavailable: {bystander} is a DeadLetterEntry, "
        "which takes no `event` signal: archive the entry"
    )


@pytest.mark.slow
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
        # Eight senders at once, as several publishers are (one by one, the 1000 round trips
        # took 18 s), each event sent in its turn: the duplicates well after their originals.
        senders = asyncio.Semaphore(8)

        async def send(raw: dict[str, Any]) -> None:
            async with senders:
                await handle.signal("event", raw)

        await asyncio.gather(*map(send, [*valid, *valid[:100], *invalid, *foreign]))
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
    restart = letter("chain-restart", correlation_id="restart")
    port, ui_port = free_port(), free_port()
    server = partial(embedded_server, port=port, ui_port=ui_port, db_file=database)
    async with server() as env, build_worker(env.client, task_queue):
        await park_dead_letter(env.client, restart, task_queue)
        await parked(env.client, task_queue, 1)
    async with server() as env, build_worker(env.client, task_queue):
        [row] = await parked(env.client, task_queue, 1)
        entry = await api.dlq_entry(env.client, row.entry_id)
    assert entry.event == restart.event and entry.status == "parked"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_inline_compensation_agent_is_replayed_as_its_saga_declared_it(
    client: Client, task_queue: str
) -> None:
    """A replay runs the agent the saga's spec declared inline, on a worker that allows it:
    the declaration is read from the saga's own start, not carried by the entry."""
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
        [row] = await parked(client, task_queue, 1)
        assert row.target_agent == "undo"
        replayed = await api.dlq_replay(client, row.entry_id, {"fixed": True})
    assert replayed.status == "replayed", replayed.replays


def test_compose_registers_every_search_attribute() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    setup = compose["services"]["temporal-create-namespace"]["environment"]
    names = [entry.partition(":")[0] for entry in setup["SEARCH_ATTRIBUTES"].split()]
    assert names == [key.name for key in contract.SEARCH_ATTRIBUTES]
    assert "CoordAgents:KeywordList" in setup["SEARCH_ATTRIBUTES"].split()
