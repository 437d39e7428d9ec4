"""Rewind safety on the real dev server: a log with a gap in its middle (a segment removed from
the payload store, or one that no longer reads) is refused by a rewind naming what is missing,
and `coord events C --all` says it is incomplete; a batch interrupted halfway through a copy
makes that copy again on its next run, and skips the copies it finished."""

import asyncio

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.infra.event_log import DirectorySegments, segment_store
from coord.models.events.log import SEGMENT_ROWS
from coord.models.rewind.plan import RewindRefused
from coord.starter import api
from coord.starter.api.common import NotFound
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
