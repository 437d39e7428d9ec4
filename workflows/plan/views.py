"""What a plan shows while it runs, inside the `TaskGraph` workflow: its current details in the
Temporal UI (`PlanView.details`, rendered once per workflow step), and, for runs recorded before
the progress was read on demand, the polling of its activities' progress."""

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.plan.model import PlanModel
    from coord.workflows._runtime import calls
    from coord.workflows._runtime.common import show_details

PROGRESS_READ_TIMEOUT = timedelta(seconds=10)
PROGRESS_READ_RETRY = RetryPolicy(maximum_attempts=1)
"""The progress reader is best effort: a read that fails is skipped, the next one comes."""


class Details:
    """The plan's current details, rendered once per workflow step however many changes the
    step made (each task's lifecycle reports every change): rendering them per change cost a
    large plan time quadratic in its tasks."""

    def __init__(self, model: PlanModel | None) -> None:
        self.model = model
        self._publishing = False

    def changed(self) -> None:
        """The record changed: the details are rendered at the end of this step."""
        if not self._publishing:
            self._publishing = True
            asyncio.get_running_loop().call_soon(self.publish_now)

    def publish_now(self) -> None:
        self._publishing = False
        if self.model is not None:
            show_details(self.model.view.details())


async def watch_progress(model: PlanModel, details: Details) -> None:
    """Runs recorded before `PROGRESS_ON_DEMAND_PATCH`: every `progress_interval` while tasks
    run, reads their activities' heartbeat details (the agents' progress summaries, attempts
    and last failures) into the record."""
    interval = model.spec.progress_interval
    while True:
        await workflow.wait_condition(model.book.busy)
        await workflow.sleep(interval, summary="next progress read")
        if model.book.busy():
            await _read_progress(model, details)


async def _read_progress(model: PlanModel, details: Details) -> None:
    try:
        seen = await calls.execute_local(
            refs.PLAN_PROGRESS,
            workflow.info().workflow_id,
            start_to_close_timeout=PROGRESS_READ_TIMEOUT,
            retry_policy=PROGRESS_READ_RETRY,
        )
    except ActivityError:
        return
    now = workflow.now()
    if any([model.runs.activity_seen(item, now) for item in seen]):
        details.changed()
