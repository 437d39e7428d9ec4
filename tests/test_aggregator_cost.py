"""What an aggregator's run costs in its history, whatever the machine's load: a flood of events
costs its signals and the workflow tasks that take them in, and a run issues a fixed handful of
commands, none of them per event (the `aggregator-patches-at-once` bundle: one patch marker,
no status upsert at start where the starter set it, the deadline timer left to lapse); and
what its workflow code does per event, counted (not timed) over a recorded flood's replay."""

import cProfile
import pstats
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.worker import Interceptor, WorkflowInboundInterceptor, WorkflowInterceptorClassInput

from bench.aggregator_replay import NOT_COMMANDS
from bench.saga_replay import replay_cpu
from coord.models.aggregator.spec import AggregatorSpec, AggregatorStatus
from coord.models.events.envelope import EventEnvelope
from coord.models.wire import contract
from coord.starter import api
from coord.worker import build_worker
from coord.workflows._runtime.interceptor import SurplusArguments
from tests.conftest import HISTORIES
from tests.helpers import eventually, signal


def waiting_for_done() -> AggregatorSpec:
    return AggregatorSpec.model_validate(
        {
            "aggregator_id": f"cost-{uuid.uuid4().hex[:8]}",
            "wait_for": [{"type": "Done"}],
            "timeout": "1h",
            "on_complete": "AllDone",
            "on_timeout": "TimedOut",
        }
    )


async def commands(handle: WorkflowHandle[Any, Any]) -> Counter[str]:
    history = await handle.fetch_history()
    return Counter(
        EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        for event in history.events
        if event.event_type not in NOT_COMMANDS
    )


async def test_a_flood_taken_in_one_task_costs_four_commands_none_per_event(
    client: Client, task_queue: str
) -> None:
    """Forty events that match nothing, then the one awaited, all sent before a worker runs
    (so one workflow task takes them in): the run's commands are the patch bundle's marker and
    its `TemporalChangeVersion` upsert, the final status and the completion; the deadline timer
    armed and cancelled in the same task is never sent. Runs recorded before issued seven (a
    marker and an upsert per patch, the status upserted at start as well)."""
    noise = [EventEnvelope.new("Noise", "/flood", payload={"n": n}) for n in range(40)]
    handle = await api.start_aggregator(client, waiting_for_done(), queue=task_queue)
    await signal(handle, *noise, EventEnvelope.new("Done", "/flood"))
    async with build_worker(client, task_queue):
        state = await handle.result()
    assert state.status == AggregatorStatus.COMPLETED
    assert (state.received, state.matched, state.unmatched) == (41, 1, 40)
    assert await commands(handle) == {
        "MARKER_RECORDED": 1,
        "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES": 2,
        "WORKFLOW_EXECUTION_COMPLETED": 1,
    }
    described = (await handle.describe()).typed_search_attributes
    assert described.get(contract.COORD_STATUS) == "completed"


async def test_events_after_the_first_task_leave_the_deadline_timer_to_lapse(
    client: Client, task_queue: str
) -> None:
    """The awaited event arrives in a later workflow task: the deadline timer, started in the
    first, is not cancelled (the run ends anyway), so the run issues five commands; runs
    recorded before issued nine (the timer cancelled too)."""
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, waiting_for_done(), queue=task_queue)

        async def timer_started() -> bool:
            kinds = await commands(handle)
            return kinds["TIMER_STARTED"] == 1

        await eventually(timer_started)
        await signal(
            handle, EventEnvelope.new("Noise", "/late"), EventEnvelope.new("Done", "/late")
        )
        state = await handle.result()
    assert state.status == AggregatorStatus.COMPLETED
    assert await commands(handle) == {
        "MARKER_RECORDED": 1,
        "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES": 2,
        "TIMER_STARTED": 1,
        "WORKFLOW_EXECUTION_COMPLETED": 1,
    }


async def test_a_run_started_without_its_search_attributes_writes_them_at_start(
    client: Client, task_queue: str
) -> None:
    """Started by a client that set none (the Temporal CLI, a script): the run upserts what it
    is found by at start, since only what differs from the run's own is left out."""
    spec = waiting_for_done()
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            contract.AGGREGATOR_WORKFLOW,
            spec.model_dump(mode="json"),
            id=spec.workflow_id,
            task_queue=task_queue,
        )

        async def found_waiting() -> bool:
            found = (await handle.describe()).typed_search_attributes
            return found.get(contract.COORD_STATUS) == "waiting"

        await eventually(found_waiting)
        described = (await handle.describe()).typed_search_attributes
        assert described.get(contract.COORD_PATTERN) == "aggregator"
        await signal(handle, EventEnvelope.new("Done", "/script"))
        await handle.result()
    assert (await commands(handle))["UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"] == 3


class Behind(Interceptor):
    """A workflow interceptor that passes everything on, placed after `SurplusArguments`."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return WorkflowInboundInterceptor


def calls_per_replay(
    history: WorkflowHistory, interceptors: list[Interceptor] | None = None
) -> Counter[str]:
    """How often the workflow code called each function in one replay of `history`, by the
    profiler's count (`bench.saga_replay.replay_cpu` replays it twice: once to warm up), with
    no hand-written workflow beside the project's to validate in the SDK's sandbox."""
    profile = cProfile.Profile()
    replay_cpu(history, 1, profile, baselines=(), interceptors=interceptors)
    counted: Counter[str] = Counter()
    for (path, _, function), (_, calls, *_) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        counted[f"{Path(path).name}:{function}"] += calls // 2
    return counted


def flood() -> tuple[WorkflowHistory, int]:
    """A flood recorded before the bundle (41 signals in one workflow task) and its signals."""
    path = HISTORIES / "Aggregator" / "aggregator-flood-recorded-before-the-bundle.json"
    history = WorkflowHistory.from_json("flood", path.read_text())
    signals = sum(
        1
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    )
    assert signals == 41
    return history, signals


def test_the_workflow_code_does_no_bookkeeping_per_event_it_can_do_per_task() -> None:
    """The flood, replayed: the UI details are built when the join changes, not per event;
    the metrics are recorded once per workflow task, not per event; the signal's handler is
    looked up once per run and name, not at every signal."""
    history, _ = flood()
    calls = calls_per_replay(history)
    assert calls["model.py:details"] < 10
    assert calls["metrics.py:record"] < 10
    assert calls["_workflow_instance.py:workflow_get_signal_handler"] <= 2


def test_a_signal_costs_its_handler_and_the_envelope_s_validation_little_more() -> None:
    """The flood, replayed: the interceptor calls the handler it bound once per run (the
    SDK's last step bound it at every signal and asked twice whether it is a coroutine
    function, 41 and 82 times); a flat payload's depth is told without walking it (42 walks);
    the workflow's clock is read for the events that fill a slot, not for each (45 reads);
    and the workflow code makes fewer than 300 function calls per event (381 before)."""
    history, signals = flood()
    calls = calls_per_replay(history)
    assert calls["_handlers.py:_bind_method"] <= 2
    assert calls["inspect.py:iscoroutinefunction"] <= 4
    assert calls["specs.py:json_depth"] < 10
    assert calls["_context.py:now"] < 10
    assert sum(calls.values()) / signals < 300


def test_behind_another_interceptor_the_sdk_calls_the_handlers() -> None:
    """Only the innermost interceptor may call a handler itself: behind it, another would be
    passed by. Placed before one, `SurplusArguments` leaves the call to the SDK."""
    history, signals = flood()
    calls = calls_per_replay(history, [SurplusArguments(), Behind()])
    assert calls["_handlers.py:_bind_method"] >= signals
