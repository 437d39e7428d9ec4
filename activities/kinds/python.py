"""`kind: python` agents: a function imported by its dotted path.

A plain `def` runs in the default thread pool. An `async def` runs on an event loop of its own,
in a thread of its own, so one that blocks (a `time.sleep`, a synchronous HTTP call, a long
computation) holds only its own loop, never the worker's, where every other agent's run, the
heartbeats and the SDK itself turn. A watchdog on the worker's loop reads how long ago the
agent's loop last turned: past the declaration's `blocked_after` the run fails `agent_blocked`
instead of waiting on it (its thread is left to end when the blocking call returns)."""

import asyncio
import contextlib
import contextvars
import importlib
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar, cast

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentFn
from coord.models.mesh.config import PythonAgent
from coord.models.wire.contract import FailureType, failure
from coord.models.wire.specs import SpecError

T = TypeVar("T")
Output = Mapping[str, Any] | None
AsyncAgent = Callable[[EventEnvelope, AgentContext], Coroutine[Any, Any, Output]]

TURN = 0.1
"""Seconds between two marks of the agent's loop turning (a timer on that loop)."""
WATCH = 0.25
"""Seconds between two looks of the watchdog, on the worker's loop."""


def python_agent(name: str, config: PythonAgent) -> AgentFn:
    """Resolved when the file is loaded, so a wrong path stops the worker, not a run."""
    target = imported(f"agents.{name}.callable", config.callable)
    if asyncio.iscoroutinefunction(target):
        return partial(_on_own_loop, cast(AsyncAgent, target), config.blocked_after)
    return partial(_in_thread, target)


def imported(field: str, dotted: str) -> Callable[..., Any]:
    """The function `package.module:function` names; a SpecError naming `field` when there is
    none (an agent's `callable`, a tool's)."""
    module_name, _, attribute = dotted.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise SpecError(f"{field}: cannot import {dotted!r}: {error}") from None
    if not callable(target):
        raise SpecError(f"{field}: {dotted!r} is not a function")
    return target  # type: ignore[no-any-return]


async def _in_thread(
    target: Callable[[EventEnvelope, AgentContext], Output],
    event: EventEnvelope,
    context: AgentContext,
) -> Output:
    """A plain `def` agent runs in the default thread pool: if it blocks (on I/O, a sleep, a
    long computation), the worker's event loop, and every other agent's heartbeat, go on."""
    return await asyncio.to_thread(target, event, context)


async def _on_own_loop(
    target: AsyncAgent, blocked_after: timedelta, event: EventEnvelope, context: AgentContext
) -> Output:
    """An `async def` agent's run on a loop of its own (`OwnLoop`), watched: `agent_blocked`
    once that loop has not turned for `blocked_after`. A cancel of the run is handed to the
    agent, and waited for while its loop turns (its cleanup runs, as on the worker's loop)."""
    own = OwnLoop(context.agent)
    ending = own.start(target(event, context))
    limit = blocked_after.total_seconds()
    try:
        return await _watched(own, ending, limit)
    except asyncio.CancelledError:
        own.cancel()
        with contextlib.suppress(Exception):  # how it ends after the cancel is not the outcome
            await _watched(own, ending, limit)
        raise


async def _watched(own: "OwnLoop", ending: "asyncio.Future[T]", limit: float) -> T:
    """`ending`'s outcome; `agent_blocked` (not retried) if the loop stops turning first."""
    while True:
        done, _ = await asyncio.wait({ending}, timeout=WATCH)
        if done:
            return ending.result()
        stalled = own.stalled_for()
        if stalled > limit:
            own.cancel()  # delivered if the blocking call ever returns
            raise failure(
                FailureType.AGENT_BLOCKED,
                f"{own.name}: its event loop has not turned for {stalled:.1f}s (blocked_after "
                f"{limit:g}s): an async def agent must await, not block; a blocking call (time."
                "sleep, a synchronous client, a long computation) belongs in a plain def agent, "
                "which runs in a thread",
                non_retryable=True,
            )


class OwnLoop:
    """One run's event loop, in a daemon thread of its own. Besides the agent's coroutine it
    runs a timer that marks each turn (`stalled_for`), which is how the worker's side tells
    a loop that blocks from one that awaits. The loop, and whatever the agent left running on
    it, is closed when the agent's coroutine ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop = asyncio.new_event_loop()
        self._last_turn = time.monotonic()
        self._main: asyncio.Task[Any] | None = None
        self._stop_asked = False

    def start(self, coroutine: Coroutine[Any, Any, T]) -> "asyncio.Future[T]":
        """Runs `coroutine` there, in the caller's context (the activity's: `activity.info()`
        works); the future, on the caller's loop, ends as it does."""
        caller = asyncio.get_running_loop()
        ending: asyncio.Future[T] = caller.create_future()
        serve = partial(self._serve, coroutine, contextvars.copy_context(), caller, ending)
        threading.Thread(target=serve, name=f"agent {self.name}", daemon=True).start()
        return ending

    def stalled_for(self) -> float:
        """Seconds since the loop last turned."""
        return time.monotonic() - self._last_turn

    def cancel(self) -> None:
        """Asks the agent's coroutine to stop, when its loop next turns."""
        with contextlib.suppress(RuntimeError):  # the loop has closed: the coroutine ended
            self._loop.call_soon_threadsafe(self._cancel_main)

    def _serve(
        self,
        coroutine: Coroutine[Any, Any, T],
        context: contextvars.Context,
        caller: asyncio.AbstractEventLoop,
        ending: "asyncio.Future[T]",
    ) -> None:
        runner = asyncio.Runner(loop_factory=lambda: self._loop)
        try:
            result = runner.run(self._turning(coroutine), context=context)
        except BaseException as error:  # the agent's own, handed over to the run as is
            _hand_over(caller, partial(_fail, ending, error))
        else:
            _hand_over(caller, partial(_succeed, ending, result))
        finally:
            runner.close()

    async def _turning(self, coroutine: Coroutine[Any, Any, T]) -> T:
        self._main = asyncio.current_task()
        if self._stop_asked:
            coroutine.close()
            raise asyncio.CancelledError
        ticking = asyncio.create_task(self._tick())
        try:
            return await coroutine
        finally:
            ticking.cancel()

    async def _tick(self) -> None:
        while True:
            self._last_turn = time.monotonic()
            await asyncio.sleep(TURN)

    def _cancel_main(self) -> None:
        self._stop_asked = True
        if self._main is not None:
            self._main.cancel()


def _hand_over(caller: asyncio.AbstractEventLoop, settle: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the worker's loop has closed: nobody waits
        caller.call_soon_threadsafe(settle)


def _succeed(ending: "asyncio.Future[T]", result: T) -> None:
    if not ending.done():
        ending.set_result(result)


def _fail(ending: "asyncio.Future[Any]", error: BaseException) -> None:
    if ending.done():
        return
    if isinstance(error, asyncio.CancelledError):
        ending.cancel()
    else:
        ending.set_exception(error)
