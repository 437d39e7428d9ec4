"""Rewind safety on the real dev server: a log with a gap in its middle (a segment removed from
the payload store, or one that no longer reads) is refused by a rewind naming what is missing,
and `coord events C --all` says it is incomplete; a batch interrupted halfway through a copy
makes that copy again on its next run, and skips the copies it finished."""

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.activities.kinds.demo import register_demo_agents
from coord.infra.event_log import DirectorySegments, segment_store
from coord.models.chain.spec import RecordedEvents
from coord.models.events.log import SEGMENT_ROWS
from coord.models.events.rewind import RewindOrigin
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.config import WorkerSettings
from coord.models.rewind.batch import (
    BatchLine,
    BatchReport,
    LineStatus,
    Resumed,
    count_line,
    describe,
)
from coord.models.rewind.plan import RewindPlan, RewindRefused, plan_rewind
from coord.models.wire import contract
from coord.starter import api
from coord.starter.api.common import NotFound
from coord.starter.api.rewind import moved
from coord.starter.exits import ExitCode
from coord.worker import build_worker
from tests.helpers import eventually
from tests.test_rewind import FIXED, approved, story_with
from tests.workers import COORD, run, server_env

NOISE = 4 * SEGMENT_ROWS + 1
"""Four segments written and one row waiting: the chain's window (the newest rows) no longer
holds the second segment's rows."""


async def noisy_chain(client: Client, queue: str, correlation_id: str) -> DirectorySegments:
    """A running chain that has written four segments of its log; the store they are in."""
    await api.start_chain(client, story_with(FIXED), correlation_id, queue=queue)
    noise = [approved(correlation_id, "Noise", n=n) for n in range(NOISE)]
    for start in range(0, len(noise), 50):
        await asyncio.gather(*(api.publish(client, e) for e in noise[start : start + 50]))
    store = segment_store()
    assert isinstance(store, DirectorySegments)

    async def four_segments_written() -> bool:
        return len(await store.names(correlation_id)) == 4

    await eventually(four_segments_written, timeout=120)
    return store


async def test_a_log_that_lost_a_middle_segment_is_refused_and_reported_incomplete(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """The window keeps the newest rows and the log the rest; a segment lost between two that
    exist leaves a hole the sequence numbers cannot show (runs share them), the positions do."""
    original = f"holed-{task_queue}"
    env = server_env(dev_env, task_queue)
    async with build_worker(client, task_queue):
        store = await noisy_chain(client, task_queue, original)
        _, second, *_ = sorted(await store.names(original))
        assert second == "000000000201-000000000400.json"
        last = [row async for row in api.read_log(client, original)][-1]
        (store.root / original / second).unlink()
        with pytest.raises(RewindRefused) as refused:
            await api.rewind_chain(client, original, to=last.event_id, copy_id=f"copy-{task_queue}")
        assert str(refused.value) == (
            f"the log of {original!r} is incomplete: it lacks events 201-400 (between sequence "
            "numbers 200 and 401); a rewind needs the whole log"
        )
        with pytest.raises(NotFound):
            await api.chain_running(client, f"copy-{task_queue}")  # no copy was started
        code, out, err = await run(COORD, "events", original, "--all", env=env)
        assert code == ExitCode.LOG_INCOMPLETE, err
        assert f"{NOISE - SEGMENT_ROWS:,} events" in out, "every row it has is shown"
        assert f"warning: the log of {original!r} is incomplete: it lacks events 201-400" in err
        code, _, err = await run(COORD, "events", original, "--replay-into", "agents", env=env)
        assert code == ExitCode.LOG_INCOMPLETE and "is incomplete: it lacks events 201-400" in err

        (store.root / original / second).write_text('{"correlation_id": "broken"')
        with pytest.raises(RewindRefused, match=f"segment {second} unreadable"):
            await api.rewind_chain(client, original, to=last.event_id, copy_id=f"copy-{task_queue}")


async def test_a_whole_log_reads_without_a_warning(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    original = f"whole-{task_queue}"
    env = server_env(dev_env, task_queue)
    async with build_worker(client, task_queue):
        await api.start_chain(client, story_with(FIXED), original, queue=task_queue)
        await api.publish(client, approved(original, "Noise"))
        code, out, err = await run(COORD, "events", original, "--all", env=env)
    assert code == 0 and err == "" and "1 events" in out


SUFFIX = "-copy"
POINT = "APIDesignCompleted"


async def completed_stories(client: Client, queue: str, names: list[str]) -> list[str]:
    """User stories that reached their end, tagged with the queue (the batch's `--where`)."""
    ids = [f"{name}-{queue}" for name in names]
    for correlation in ids:
        await api.start_chain(client, story_with(FIXED), correlation, queue=queue)
        await api.publish(client, approved(correlation, tag=queue))

    async def all_completed() -> bool:
        states = await asyncio.gather(*(api.chain_state(client, c) for c in ids))
        return all(state.terminal_seen for state in states)

    await eventually(all_completed, timeout=120, interval=0.5)
    return ids


def own(report: BatchReport, queue: str) -> BatchReport:
    """The lines of the test's own correlations (named after its queue). The window selects
    every chain the server started in it, whoever started it: a chain an earlier test started
    a moment before, with no event yet, is a line of its own ("its log holds no event yet")."""
    return BatchReport(lines=[line for line in report.lines if queue in line.original])


async def half_made(client: Client, queue: str, original: str) -> RewindPlan:
    """What a batch killed in the middle of a copy leaves: the copy's chain started, marked as
    a copy, and handed only the first event of its past."""
    log = [row async for row in api.read_log(client, original)]
    plan = plan_rewind(log, original=original, copy_id=original + SUFFIX, point=POINT)
    origin = RewindOrigin(original=original, at=plan.point)
    await api.start_chain(client, story_with(FIXED), plan.copy_id, queue=queue, rewind_of=origin)
    first = RecordedEvents(events=[moved(plan.recorded[0], plan.copy_id)])
    handle = api.chain_handle(client, plan.copy_id)
    await handle.signal(contract.RECORDED_SIGNAL, first.model_dump(mode="json"))
    return plan


async def test_a_batch_run_again_finishes_or_remakes_a_half_made_copy_and_skips_a_whole_one(
    client: Client, task_queue: str
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    allowing = register_demo_agents(AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    async with build_worker(client, task_queue, allowing):
        whole, running, ended, taken = await completed_stories(
            client, task_queue, ["whole", "running", "ended", "taken"]
        )
        await api.start_chain(client, story_with(FIXED), taken + SUFFIX, queue=task_queue)
        await api.rewind_chain(client, whole, to=POINT, copy_id=whole + SUFFIX, queue=task_queue)
        plans = {c: await half_made(client, task_queue, c) for c in (running, ended)}
        await api.close_chain(client, ended + SUFFIX)

        async def the_ended_copy_ended() -> bool:
            return not await api.chain_running(client, ended + SUFFIX)

        await eventually(the_ended_copy_ended, timeout=60)
        # Someone else's chain in the window, as an earlier test's can be: a line of its own.
        elsewhere = f"elsewhere-{uuid.uuid4().hex}"
        await api.start_chain(client, story_with(FIXED), elsewhere, queue=task_queue)

        async def listed() -> bool:  # visibility lags a start
            query = f"WorkflowId = '{contract.chain_workflow_id(elsewhere)}'"
            return [e async for e in client.list_workflows(query)] != []

        await eventually(listed, timeout=60)

        async def batch() -> BatchReport:
            return await api.rewind_many(
                client,
                since=since,
                until=datetime.now(UTC) + timedelta(minutes=1),
                suffix=SUFFIX,
                where=f"payload.tag == '{task_queue}'",
                to_type=POINT,
                queue=task_queue,
            )

        report = await batch()
        first = own(report, task_queue)
        copies = [api.chain_handle(client, c + SUFFIX).result() for c in (running, ended)]
        done = await asyncio.wait_for(asyncio.gather(*copies), 120)
        again = own(await batch(), task_queue)
        logs = {c: [r async for r in api.read_log(client, c + SUFFIX)] for c in plans}
    lines = {line.original: line for line in first.lines}
    assert lines[running].resumed is Resumed.FINISHED, "the running copy was sent what it lacked"
    assert lines[ended].resumed is Resumed.REMADE, "the ended copy was made again"
    assert lines[whole].status is LineStatus.SKIPPED, "the whole copy was left alone"
    assert lines[taken].reason == (
        f"--suffix: {taken + SUFFIX!r} is taken by a chain that is not a copy of {taken!r}"
    )
    assert lines[taken + SUFFIX].reason == "its log holds no event yet", "itself an original"
    assert count_line(first.counts()) == "2 rewound, 1 skipped, 0 filtered, 2 refused", first.lines
    assert count_line(again.counts()) == "0 rewound, 3 skipped, 0 filtered, 2 refused"
    others = {line.original: line.reason for line in report.lines if line not in first.lines}
    assert others[elsewhere] == "its log holds no event yet", "selected, and not counted"
    assert all(state.terminal_seen and state.rewind_complete for state in done)
    for original, plan in plans.items():
        ids = [row.event_id for row in logs[original]]
        assert len(ids) == len(set(ids)), "no event of the past twice"
        assert {row.event_id for row in plan.recorded} <= set(ids), "its whole past"


def test_a_line_says_how_it_took_up_an_unfinished_copy() -> None:
    line = BatchLine(
        original="story-4",
        copy_id="story-4-fixed",
        status=LineStatus.REWOUND,
        point="evt-1",
        recorded=4,
        resumed=Resumed.REMADE,
    )
    assert describe(line) == (
        "story-4 -> story-4-fixed: rewound at evt-1 (4 events taken as recorded), made again: "
        "an earlier run left the copy unfinished and it had ended"
    )
