"""A plan's scratchpad (seed 004's layout), written as the plan goes: `task-plan.md` at the
start, `worker-results/<task>.json` as each task ends, `final-report.md` at the end.

Each write is the `write_scratchpad` activity, run in the background so no task waits for it;
one that fails (the worker keeps no scratchpads, a full disk) is recorded in the plan's record
(`scratchpad_error`, the first such failure) and never fails the plan. The plan awaits the
writes still under way before it ends."""

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.plan.report import (
        ScratchpadWrite,
        excerpt,
        final_report_files,
        task_plan_files,
        worker_result_files,
    )
    from coord.models.plan.spec import MAX_NOTES, PlanSpec, PlanState, TaskRecord
    from coord.models.wire.sizes import json_size
    from coord.workflows._runtime import calls
    from coord.workflows._runtime.common import task_error
    from coord.workflows._runtime.fan_out import FanOut

WRITE_TIMEOUT = timedelta(seconds=30)
WRITE_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))
"""A write that failed for a passing reason is tried again a little; a refusal is not."""


class Scratchpad:
    def __init__(self, spec: PlanSpec, record: PlanState, fan_out: FanOut) -> None:
        self._spec = spec
        self._record = record
        self._fan_out = fan_out
        """The plan's budget per workflow task: tasks ending together write their results."""
        self._writes: list[asyncio.Task[None]] = []

    def task_plan(self) -> None:
        self._write_files(lambda: task_plan_files(self._spec))

    def task_ended(self, record: TaskRecord) -> None:
        self._write_files(lambda: worker_result_files(record))

    def plan_ended(self, state: PlanState) -> None:
        self._write_files(lambda: final_report_files(state))

    def _write_files(self, files: Callable[[], dict[str, str]]) -> None:
        """Start writing `files()` (path -> text), rendered only when the plan keeps a
        scratchpad: most plans do not, and pay nothing for it."""
        directory = self._spec.scratchpad
        if directory is not None:
            request = ScratchpadWrite(
                directory=directory, plan_id=self._spec.plan_id, files=files()
            )
            self._writes.append(asyncio.create_task(self._write(request)))

    async def flush(self) -> None:
        """Wait for every write started so far."""
        if self._writes:
            await asyncio.gather(*self._writes)

    async def _write(self, request: ScratchpadWrite) -> None:
        names = ", ".join(request.files)
        await self._fan_out.room(json_size(request))
        try:
            await calls.execute(
                refs.WRITE_SCRATCHPAD,
                request,
                start_to_close_timeout=WRITE_TIMEOUT,
                retry_policy=WRITE_RETRY,
                summary=f"scratchpad: {names}",
            )
        except ActivityError as error:
            if self._record.scratchpad_error is None:
                problem = task_error(error)
                words = f"{names}: {problem.type}: {problem.message}"
                self._record.scratchpad_error = excerpt(words, MAX_NOTES)
            workflow.logger.warning("scratchpad write failed", extra={"files": names})
