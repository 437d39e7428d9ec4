"""The embedded dev server hands a task to a waiting worker within milliseconds. Each agent has
a task queue of its own, so every agent run of a plan or saga goes through the server's
matching, and so does the workflow task its result brings. With the dev server's default
transfer-queue reader (one history shard, at most 20 loads a second once its burst is spent) a
hop that followed the last load within 50 ms waited for the next: about 40 ms a hop after the
first dozen or so, most of a plan's time (bench.plan_bench, bench.layouts)."""

import statistics
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from bench.layouts import phases

HOPS = 60
HOP_LIMIT = 0.02
"""Seconds: a median wait under this; with the server's default, past its burst, 35 to 45 ms."""


@activity.defn(name="hop")
async def hop(index: int) -> int:
    return index


@workflow.defn(name="Hops", sandboxed=False)
class Hops:
    """Trivial activities one after the other on another task queue, as a saga runs its agents
    (outside the sandbox, so that its workflow tasks are quick and the hops follow closely)."""

    @workflow.run
    async def run(self, queue: str) -> None:
        for index in range(HOPS):
            await workflow.execute_activity(
                hop, index, task_queue=queue, start_to_close_timeout=timedelta(seconds=30)
            )


async def test_a_task_on_another_queue_waits_milliseconds_for_its_worker(
    client: Client, task_queue: str
) -> None:
    elsewhere = f"{task_queue}-elsewhere"
    workflows = Worker(client, task_queue=task_queue, workflows=[Hops])
    activities = Worker(client, task_queue=elsewhere, activities=[hop])
    async with workflows, activities:
        handle = await client.start_workflow(
            Hops.run, elsewhere, id=f"hops-{task_queue}", task_queue=task_queue
        )
        await handle.result()
    found = await phases(client, handle.id)
    assert len(found.activity_waits) == HOPS
    assert statistics.median(found.activity_waits) < HOP_LIMIT, found.line()
    assert statistics.median(found.workflow_task_waits) < HOP_LIMIT, found.line()
