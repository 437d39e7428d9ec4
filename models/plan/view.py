"""A running plan as its readers see it: the `progress` query (running tasks with their latest
summary and elapsed time, counts by state, what the plan waits for) and the Temporal UI's
'current details' (the same, in markdown). Rendered from the record directly: the workflow
renders the details at every step, so they build no models and walk only the tasks they list."""

from datetime import datetime

from coord.models.plan.gates import TIME_SHOWN, waiting_for
from coord.models.plan.graph import PlanGraph
from coord.models.plan.planner import planning_line
from coord.models.plan.records import TaskBook
from coord.models.plan.slots import SlotQueue
from coord.models.plan.spec import (
    PlanProgress,
    PlanState,
    RunningTask,
    TaskRecord,
    TaskState,
)

DETAILS_RUNNING = 20
"""Running tasks the current details list by name; the rest are counted."""


def _elapsed(record: TaskRecord, now: datetime) -> float:
    """Seconds since the task started, to a tenth, as the progress view gives them."""
    return round((now - (record.started_at or now)).total_seconds(), 1)


class PlanView:
    """The views of one plan's record (`state`): its tasks in `book`, their `graph` and the
    worker `slots`."""

    def __init__(
        self, state: PlanState, book: TaskBook, graph: PlanGraph, slots: SlotQueue
    ) -> None:
        self._state, self._book, self._graph, self._slots = state, book, graph, slots

    def progress(self, now: datetime) -> PlanProgress:
        """The `progress` query: running tasks with their latest summary and elapsed time."""
        running = [
            RunningTask(
                task=record.id,
                state=record.state,
                summary=record.progress,
                elapsed_s=_elapsed(record, now),
                started_at=record.started_at,
            )
            for record in self._book.active()
        ]
        return PlanProgress(
            plan_id=self._state.plan_id,
            status=self._state.status,
            counts=self._book.counts(),
            running=running,
            waiting_for=self.waiting_for(),
        )

    def waiting_for(self) -> list[str]:
        """What the plan waits for besides running agents: people, messages to its team's
        members, and free worker slots."""
        waits = [
            self._approval_awaited(record)
            for record in self._book.watched()
            if record.state == TaskState.AWAITING_APPROVAL
        ]
        waits += self._state.messages.waits()
        slot = self._slots.waiting_line()
        return waits if slot is None else [*waits, slot]

    def _approval_awaited(self, record: TaskRecord) -> str:
        gate = self._graph.task(record.id).approval
        since = record.transitions[-1].at
        return waiting_for(record.id, gate, since) if gate else f"approval of {record.id}"

    def details(self) -> str:
        """The plan as the Temporal UI shows it in 'current details' (markdown): what the
        `progress` query says, each running task with the time it started, which stays true
        while the details are shown (an elapsed time would stand still between the workflow
        tasks that render them)."""
        counts = ", ".join(f"{n} {state.value}" for state, n in self._book.counts().items())
        lines = [f"**Status:** {self._state.status.value} ({counts})"]
        if self._state.planning is not None:
            lines.append(f"**Planned:** {planning_line(self._state.planning)}")
        running = self._book.active()
        for record in running[:DETAILS_RUNNING]:
            doing = f": {record.progress}" if record.progress else ""
            since = f" since {record.started_at:{TIME_SHOWN}}" if record.started_at else ""
            lines.append(f"- **{record.id}** {record.state.value}{since}{doing}")
        if len(running) > DETAILS_RUNNING:
            lines.append(f"- and {len(running) - DETAILS_RUNNING} more")
        picked = [
            f"{r.id}: {r.assignment.describe()}" for r in self._book.assigned() if r.assignment
        ]
        if picked:
            lines.append(f"**Picked by capability:** {'; '.join(picked[-DETAILS_RUNNING:])}")
        waits = self.waiting_for()
        if waits:
            lines.append(f"**Waiting for:** {'; '.join(waits)}")
        if self._state.summary:
            lines.append(f"**Summary:** {self._state.summary}")
        return "\n\n".join(lines)
