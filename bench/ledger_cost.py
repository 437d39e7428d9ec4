"""What one message to an agent's ledger costs: CPU time of this process (the client, and the
coordinator worker running the `AgentLedger` workflow) and of the server, per stats report
(an update with start) and per read (a query).

    .venv/bin/python -m bench.ledger_cost [--messages 200]

A worker's breakers send these in the background (coord.activities.mesh.breakers): this is the
price of each, which the saga bench's `ledger` column (messages per saga) multiplies. CPU time,
not wall time: the load of a shared machine moves it far less."""

import argparse
import asyncio
import uuid
from collections.abc import Awaitable, Callable

from bench.saga_bench import Cpu
from bench.server import bench_server
from coord.infra.ledgers import LedgerClient
from coord.infra.process import exit_without_teardown
from coord.models.mesh.breaker import SUCCEEDED
from coord.models.mesh.ledger import BreakerConfig, RunStats
from coord.models.wire.contract import agent_task_queue
from coord.worker import build_worker, default_registry

WARMUP = 20


async def per_message(send: Callable[[], Awaitable[object]], messages: int) -> Cpu:
    """CPU seconds per message, `messages` sent one after the other."""
    before = Cpu.now()
    for _ in range(messages):
        await send()
    spent = Cpu.now().since(before)
    server = spent.server / messages if spent.server is not None else None
    return Cpu(spent.own / messages, server)


async def bench(messages: int) -> None:
    async with bench_server() as (client, server):
        home = f"bench-ledger-{uuid.uuid4().hex[:8]}"
        ledger = LedgerClient(client, agent_task_queue("agent", home), home, BreakerConfig(), "w")
        stats = RunStats()
        stats.record(SUCCEEDED, 5.0)
        async with build_worker(client, home, default_registry(), only=[]):
            for _ in range(WARMUP):
                await ledger.stats(stats)
                await ledger.read()
            sends = {"report": lambda: ledger.stats(stats), "read": ledger.read}
            costs = {kind: await per_message(send, messages) for kind, send in sends.items()}
    print(f"ledger messages: {messages} of each kind, one at a time; server: {server}")
    for kind, cost in costs.items():
        on_server = f"{1000 * cost.server:.2f} ms" if cost.server is not None else "-"
        print(f"{kind}: this process {1000 * cost.own:.2f} ms, server {on_server} CPU per message")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=200, help="messages of each kind")
    args = parser.parse_args()
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    exit_without_teardown(lambda: asyncio.run(bench(args.messages)))


if __name__ == "__main__":
    main()
