"""What the benches measure besides raw rates: the layout an agent run is dispatched in, and
where a run's time went, read from its history.

The single-queue layout is how the project dispatched agents before they had queues of their
own: every `run_agent` on the workflow's own task queue, run by its worker. The
bench gets it without a second copy of the project: a worker interceptor, carried by a client
of its own, sends `run_agent` back to the workflow's queue (as runs recorded before the
`agents-on-their-own-task-queues` patch still do), so the workflows, activities and workers
are the project's own, only the dispatch differs.
"""

import statistics
from dataclasses import dataclass, replace
from typing import Any

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, Interceptor, WorkflowHistory
from temporalio.worker import Interceptor as WorkerInterceptor
from temporalio.worker import (
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

with workflow.unsafe.imports_passed_through():
    from coord.models.wire.contract import RUN_AGENT_ACTIVITY


class _OwnQueueOutbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        if input.activity == RUN_AGENT_ACTIVITY:
            input = replace(input, task_queue=None, schedule_to_start_timeout=None)
        return super().start_activity(input)


class _OwnQueueInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_OwnQueueOutbound(outbound))


class SingleQueue(Interceptor, WorkerInterceptor):
    """Every `run_agent` on the workflow's own task queue (the layout before agent queues)."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _OwnQueueInbound


def single_queue_client(client: Client) -> Client:
    """A client on the same connection whose workers dispatch agent runs single-queue."""
    config = client.config()
    config["interceptors"] = [*config["interceptors"], SingleQueue()]
    return Client(**config)


# Where a run's time went.

ACTIVITY_CLOSED = frozenset(
    {
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
    }
)


@dataclass
class Phases:
    """A run's history in numbers: how long its activity tasks and workflow tasks waited to be
    picked up (the server's matching, or none for an activity handed over eagerly with the
    workflow task that scheduled it), how long its workflow tasks took on the worker, the most
    activities in flight at once, and its length in history events."""

    activity_waits: list[float]
    workflow_task_waits: list[float]
    workflow_task_runs: list[float]
    peak_running: int = 0
    events: int = 0

    def line(self) -> str:
        def mean_ms(values: list[float]) -> str:
            return f"{1000 * statistics.mean(values):.1f} ms" if values else "-"

        return (
            f"activities waited {mean_ms(self.activity_waits)} on average; "
            f"{len(self.workflow_task_runs)} workflow tasks waited "
            f"{sum(self.workflow_task_waits):.2f} s "
            f"and ran {sum(self.workflow_task_runs):.2f} s in all"
        )


def _seconds(event: HistoryEvent) -> float:
    return event.event_time.ToNanoseconds() / 1e9


async def phases(client: Client, workflow_id: str) -> Phases:
    """The run's `Phases`, from its history."""
    scheduled: dict[int, float] = {}
    in_flight = 0
    found = Phases([], [], [])
    task_scheduled = task_started = 0.0
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        kind, at = event.event_type, _seconds(event)
        found.events += 1
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = at
            in_flight += 1
            found.peak_running = max(found.peak_running, in_flight)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            found.activity_waits.append(at - scheduled[started.scheduled_event_id])
        elif kind in ACTIVITY_CLOSED:
            in_flight -= 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            task_scheduled = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            task_started = at
            found.workflow_task_waits.append(at - task_scheduled)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            found.workflow_task_runs.append(at - task_started)
    return found


@dataclass
class HistoryProfile:
    """A run's history by what it recorded: its events by type, and the bytes of the payloads
    it carried (inputs, results, details, memo, search attributes, markers)."""

    events: dict[str, int]
    payload_bytes: int

    def line(self) -> str:
        short = {name.removeprefix("EVENT_TYPE_").lower(): n for name, n in self.events.items()}
        kinds = ", ".join(f"{name} {n}" for name, n in sorted(short.items(), key=lambda kv: -kv[1]))
        return f"{sum(self.events.values())} events, {self.payload_bytes} payload bytes ({kinds})"


async def history_profile(client: Client, workflow_id: str) -> HistoryProfile:
    """The run's `HistoryProfile`, from its history."""
    events: dict[str, int] = {}
    size = 0
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        name = EventType.Name(event.event_type)
        events[name] = events.get(name, 0) + 1
        size += _payload_bytes(event)
    return HistoryProfile(events, size)


def _payload_bytes(event: HistoryEvent) -> int:
    """The bytes of the payloads one event carries: its attributes' size without the event's
    own framing (ids, times), which every event has alike."""
    attributes = event.WhichOneof("attributes")
    return getattr(event, attributes).ByteSize() if attributes else 0


async def every_run(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """The histories of the workflow's every run, from the last back to the first (a run
    started by continue-as-new names the run it continued)."""
    runs = [await client.get_workflow_handle(workflow_id).fetch_history()]
    while (
        previous := runs[-1]
        .events[0]
        .workflow_execution_started_event_attributes.continued_execution_run_id
    ):
        runs.append(await client.get_workflow_handle(workflow_id, run_id=previous).fetch_history())
    return runs
