"""What a saga writes into its history: no patch marker when its start carries the saga runtime
version (`start_saga`, `coord saga start`), one for the patches it asks (its newest bundle)
when started without (Temporal CLI, UI); its status as a search attribute at most once per
workflow task, when it differs from what the attribute holds (a saga starts `in_progress`),
written before it waits on anything but a local run and when it ends; no signal to a chain that
does not run (asked with its agents' placements, in one local activity, wherever they run): a
saga of local agents runs in one workflow task, a saga of served agents in as many as the
hand-written one."""

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle

from coord import testing
from coord.activities.events.lookback import ChainLookback
from coord.activities.kinds.demo import register_demo_agents
from coord.activities.mesh.routing import AgentRouter
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.placement import ChainPlacementAsk, Placement
from coord.models.saga.spec import SagaStatus
from coord.models.wire.contract import COORD_STATUS, SAGA_VERSION_MEMO, SAGA_WORKFLOW
from coord.starter import api
from coord.worker import build_worker
from coord.workflows.saga import SAGA_PATCH_BUNDLES
from tests.conftest import feature_deployment
from tests.helpers import demo_agents_remote, failing_at, started_elsewhere, user_story

NEWEST_BUNDLE = SAGA_PATCH_BUNDLES[0][0]
"""The bundle a saga started without a version asks."""

UPSERTED = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
MARKER = EventType.EVENT_TYPE_MARKER_RECORDED
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
SIGNALED = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
CHANGE_VERSION = "TemporalChangeVersion"
"""The search attribute Temporal upserts with each patch marker (not the saga's own write)."""


async def _history(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [event async for event in handle.fetch_history_events()]


def _status_writes(events: list[HistoryEvent]) -> list[tuple[int, int, str]]:
    """The saga's own status writes: each one's event id, the workflow task it was issued in
    (its completed event's id), and the status."""
    writes = []
    for event in events:
        if event.event_type != UPSERTED:
            continue
        attributes = event.upsert_workflow_search_attributes_event_attributes
        fields = attributes.search_attributes.indexed_fields
        if COORD_STATUS.name in fields:
            status = json.loads(fields[COORD_STATUS.name].data)
            writes.append((event.event_id, attributes.workflow_task_completed_event_id, status))
    return writes


def _patch_markers(events: list[HistoryEvent]) -> list[str]:
    return [
        json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)["id"]
        for e in events
        if e.event_type == MARKER and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]


def _local_activities(events: list[HistoryEvent]) -> list[str]:
    markers = [
        e.marker_recorded_event_attributes
        for e in events
        if e.event_type == MARKER
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    return [
        json.loads(m.details["data"].payloads[0].data)["activity_type"]
        for m in markers
        if json.loads(m.details["data"].payloads[0].data)["activity_type"] != "run_agent"
    ]


async def test_a_local_saga_writes_its_status_once_per_workflow_task_and_no_patch_marker(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
        described = await handle.describe()
    assert state.status == SagaStatus.COMPLETED
    events = await _history(handle)
    writes = _status_writes(events)
    assert [status for _, _, status in writes] == ["completed"], "it ran in one workflow task"
    assert described.typed_search_attributes.get(COORD_STATUS) == "completed"
    assert _patch_markers(events) == [], "its start carries its version: nothing asked"
    upserts = sum(1 for e in events if e.event_type == UPSERTED)
    assert upserts == 1, "the status alone: no TemporalChangeVersion without a patch marker"
    assert sum(1 for e in events if e.event_type == TASK_COMPLETED) == 1, "one workflow task"
    assert not any(e.event_type == SIGNALED for e in events), "no chain runs: nothing sent"
    assert _local_activities(events) == ["place_agents_with_chain", "run_agents"], "steps ahead"
    assert len(events) <= 8, f"{len(events)} events"


async def test_a_local_saga_learns_its_chain_runs_with_its_placements_and_sends(
    client: Client, task_queue: str
) -> None:
    spec = feature_deployment()
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, user_story(), spec.correlation_id, queue=task_queue)
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
        await chain.terminate("test over")
    assert state.status == SagaStatus.COMPLETED
    events = await _history(handle)
    assert _local_activities(events) == ["place_agents_with_chain", "run_agents"]
    signalled = sum(1 for e in events if e.event_type == SIGNALED)
    assert signalled == len(state.events) == 5, "each of its events sent to the running chain"


async def test_the_placements_look_up_answers_the_chain_wherever_the_agents_run(
    client: Client,
) -> None:
    correlation_id = testing.unique("story")
    ask = ChainPlacementAsk(agents=["RunE2ETests", "DeployToStaging"], chain_of=correlation_id)
    local = await AgentRouter(
        client, register_demo_agents(AgentRegistry())
    ).place_agents_with_chain(ask)
    assert set(local.agents.values()) == {Placement.LOCAL}
    assert local.chain_runs is False, "no chain runs for a fresh correlation"
    remote = await AgentRouter(client, demo_agents_remote()).place_agents_with_chain(ask)
    assert set(remote.agents.values()) == {Placement.HOME}
    assert remote.chain_runs is False, "answered for agents served as activity tasks too"


def _counted(events: list[HistoryEvent]) -> dict[str, int]:
    counted = Counter(EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in events)
    return dict(sorted(counted.items()))


SERVED_FIVE_STEPS = {
    "ACTIVITY_TASK_COMPLETED": 5,
    "ACTIVITY_TASK_SCHEDULED": 5,
    "ACTIVITY_TASK_STARTED": 5,
    "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES": 1,
    "WORKFLOW_EXECUTION_COMPLETED": 1,
    "WORKFLOW_EXECUTION_STARTED": 1,
    "WORKFLOW_TASK_COMPLETED": 6,
    "WORKFLOW_TASK_SCHEDULED": 6,
    "WORKFLOW_TASK_STARTED": 6,
}
"""A five-step saga of served agents without a chain, started by `start_saga` from the process
hosting its worker: the hand-written saga's 35 events (six workflow tasks, five activities,
start and end) and the final status. No marker: its start says where its agents run and that
no chain runs; no patch marker nor `TemporalChangeVersion` upsert: it carries the saga runtime
version."""


async def test_a_served_saga_records_the_hand_written_sagas_tasks_and_its_status(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue, demo_agents_remote()):
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    events = await _history(handle)
    assert _counted(events) == SERVED_FIVE_STEPS, "no signal to a missing chain, no extra task"
    assert [status for _, _, status in _status_writes(events)] == ["completed"], "started so"
    assert _local_activities(events) == [], "its start said where its agents run"
    assert _patch_markers(events) == []
    assert len(events) == 36
    runs = [
        e.activity_task_scheduled_event_attributes.input.payloads[0].data
        for e in events
        if e.event_type == SCHEDULED
    ]
    assert all(b'"placed":"home"' in run for run in runs), "each checked by its worker"


async def test_a_served_saga_started_elsewhere_asks_its_worker_once(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started from a process without its worker, a saga learns where its agents run, and
    whether its chain runs, in one local activity: one marker more."""
    started_elsewhere(monkeypatch)
    async with build_worker(client, task_queue, demo_agents_remote()):
        handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    events = await _history(handle)
    assert _counted(events) == {**SERVED_FIVE_STEPS, "MARKER_RECORDED": 1}
    assert _local_activities(events) == ["place_agents_with_chain"], "one look-up for both"
    assert len(events) == 37


async def test_a_saga_started_without_its_status_writes_in_progress_before_it_waits(
    client: Client, task_queue: str
) -> None:
    """As the Temporal CLI or UI would start one: no search attributes at start."""
    spec = feature_deployment()
    spec.steps = spec.steps[:2]
    async with build_worker(client, task_queue, demo_agents_remote()):
        await client.start_workflow(
            SAGA_WORKFLOW, spec.model_dump(mode="json"), id=spec.workflow_id, task_queue=task_queue
        )
        handle = api.saga_handle(client, spec.saga_id)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    events = await _history(handle)
    writes = _status_writes(events)
    assert [status for _, _, status in writes] == ["in_progress", "completed"]
    tasks = [task for _, task, _ in writes]
    assert len(tasks) == len(set(tasks)), f"one status write per workflow task: {writes}"
    first_run = next(e.event_id for e in events if e.event_type == SCHEDULED)
    assert writes[0][0] < first_run, "the status is written before the saga waits on its run"
    assert not any(e.event_type == SIGNALED for e in events), "no chain runs: nothing sent"
    assert _local_activities(events) == ["place_agents_with_chain"], "one look-up for both"
    assert _patch_markers(events) == [NEWEST_BUNDLE], "no version: its bundle asked"


async def test_a_local_saga_that_unwinds_writes_each_status_once_per_workflow_task(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await api.start_saga(client, failing_at("DeployToProduction"), queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
        described = await handle.describe()
    assert state.status == SagaStatus.COMPENSATED
    assert [c.compensate for c in state.compensations] == [
        "RollbackProduction",
        "RemoveFromStaging",
    ]
    writes = _status_writes(await _history(handle))
    tasks = [task for _, task, _ in writes]
    assert len(tasks) == len(set(tasks)), f"one status write per workflow task: {writes}"
    assert writes[-1][2] == "compensated"
    assert described.typed_search_attributes.get(COORD_STATUS) == "compensated"


async def test_whether_a_chain_runs_is_read_from_the_server(
    client: Client, task_queue: str
) -> None:
    lookback = ChainLookback(client)
    correlation_id = testing.unique("story")
    assert not await lookback.chain_running(correlation_id), "never started"
    async with build_worker(client, task_queue):
        chain = await api.start_chain(client, user_story(), correlation_id, queue=task_queue)
        assert await lookback.chain_running(correlation_id)
        await chain.terminate("test over")
    assert not await lookback.chain_running(correlation_id), "ended"


async def test_a_saga_whose_start_carries_an_unknown_version_asks_its_patches(
    client: Client, task_queue: str
) -> None:
    """A start is not trusted: a version this code does not know, or not a number, is a start
    without one (the run asks its bundle), never a failed workflow task."""
    async with build_worker(client, task_queue):
        for version in (99, "3", True, {"v": 3}):
            spec = feature_deployment()
            await client.start_workflow(
                SAGA_WORKFLOW,
                spec.model_dump(mode="json"),
                id=spec.workflow_id,
                task_queue=task_queue,
                memo={SAGA_VERSION_MEMO: version},
            )
            handle = api.saga_handle(client, spec.saga_id)
            state = await asyncio.wait_for(api.saga_outcome(handle), 60)
            assert state.status == SagaStatus.COMPLETED, version
            events = await _history(handle)
            assert _patch_markers(events) == [NEWEST_BUNDLE], version
            assert sum(1 for e in events if e.event_type == TASK_COMPLETED) == 1, version
