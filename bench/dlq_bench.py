"""The dead-letter queue at scale: park 20,000 entries, list them page by page, count them by
failure type, and replay 1,000 in bulk, all through the project's API.

Each entry is its own `DeadLetterEntry` workflow, so parking is a workflow start, listing and
counting are visibility queries, and a bulk replay is one update per entry. The entries are parked
while no worker runs (as during a bad deploy), so listing and counting read visibility alone; a
worker then starts and the bulk replay goes through it. The replayed events go to a small sink
workflow that counts what reaches it. A replay is an update that an entry takes up in a workflow
task, so the bench first lets the worker run every entry's first task, then replays. Bounded by
--deadline; each phase prints as it ends.

    .venv/bin/python -m bench.dlq_bench [--entries 20000] [--replay 1000] [--deadline 900]
"""

import argparse
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.client import Client, WorkflowHandle
    from temporalio.worker import Worker

    from bench.server import bench_server
    from coord.infra.dead_letters import park_dead_letter
    from coord.infra.process import exit_without_teardown
    from coord.infra.queues import describe_queue
    from coord.models.dlq.letter import BulkOutcome, DeadLetter, DlqCounts, DlqSelection
    from coord.models.events.envelope import EventEnvelope
    from coord.starter import api
    from coord.starter.api.dlq import BULK_CONCURRENCY
    from coord.worker import build_worker

FAILURE_TYPES = ("timeout", "temporary_failure", "target_ended", "invalid_envelope", "unauthorized")
REPLAYED_TYPE = "invalid_payload"
PARKERS = 64
"""Concurrent parkers, as many producers would be in a cluster."""
PROGRESS_EVERY = 15.0
"""Seconds between progress lines while the bulk replay runs."""

T = TypeVar("T")


@workflow.defn(name="BenchSink")
class BenchSink:
    """Where replayed events land: it counts the distinct events it receives."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal
    def event(self, envelope: dict[str, Any]) -> None:
        self._seen.add(envelope["event"]["id"])

    @workflow.query
    def received(self) -> int:
        return len(self._seen)


async def timed(label: str, work: Callable[[], Awaitable[T]]) -> T:
    started = time.perf_counter()
    result = await work()
    print(f"{label}: {time.perf_counter() - started:.1f}s", flush=True)
    return result


def letters(entries: int, replayed: int, sink: str) -> list[DeadLetter]:
    """`replayed` entries of the replayed type, the rest spread over the other failure types."""
    now = datetime.now(UTC)

    def one(n: int) -> DeadLetter:
        kind = REPLAYED_TYPE if n < replayed else FAILURE_TYPES[n % len(FAILURE_TYPES)]
        return DeadLetter(
            event=EventEnvelope.new("BenchEvent", "/bench", payload={"n": n}, topic="bench"),
            target_workflow=sink,
            failure_type=kind,
            message=f"bench failure {n}",
            first_failed_at=now,
            last_failed_at=now,
        )

    return [one(n) for n in range(entries)]


async def park_all(client: Client, queue: str, parked: list[DeadLetter]) -> None:
    pending = iter(enumerate(parked, 1))
    started = time.perf_counter()

    async def parker() -> None:
        for n, letter in pending:
            await park_dead_letter(client, letter, queue)
            if n % 2000 == 0:
                print(f"  {n} parked ({time.perf_counter() - started:.0f}s)", flush=True)

    await asyncio.gather(*(parker() for _ in range(PARKERS)))


async def listed(client: Client, queue: str, entries: int) -> None:
    """Until visibility lists every entry (it is eventually consistent)."""
    query = api.dlq_query(queue=queue)
    while (await client.count_workflows(query)).count < entries:
        await asyncio.sleep(0.5)


async def page_through(client: Client, queue: str, page_size: int) -> tuple[int, int, float]:
    """Every parked entry, page by page with the cursor; (entries, pages, slowest page)."""
    seen: set[str] = set()
    pages, slowest, cursor = 0, 0.0, None
    while True:
        started = time.perf_counter()
        page = await api.dlq_page(
            client, DlqSelection(status="parked"), page_size=page_size, cursor=cursor, queue=queue
        )
        slowest = max(slowest, time.perf_counter() - started)
        pages += 1
        seen.update(entry.entry_id for entry in page.entries)
        if not (cursor := page.next_cursor):
            return len(seen), pages, slowest


async def workflow_backlog(client: Client, queue: str) -> int:
    """Workflow tasks waiting on the queue: the entries' first tasks a worker has not run yet."""
    workflows = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
    response = await describe_queue(client, queue, workflows, stats=True)
    return response.stats.approximate_backlog_count


async def progress(client: Client, queue: str) -> None:
    """Replayed entries (by visibility) and the workflow-task backlog, every PROGRESS_EVERY."""
    replayed_selection = DlqSelection(failure_type=REPLAYED_TYPE, status="replayed")
    replayed = api.dlq_query(replayed_selection, queue=queue)
    started = time.perf_counter()
    while True:
        await asyncio.sleep(PROGRESS_EVERY)
        done = (await client.count_workflows(replayed)).count
        backlog = await workflow_backlog(client, queue)
        elapsed = time.perf_counter() - started
        print(f"  {elapsed:.0f}s: {done} replayed, workflow-task backlog {backlog}", flush=True)


async def caught_up(client: Client, queue: str) -> None:
    """Until the worker has run every entry's first task: a replay is an update, which an entry
    takes up only in a workflow task, and the server hands out the entries' first tasks in its
    own order, so an entry's replay waits for its first task."""
    started, last_print, empty_reads = time.perf_counter(), 0.0, 0
    while empty_reads < 2:
        backlog = await workflow_backlog(client, queue)
        empty_reads = empty_reads + 1 if backlog == 0 else 0
        elapsed = time.perf_counter() - started
        if elapsed - last_print >= PROGRESS_EVERY:
            print(f"  {elapsed:.0f}s: workflow-task backlog {backlog}", flush=True)
            last_print = elapsed
        await asyncio.sleep(1)


async def replay_in_rounds(client: Client, queue: str, chosen: list[str]) -> list[BulkOutcome]:
    """The bulk replay as an operator runs it: entries no worker took up in time are asked
    again (an entry acts once, so asking again is safe) until none is left."""
    reporter = asyncio.create_task(progress(client, queue))
    final: dict[str, BulkOutcome] = {}
    pending, round_number = chosen, 1
    try:
        while pending:
            outcomes = await api.dlq_replay_many(client, pending)
            final.update((outcome.entry_id, outcome) for outcome in outcomes)
            pending = [o.entry_id for o in outcomes if o.status is None and "in time" in o.detail]
            print(f"  round {round_number}: {len(outcomes) - len(pending)} answered", flush=True)
            round_number += 1
    finally:
        reporter.cancel()
    return list(final.values())


async def settled(
    client: Client, queue: str, sink: WorkflowHandle[Any, Any], replay: int
) -> tuple[int, DlqCounts]:
    """What reached the sink, and the replayed type's counts, once both show the replays."""
    replayed = DlqSelection(failure_type=REPLAYED_TYPE)
    while True:
        received = await sink.query(BenchSink.received)
        after = await api.dlq_counts(client, replayed, queue=queue)
        if received >= replay and after.total.replayed >= replay:
            return received, after
        await asyncio.sleep(0.5)


async def bench(entries: int, replay: int, page_size: int) -> int:
    async with bench_server() as (client, where):
        queue = f"bench-dlq-{uuid.uuid4().hex[:8]}"
        sink_queue = f"{queue}-sink"
        print(f"server: {where}; {entries} entries, {replay} replayed in bulk", flush=True)
        async with Worker(client, task_queue=sink_queue, workflows=[BenchSink]):
            sink = await client.start_workflow(
                BenchSink.run, id=f"bench-sink-{uuid.uuid4().hex[:8]}", task_queue=sink_queue
            )
            parked = letters(entries, replay, sink.id)
            await timed(f"park {entries}", lambda: park_all(client, queue, parked))
            await timed("visibility lists them all", lambda: listed(client, queue, entries))
            count, pages, slowest = await timed(
                f"list page by page ({page_size} a page)",
                lambda: page_through(client, queue, page_size),
            )
            print(f"  {count} distinct entries in {pages} pages, slowest page {slowest:.2f}s")
            counts = await timed(
                "count by failure type", lambda: api.dlq_counts(client, queue=queue)
            )
            for kind, by_status in counts.by_failure_type.items():
                print(f"  {kind:<20}{by_status.parked:>7} parked")
            chosen = await timed(
                f"select the {REPLAYED_TYPE} entries",
                lambda: api.dlq_selected(
                    client, DlqSelection(failure_type=REPLAYED_TYPE), queue=queue
                ),
            )
            async with build_worker(client, queue):
                await timed(
                    f"a worker starts and runs the {entries} entries' first tasks",
                    lambda: caught_up(client, queue),
                )
                outcomes = await timed(
                    f"bulk replay {len(chosen)}, {BULK_CONCURRENCY} at a time",
                    lambda: replay_in_rounds(client, queue, chosen),
                )
                received, after = await timed(
                    "until the sink and the counts show them",
                    lambda: settled(client, queue, sink, replay),
                )
        replayed = sum(1 for outcome in outcomes if outcome.status == "replayed")
        refused = [outcome.detail for outcome in outcomes if outcome.status is None]
        if refused:
            print(f"  {len(refused)} refused, the first: {refused[0]}")
        print(f"  {replayed} replayed, {received} events reached the sink")
        print(f"  {REPLAYED_TYPE}: {after.total.replayed} replayed, {after.total.parked} parked")
    expected = (count, counts.total.parked, received, after.total.replayed)
    if expected != (entries, entries, replay, replay):
        print(f"MISMATCH: {expected}")
        return 1
    return 0


async def bounded(entries: int, replay: int, page_size: int, deadline: float) -> int:
    try:
        return await asyncio.wait_for(bench(entries, replay, page_size), deadline)
    except TimeoutError:
        print(f"gave up after {deadline:.0f}s (--deadline)")
        return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--replay", type=int, default=1_000)
    parser.add_argument("--page-size", type=int, default=1_000)
    parser.add_argument("--deadline", type=float, default=900, help="seconds")
    args = parser.parse_args()
    exit_without_teardown(
        lambda: asyncio.run(bounded(args.entries, args.replay, args.page_size, args.deadline))
    )


if __name__ == "__main__":
    main()
