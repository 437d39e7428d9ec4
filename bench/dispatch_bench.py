"""How long a task dispatched through a task queue waits for a worker already polling it, on
the project's embedded dev server: every agent run goes through its own queue, and
so does the workflow task its result brings.

With the dev server's default transfer-queue reader (one history shard, at most 20 loads a
second once its burst is spent) a hop that followed the last load within 50 ms waited for the
next, about 40 ms a hop; the project's dev servers raise it
(`history.transferProcessorMaxPollRPS`, coord/infra/devserver.py). Compare in one run:

    python -m bench.dispatch_bench                                  # the project's setting
    python -m bench.dispatch_bench --server-config history.transferProcessorMaxPollRPS=20
"""

import argparse
import asyncio
import statistics
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from bench.layouts import phases
from bench.server import add_server_config_option, bench_server, dynamic_config_args

HOPS = 60


@activity.defn(name="hop")
async def hop(index: int) -> int:
    return index


@workflow.defn(name="Hops", sandboxed=False)
class Hops:
    """Trivial activities one after the other on another task queue, as a saga runs its agents
    (outside the sandbox, so that its workflow tasks are quick and the hops follow closely)."""

    @workflow.run
    async def run(self, queue: str, hops: int) -> None:
        for index in range(hops):
            await workflow.execute_activity(
                hop, index, task_queue=queue, start_to_close_timeout=timedelta(seconds=30)
            )


async def hops_run(client: Client, hops: int) -> str:
    """One run of `hops` hops; its history's line of where the time went."""
    queue = f"hops-{uuid.uuid4()}"
    elsewhere = f"{queue}-elsewhere"
    workflows = Worker(client, task_queue=queue, workflows=[Hops])
    activities = Worker(client, task_queue=elsewhere, activities=[hop])
    async with workflows, activities:
        handle = await client.start_workflow(
            Hops.run, args=[elsewhere, hops], id=queue, task_queue=queue
        )
        await handle.result()
    found = await phases(client, handle.id)
    waits = found.activity_waits
    return f"median activity wait {statistics.median(waits) * 1000:.1f} ms; {found.line()}"


async def bench(hops: int, rounds: int, server_config: list[str]) -> None:
    async with bench_server(dynamic_config_args(server_config)) as (client, server):
        print(f"server: {server}{''.join(f'; {value}' for value in server_config)}")
        for round_number in range(1, rounds + 1):
            print(f"round {round_number}: {await hops_run(client, hops)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hops", type=int, default=HOPS)
    parser.add_argument("--rounds", type=int, default=3)
    add_server_config_option(parser)
    args = parser.parse_args()
    asyncio.run(bench(args.hops, args.rounds, args.server_config))


if __name__ == "__main__":
    main()
