"""`ending_with` runs a workflow's way out as a `finally` would, except when the worker closes
the coroutine outside the workflow's event loop (a dropped instance): then nothing runs there,
since no workflow call can. No server: the helper is plain asyncio."""

import asyncio

import pytest

from coord.workflows._runtime.common import ending_with


async def test_the_way_out_runs_after_a_result_and_after_a_failure() -> None:
    left: list[str] = []

    async def value() -> int:
        return 7

    async def failing() -> int:
        raise ValueError("step failed")

    assert await ending_with(value(), lambda: left.append("sync")) == 7

    async def leave() -> None:
        left.append("async")

    with pytest.raises(ValueError, match="step failed"):
        await ending_with(failing(), leave)
    assert left == ["sync", "async"]


async def test_a_cancelled_run_still_leaves() -> None:
    left: list[str] = []
    task = asyncio.ensure_future(
        ending_with(asyncio.Event().wait(), lambda: left.append("cancelled"))
    )
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert left == ["cancelled"]


def test_a_coroutine_closed_outside_its_loop_does_not_leave() -> None:
    left: list[str] = []
    loop = asyncio.new_event_loop()
    try:
        coroutine = ending_with(loop.create_future(), lambda: left.append("closed"))
        coroutine.send(None)  # suspended, as a dropped instance's coroutines are
        coroutine.close()
    finally:
        loop.close()
    assert left == []
