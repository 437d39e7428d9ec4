"""A finished activity's report (its result, or its failure) kept until the server has it.

The SDK reports what an activity returned or raised, retrying for about 10 seconds, and then
drops it, whatever the worker's connection says (it resets a worker's retry settings to its
own). A run that finished during a longer server outage was lost that way: the server knew of
it only when its time limit (5 minutes by default) or its heartbeat timeout ran out, and ran the
agent again on a retry. `ReportKeeper` watches the connection (one cheap call a second per
worker process) and keeps each report for a while after its run ends; when the server could
not be reached meanwhile, it sends the report again, by the run's task token, once the server
is back. A report the server already has is refused as not found, which costs nothing."""

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import AsyncActivityHandle, Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from coord.infra.logs import get_logger
from coord.infra.temporal import OUTAGE_TOLERANCE

PING_INTERVAL = timedelta(seconds=1)
"""How often a worker process asks the server whether it is there."""
PING_TIMEOUT = timedelta(seconds=1)
REPORT_WINDOW = timedelta(seconds=15)
"""How long after its run ends a report is watched: the SDK gives up on it after about 10 s."""

log = get_logger("reports")


class ServerWatch:
    """Whether the server answered lately: `missed_since` tells whether a ping went unanswered
    after a moment, `reachable` waits until one is answered again."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._last_miss = float("-inf")
        self._answering = asyncio.Event()
        self._answering.set()
        self._pinging: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._pinging is None or self._pinging.done():
            self._pinging = asyncio.create_task(self._ping_forever())

    def missed_since(self, moment: float) -> bool:
        """A ping went unanswered at or after `moment` (time.monotonic())."""
        return self._last_miss >= moment

    async def reachable(self) -> None:
        await self._answering.wait()

    async def _ping_forever(self) -> None:
        while True:
            try:
                await self._client.workflow_service.get_system_info(
                    GetSystemInfoRequest(), retry=False, timeout=PING_TIMEOUT
                )
            except RPCError:
                self._last_miss = time.monotonic()
                self._answering.clear()
            else:
                self._answering.set()
            await asyncio.sleep(PING_INTERVAL.total_seconds())

    async def close(self) -> None:
        if self._pinging is not None:
            self._pinging.cancel()
            await asyncio.wait({self._pinging})


class ReportKeeper(Interceptor):
    """The activity interceptor of a worker process's workers: every activity's report is
    kept for REPORT_WINDOW after its run ends, and sent again if the server was unreachable
    meanwhile. List it before any interceptor that changes heartbeat details, so that a
    failure sent again carries the details as the server would have had them."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._watch = ServerWatch(client)
        self._kept: deque[tuple[float, bytes, Report]] = deque()
        self._sweeping: asyncio.Task[None] | None = None
        self._resending: set[asyncio.Task[None]] = set()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _KeptReports(next, self)

    def keep(self, token: bytes, report: "Report") -> None:
        self._kept.append((time.monotonic(), token, report))
        self._watch.start()
        if self._sweeping is None or self._sweeping.done():
            self._sweeping = asyncio.create_task(self._sweep_forever())

    async def close(self) -> None:
        """At the worker's shutdown: the pings and the reports still watched stop."""
        for task in [self._sweeping, *self._resending]:
            if task is not None:
                task.cancel()
                await asyncio.wait({task})
        await self._watch.close()

    async def _sweep_forever(self) -> None:
        """Once a second, the reports older than REPORT_WINDOW leave: dropped when the server
        answered all along since their run ended, else sent again when it is back."""
        while True:
            await asyncio.sleep(PING_INTERVAL.total_seconds())
            settled = time.monotonic() - REPORT_WINDOW.total_seconds()
            while self._kept and self._kept[0][0] <= settled:
                ended, token, report = self._kept.popleft()
                if self._watch.missed_since(ended - PING_INTERVAL.total_seconds()):
                    task = asyncio.create_task(self._resend(token, report))
                    self._resending.add(task)
                    task.add_done_callback(self._resending.discard)

    async def _resend(self, token: bytes, report: "Report") -> None:
        try:
            await asyncio.wait_for(self._watch.reachable(), OUTAGE_TOLERANCE.total_seconds())
            await report.send(self._client.get_async_activity_handle(task_token=token))
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:  # not found: it had arrived, or ended
                log.warning("a run's report could not be sent again", error=repr(error))
            return
        except TimeoutError:
            log.warning("a run's report was dropped: the server was away too long")
            return
        log.info("a run's report lost in a server outage was sent again")


class Report:
    """What an activity ended with, to send again: its result, or its failure with the heartbeat
    details it had last sent (the server keeps them for the next attempt)."""

    def __init__(
        self, result: Any = None, error: Exception | None = None, details: Sequence[Any] = ()
    ) -> None:
        self.result = result
        self.error = error
        self.details = details

    async def send(self, handle: AsyncActivityHandle) -> None:
        if self.error is None:
            await handle.complete(self.result)
        else:
            await handle.fail(self.error, last_heartbeat_details=self.details)


class _KeptReports(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, keeper: ReportKeeper) -> None:
        super().__init__(next)
        self._keeper = keeper
        self._details: Sequence[Any] = ()

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_HeartbeatsSeen(outbound, self))

    def seen(self, details: Sequence[Any]) -> None:
        self._details = details

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.is_local:  # reported with its workflow task, which the server retries itself
            return await super().execute_activity(input)
        token = info.task_token
        try:
            result = await super().execute_activity(input)
        except Exception as error:  # a cancel, or an async completion, is no report of its own
            self._keeper.keep(token, Report(error=error, details=self._details))
            raise
        self._keeper.keep(token, Report(result=result))
        return result


class _HeartbeatsSeen(ActivityOutboundInterceptor):
    def __init__(self, next: ActivityOutboundInterceptor, inbound: _KeptReports) -> None:
        super().__init__(next)
        self._inbound = inbound

    def heartbeat(self, *details: Any) -> None:
        self._inbound.seen(details)
        super().heartbeat(*details)
