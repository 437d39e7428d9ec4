"""A workflow's fan-out within a byte budget per workflow task: the commands one task sends
(activity inputs, child workflow inputs) travel together in its completion, which the server
refuses over 4 MB, terminating the run with no record. Forty plan tasks with 110 KB inputs, or
a forty-voter vote on a 110 KB proposal, would be 4.4 MB in one task; paced, they go out in as
many tasks as the budget (`BYTES_PER_WORKFLOW_TASK`, the one the chain takes its events by)
needs, the next one started by a short timer as the chain does."""

import asyncio
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.wire.sizes import ByteBudget
    from coord.workflows._runtime.patches import patched

NEXT_TASK = timedelta(milliseconds=1)
"""The timer that ends a workflow task so the rest goes out in the next."""


class FanOut:
    """The budget of the workflow task under way; `room(size)` returns once a command of `size`
    bytes may go out in it. Pacing changes the commands a run sends, so it happens only past
    `patch` (a run recorded before sent everything in one task, and replays so)."""

    def __init__(self, patch: str) -> None:
        self._patch = patch
        self._task = -1
        """The workflow task the budget is for, named by the history length it started at."""
        self._budget = ByteBudget()
        self._next: asyncio.Task[None] | None = None

    async def room(self, size: int) -> None:
        """Waits (never, while the budget has room) for a workflow task with room for `size`
        bytes, and counts them. Waiters share one timer and go out in the order they came."""
        while not self._spent(size):
            if self._next is None or self._next.done():
                self._next = asyncio.create_task(
                    workflow.sleep(NEXT_TASK, summary="fan-out: the rest in the next task")
                )
            await asyncio.shield(self._next)

    def _spent(self, size: int) -> bool:
        task = workflow.info().get_current_history_length()
        if task != self._task:
            self._task, self._budget = task, ByteBudget()
        if not self._budget.fits(size) and patched(self._patch):
            return False
        self._budget.spend(size)
        return True
