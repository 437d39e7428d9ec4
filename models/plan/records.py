"""A plan's task records as it keeps them while it runs: each task's state and how it got there
(its transitions), with what the workflow asks of them at every step kept at hand (the tasks by
state, the tasks the progress view lists, the tasks whose agent was picked by capability).

Every change of a task's state goes through `transition`, so these stay true; they are derived
from the record alone (`PlanState.tasks`), so a model read back from its JSON has the same."""

from collections import Counter
from collections.abc import Mapping
from datetime import datetime

from coord.models.mesh.assignment import Assignment
from coord.models.plan.announcer import PlanAnnouncer
from coord.models.plan.spec import (
    ENDED_TASK_STATES,
    PlanState,
    ReviewRound,
    TaskRecord,
    TaskState,
    Transition,
)

ACTIVE_STATES = frozenset({TaskState.RUNNING, TaskState.REVIEWING})
"""A task holding (or about to hold) worker slots: what the progress view lists."""
WATCHED_STATES = ACTIVE_STATES | {TaskState.AWAITING_APPROVAL}


class TaskBook:
    """The records of a plan's tasks by id, in declaration order (`order`: task id -> index)."""

    def __init__(self, state: PlanState, order: Mapping[str, int]) -> None:
        self._records = {record.id: record for record in state.tasks}
        self._order = order
        self._counts = Counter(record.state for record in state.tasks)
        self._watched = {r.id: None for r in state.tasks if r.state in WATCHED_STATES}
        """The tasks the progress view lists (running, under review, awaiting approval), kept
        as they change so that publishing the details after each change does not walk every
        task."""
        self._assigned = {r.id: None for r in state.tasks if r.assignment is not None}
        """The tasks whose agent was picked by capability (the details list them)."""
        self.announcer: PlanAnnouncer | None = None
        """Told of every change, when the plan announces its lifecycle."""
        self._ran_until: dict[str, datetime] = {}
        """Per task, when its latest run ended as its worker said (`ran_until`)."""
        moves = [r.transitions[-1].at for r in state.tasks if r.transitions]
        self._seen: datetime | None = max(moves, default=None)
        """The latest time the record has seen: of any move, or any run's end (`latest`)."""

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._records

    def record(self, task_id: str) -> TaskRecord:
        return self._records[task_id]

    def transition(
        self,
        task_id: str,
        state: TaskState,
        now: datetime,
        *,
        attempt: int | None = None,
        reason: str | None = None,
    ) -> None:
        """The task moves to `state` at `now`, or, if later, at its latest move or its run's
        end (`at`); the record keeps the move."""
        record = self._records[task_id]
        now = self.at(task_id, now)
        self._counts[record.state] -= 1
        self._counts[state] += 1
        record.state = state
        if state in WATCHED_STATES:
            self._watched[task_id] = None
        else:
            self._watched.pop(task_id, None)
        moved = Transition(state=state, at=now, attempt=attempt, reason=reason)
        record.transitions.append(moved)
        self._saw(now)
        if self.announcer is not None:
            self.announcer.transition(record, moved)

    def ran_until(self, task_id: str, ended: datetime) -> None:
        """The task's run ended at `ended`, as its worker said: a run that ended in the workflow
        task it began in (a local run, its retries too) ended after the workflow's time."""
        self._ran_until[task_id] = ended
        self._saw(ended)

    def latest(self, now: datetime) -> datetime:
        """When something the workflow decides at its `now` happens (a task made ready, a run
        started, a skip, a cancel, the plan's end): no earlier than the latest time the record
        has seen. The workflow's time is the start of its workflow task, and a run that ended
        in it (a local run) was reported ending later; what the workflow decides after hearing
        of it came after it."""
        return now if self._seen is None or now >= self._seen else self._seen

    def _saw(self, at: datetime) -> None:
        if self._seen is None or at > self._seen:
            self._seen = at

    def at(self, task_id: str, now: datetime) -> datetime:
        """When a move of the task made at the workflow's `now` is recorded: no earlier than its
        latest move, nor than the end of its latest run (the workflow's time is the start of the
        workflow task its run may have ended in). So a task's moves stay in order, whatever the
        clocks of the workers that reported its attempts."""
        record = self._records[task_id]
        latest = [record.transitions[-1].at] if record.transitions else []
        ran = self._ran_until.get(task_id)
        return max([now, *latest, *([ran] if ran is not None else [])])

    def reviewed(self, task_id: str, review: ReviewRound) -> None:
        """A review or verification round of the task, kept in its record."""
        record = self._records[task_id]
        record.reviews.append(review)
        if self.announcer is not None:
            self.announcer.reviewed(record, review)

    def end(self, task_id: str, state: TaskState, now: datetime, reason: str | None = None) -> None:
        """The task ends in `state` (one of `ENDED_TASK_STATES`), at `now` or later (`at`)."""
        record = self._records[task_id]
        now = self.at(task_id, now)
        record.ended_at = now
        record.progress = None
        self.transition(task_id, state, now, reason=reason)

    def assign(self, task_id: str, assignment: Assignment) -> None:
        """The task is done by the agent picked for it by capability."""
        record = self._records[task_id]
        record.agent = assignment.agent
        record.assignment = assignment
        self._assigned[task_id] = None

    def count(self, state: TaskState) -> int:
        return self._counts[state]

    def counts(self) -> dict[TaskState, int]:
        """The tasks by state, in the states' order, none at zero."""
        counts = self._counts
        return {state: counts[state] for state in TaskState if counts[state]}

    def busy(self) -> bool:
        """Some task is running or being reviewed (what the progress reader watches)."""
        counts = self._counts
        return any(counts[state] for state in ACTIVE_STATES)

    def finished(self) -> bool:
        """Every task has ended."""
        counts = self._counts
        return sum(counts[state] for state in ENDED_TASK_STATES) == len(self._records)

    def watched(self) -> list[TaskRecord]:
        """The records of the tasks running, under review or awaiting approval, in
        declaration order."""
        return [self._records[t] for t in sorted(self._watched, key=self._order.__getitem__)]

    def active(self) -> list[TaskRecord]:
        """The records of the tasks running or under review, in declaration order."""
        return [record for record in self.watched() if record.state in ACTIVE_STATES]

    def assigned(self) -> list[TaskRecord]:
        """The records of the tasks whose agent was picked by capability, in declaration
        order."""
        return [self._records[t] for t in sorted(self._assigned, key=self._order.__getitem__)]
