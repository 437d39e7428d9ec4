"""The project's dev servers fire a timer within milliseconds of its time (`TIMER_CONFIG`):
a chain taking in a backlog, and a plan or vote fanning out, end a workflow task with a 1 ms
timer and go on in the next, which at the server's default shift (1 s) waited up to a second.
Read from the server's own clock (the timers' history events), not the test's."""

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

TURNS = 5
LATE = timedelta(milliseconds=500)
"""Far above the 10 ms the project's servers allow, far below the default's second."""


@workflow.defn(sandboxed=False)
class ShortTimers:
    @workflow.run
    async def run(self) -> None:
        for _ in range(TURNS):
            await workflow.sleep(timedelta(milliseconds=1))


async def test_a_one_millisecond_timer_fires_within_milliseconds(
    client: Client, task_queue: str
) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[ShortTimers]):
        handle = await client.start_workflow(
            ShortTimers.run, id=f"short-timers-{task_queue}", task_queue=task_queue
        )
        await handle.result()
    started: dict[int, datetime] = {}
    waits: list[timedelta] = []
    async for event in handle.fetch_history_events():
        at = event.event_time.ToDatetime()
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            started[event.event_id] = at
        elif event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            waits.append(at - started[event.timer_fired_event_attributes.started_event_id])
    assert len(waits) == TURNS
    assert max(waits) < LATE, f"timers fired after {[w.total_seconds() for w in waits]} s"
