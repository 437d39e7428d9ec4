"""Staying alive while waiting: an activity that awaits something slow (a model's answer, its
agent ledger's) says it is alive meanwhile, so a short heartbeat timeout holds through the wait
and a cancel reaches it."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def beating(call: Awaitable[T], every: float, beat: Callable[[], None]) -> T:
    """`call`'s result, calling `beat` every `every` seconds until it comes; `call` is cancelled
    (and its end awaited) when this wait is."""
    waiting = asyncio.ensure_future(call)
    try:
        while not waiting.done():
            await asyncio.wait({waiting}, timeout=every)
            beat()
        return waiting.result()
    finally:
        waiting.cancel()
        await asyncio.wait({waiting})
