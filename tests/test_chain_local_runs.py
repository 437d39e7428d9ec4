"""A chain runs the short in-process agents its worker serves as local activities, as a saga
does: markers in its history (one for a batch of runs starting together), no activity task;
retries, the failure taxonomy and the dead-letter queue as for an activity task; and a chain
that continues as new while its local runs come and go runs each of them exactly once, its every
run replaying from any task."""

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from coord.activities.kinds.demo import register_demo_agents
from coord.infra.payload_store import data_converter
from coord.models.calls import WRITE_LOG_SEGMENT
from coord.models.chain.spec import ChainSpec, ChainState
from coord.models.events.envelope import EventEnvelope
from coord.models.events.log import SEGMENT_ROWS
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import WorkerSettings
from coord.models.mesh.retry import RetryConfig
from coord.models.wire.contract import CLOSE_SIGNAL
from coord.starter import api
from coord.starter.api import chains
from coord.starter.api.chains import SIGNALS_PER_RUN_ENV
from coord.worker import WORKFLOWS, build_worker
from coord.workflows.chain.reactive import RECORDING_TIMER
from tests.helpers import approved, eventually, parked, user_story
from tests.test_agent_placement import (
    LOCAL,
    _agent_tasks,
    _replays_from_every_task,
    local_agent_runs,
)
from tests.test_rewind import FIXED, story_with
from tests.test_rewind import approved as rewind_approved

CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
COMPLETED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
TASK_STARTED = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
TIMER_STARTED = EventType.EVENT_TYPE_TIMER_STARTED
PATCH = "core_patch"
FAST_RETRY = RetryConfig(max_retries=1, initial_delay=timedelta(milliseconds=100), jitter="none")
SIGNALS_PER_RUN = 100
"""The least a chain's input allows: the chain continues as new every 25 history events."""
PINGS = 40
PUBLISHERS = 4


def _fast_story() -> ChainSpec:
    """The user-story chain, each subscription retried once after 100 ms."""
    spec = user_story()
    spec.subscriptions = [
        each.model_copy(update={"retry": FAST_RETRY}) for each in spec.subscriptions
    ]
    return spec


async def test_a_chain_runs_its_python_agents_locally_retries_them_and_parks_a_failure(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"story-{uuid.uuid4().hex[:8]}"
    inject = {
        "fail": ["python-pro"],
        "error_type": "service_unavailable",
        "flaky": {"database-specialist": 1},
    }
    async with build_worker(client, task_queue):
        await api.publish(
            client, approved(correlation_id, inject=inject), spec=_fast_story(), queue=task_queue
        )
        [row] = await parked(client, task_queue, 1)
        entry = await api.dlq_entry(client, row.entry_id)

        async def schema_designed() -> bool:
            timeline = await api.chain_timeline(client, correlation_id)
            return "SchemaDesignCompleted" in {each.event for each in timeline}

        await eventually(schema_designed, 60)
        events = [e async for e in api.chain_handle(client, correlation_id).fetch_history_events()]
    assert entry.failure_type == "service_unavailable", "the agent's own failure type"
    assert entry.attempts == 2 and entry.target_agent == "python-pro" and entry.replay == "rerun"
    assert _agent_tasks(events) == {}, "no activity task for a local agent"
    assert local_agent_runs(events) >= 5, "local runs: 3 first, python-pro, database-specialist"


def _counting_registry(calls: Counter[str]) -> AgentRegistry:
    """`pinger`, a python agent (a local run) that counts its calls by idempotency key."""
    registry = AgentRegistry()

    @registry.register("pinger")
    async def pinger(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        calls[context.idempotency_key] += 1
        await asyncio.sleep(0.02)  # a run may end in a later activation than it began
        return {"n": event.payload["n"]}

    return registry


def _ping_spec() -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "pings",
            "triggers": ["Ping"],
            "subscriptions": [{"agent": "pinger", "events": ["Ping"]}],
            "max_concurrency": 4,
            "alerts": None,
        }
    )


async def _histories(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run's history, from the last back to the first (each names the run it continued)."""
    histories = [await client.get_workflow_handle(workflow_id).fetch_history()]
    while True:
        started = histories[-1].events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return histories
        handle = client.get_workflow_handle(workflow_id, run_id=started.continued_execution_run_id)
        histories.append(await handle.fetch_history())


@pytest.mark.slow
async def test_a_chain_continuing_as_new_among_local_runs_runs_each_once_and_replays(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pings published from several publishers at once into a chain that continues as new
    every few events: signals arrive while it continues, whose task the server then refuses,
    with the markers it carried. Every ping's run ran once, locally, in whichever run."""
    monkeypatch.setenv(SIGNALS_PER_RUN_ENV, str(SIGNALS_PER_RUN))
    correlation_id = f"pings-{uuid.uuid4().hex[:8]}"
    calls: Counter[str] = Counter()
    numbers = iter(range(PINGS))

    async def publisher() -> None:
        for n in numbers:
            ping = EventEnvelope.new(
                "Ping", "/pings", payload={"n": n}, correlation_id=correlation_id
            )
            await api.publish(client, ping, spec=_ping_spec(), queue=task_queue)

    async with build_worker(client, task_queue, _counting_registry(calls)):
        await asyncio.gather(*(publisher() for _ in range(PUBLISHERS)))

        async def all_ran() -> bool:
            return len(calls) >= PINGS

        await eventually(all_ran, 120)
        await api.close_chain(client, correlation_id)
        chain = api.chain_handle(client, correlation_id)
        state: ChainState = await asyncio.wait_for(chain.result(), 60)
    assert state.events_seen >= PINGS
    assert len(calls) == PINGS and set(calls.values()) == {1}, f"each run once: {calls}"
    histories = await _histories(client, chain.id)
    continued = [h for h in histories if list(h.events)[-1].event_type == CONTINUED]
    assert continued, "the chain continued as new"
    events = [event for history in histories for event in history.events]
    assert _agent_tasks(events) == {}
    assert local_agent_runs(events) >= PINGS
    for history in histories:
        events = list(history.events)
        assert _local_runs_recorded_before_the_end(events), "a run ended without its timer"
        await _replays_from_every_task(history)


def _local_runs_recorded_before_the_end(events: list[HistoryEvent]) -> bool:
    """A run that ran agents locally started its recording timer after the last of their
    markers, before it ended: whichever task took the last outcome, the end came in a later
    one."""
    markers = [
        e.event_id for e in events if e.marker_recorded_event_attributes.marker_name == LOCAL
    ]
    if not markers:
        return True
    return any(
        e.event_type == TIMER_STARTED
        and e.event_id > markers[-1]
        and e.user_metadata.summary.data == json.dumps(RECORDING_TIMER).encode()
        for e in events
    )


def _gated_registry(
    calls: Counter[str], started: asyncio.Event, release: asyncio.Event
) -> AgentRegistry:
    """`gate`, a python agent (a local run) that waits for the test, publishing nothing."""
    registry = AgentRegistry()

    @registry.register("gate")
    async def gate(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        calls[context.idempotency_key] += 1
        started.set()
        await release.wait()
        return {}

    return registry


def _last_task_commands(events: list[HistoryEvent]) -> list[HistoryEvent]:
    """What the run's last workflow task recorded: the events after its completion."""
    last = max(i for i, e in enumerate(events) if e.event_type == TASK_COMPLETED)
    return events[last + 1 :]


def _log_written(events: list[HistoryEvent]) -> bool:
    """A log segment's write completed (an activity of the chain)."""
    writes = {
        e.event_id
        for e in events
        if e.activity_task_scheduled_event_attributes.activity_type.name == WRITE_LOG_SEGMENT.name
    }
    return any(
        e.activity_task_completed_event_attributes.scheduled_event_id in writes for e in events
    )


def _close_taken(events: list[HistoryEvent]) -> bool:
    """The `close` signal is in a workflow task handed to the chain's worker: any local run's
    result reaches the chain in that task or a later one. (A signal arriving while a task
    waits for a local run is written once that task completes: at the latest when the worker
    heartbeats the task, most of its timeout later.)"""
    signalled = [
        e.event_id
        for e in events
        if e.workflow_execution_signaled_event_attributes.signal_name == CLOSE_SIGNAL
    ]
    return bool(signalled) and any(
        e.event_type == TASK_STARTED and e.event_id > signalled[0] for e in events
    )


@pytest.mark.slow
async def test_a_chain_ending_in_the_task_its_last_local_run_ends_records_the_run_first(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A closed chain whose last local run publishes nothing, its log written before: it would
    end in the task the run ended in, whose marker the server would drop with the task if a
    signal arrived meanwhile. The run's marker is recorded in an earlier task than the end.
    The test server suggests continuing as new every few hundred events, so the gate may run
    in a run that continues as new once it is over: every run is read, and none may record a
    local run's marker in its last task."""
    spec = ChainSpec.model_validate(
        {
            "name": "gated",
            "triggers": ["Ping", "Note"],
            "subscriptions": [{"agent": "gate", "events": ["Ping"], "publishes": {"events": []}}],
            "alerts": None,
        }
    )
    # The close reaches the chain when the worker heartbeats the task the gate holds, at 80
    # percent of the task's timeout: Temporal's default timeout instead of the chain's longer one.
    monkeypatch.setattr(chains, "CHAIN_TASK_TIMEOUT", timedelta(seconds=10))
    correlation_id = f"gated-{uuid.uuid4().hex[:8]}"
    calls: Counter[str] = Counter()
    started, release = asyncio.Event(), asyncio.Event()
    chain = api.chain_handle(client, correlation_id)
    async with build_worker(client, task_queue, _gated_registry(calls, started, release)):
        for n in range(SEGMENT_ROWS - 1):  # the Ping's row fills a segment: the log is written
            note = EventEnvelope.new(
                "Note", "/notes", payload={"n": n}, correlation_id=correlation_id
            )
            await api.publish(client, note, spec=spec, queue=task_queue)
        ping = EventEnvelope.new("Ping", "/pings", correlation_id=correlation_id)
        await api.publish(client, ping, spec=spec, queue=task_queue)
        await asyncio.wait_for(started.wait(), 60)

        async def log_written() -> bool:
            return _log_written([e async for e in chain.fetch_history_events()])

        await eventually(log_written, 60)
        await api.close_chain(client, correlation_id)

        async def close_taken() -> bool:
            return _close_taken([e async for e in chain.fetch_history_events()])

        await eventually(close_taken, 90)  # the run goes on meanwhile
        release.set()
        state: ChainState = await asyncio.wait_for(chain.result(), 90)
        runs = [list(h.events) for h in await _histories(client, chain.id)]
    assert state.events_seen == SEGMENT_ROWS and state.dead_lettered == 0
    assert list(calls.values()) == [1], "the gate ran once"
    assert sum(local_agent_runs(events) for events in runs) >= 1
    assert all(_agent_tasks(events) == {} for events in runs)
    for events in runs:
        assert not local_agent_runs(_last_task_commands(events)), "the run's marker recorded first"
    assert _last_task_commands(runs[0])[-1].event_type == COMPLETED


STORIES = 20
"""Stories a worker runs at once: local runs then often outlive their workflow task."""


async def test_chains_of_local_and_remote_runs_ask_their_patches_once_and_replay(
    client: Client, task_queue: str
) -> None:
    """A chain of local and remote runs asks every patch it may as it begins
    (`chain-patches-at-once`): one patch marker, in its first workflow task. A local run whose
    marker lands in a later task than the run began (the worker completed the task meanwhile, as
    a busy one does) is recorded after the commands the chain issued on its outcome; a patch
    asked there for the first time (the first remote run's) would put its marker before the
    run's, which a replay meets before it hands the chain that outcome (a nondeterminism
    error). Every story replays, the first from every task (a recorded history holds such a
    late marker: `test_replay`)."""
    allowing = register_demo_agents(AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    ids = [f"mixed{n}-{task_queue}" for n in range(STORIES)]
    async with build_worker(client, task_queue, allowing):
        for correlation_id in ids:
            await api.start_chain(client, story_with(FIXED), correlation_id, queue=task_queue)
            await api.publish(client, rewind_approved(correlation_id))

        async def done() -> bool:
            states = await asyncio.gather(*(api.chain_state(client, c) for c in ids))
            return all(state.terminal_seen for state in states)

        await eventually(done, 300)
        histories = [await api.chain_handle(client, c).fetch_history() for c in ids]
    for history in histories:
        events = list(history.events)
        assert local_agent_runs(events) >= 5 and _agent_tasks(events) != {}, "local and remote runs"
        patches = [e for e in events if e.marker_recorded_event_attributes.marker_name == PATCH]
        assert len(patches) == 1, "one patch marker: the bundle's"
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=data_converter())
    for history in histories:
        await replayer.replay_workflow(history)
    await _replays_from_every_task(histories[0])
