"""A plan's task graph as it runs: which tasks may start (a wave: every pending task whose
dependencies have all succeeded, in declaration order), each task's way through the states
around its run, and failure isolation (a task that ends in error skips its transitive
dependents, naming it; independent branches go on; `fail_fast` stops the plan instead).

A task's agent run itself is `TaskRuns` (coord.models.plan.runs), its worker slots
`SlotQueue` (coord.models.plan.slots); `PlanModel` (coord.models.plan.model) composes them."""

from datetime import datetime

from pydantic import BaseModel, PrivateAttr

from coord.models.events.envelope import Priority
from coord.models.plan.gates import rejection, timed_out
from coord.models.plan.records import TaskBook
from coord.models.plan.spec import (
    ENDED_TASK_STATES,
    ApprovalGate,
    PlanSpec,
    PlanTask,
    ReviewRound,
    TaskError,
    TaskState,
)


class PlanGraph(BaseModel):
    """What was started and whether the plan stops; the rest is derived from the spec and the
    record when `attach`ed to them (so a graph read back from its JSON schedules the same)."""

    launched: list[str] = []
    """Tasks handed to the workflow to run (their lifecycle started)."""
    stopping: str | None = None
    """Why the plan stops early (a cancel, or `fail_fast`'s first error): nothing new starts."""

    _spec: PlanSpec = PrivateAttr()
    _book: TaskBook = PrivateAttr()
    _index: dict[str, int] = PrivateAttr()
    _dependents: dict[str, list[str]] = PrivateAttr()
    _unmet: dict[str, int] = PrivateAttr()
    """Per task not launched, how many of its dependencies have not succeeded yet."""
    _startable: list[str] = PrivateAttr()

    def attach(self, spec: PlanSpec, book: TaskBook, index: dict[str, int]) -> None:
        """The graph of `spec`'s tasks (`index`: task id -> declaration index), their states
        in `book`."""
        self._spec, self._book, self._index = spec, book, index
        self._dependents = {task.id: [] for task in spec.tasks}
        for task in spec.tasks:
            for dependency in task.depends_on:
                self._dependents[dependency].append(task.id)
        succeeded = {t.id for t in spec.tasks if book.record(t.id).state == TaskState.SUCCEEDED}
        self._unmet = {
            task.id: sum(d not in succeeded for d in task.depends_on)
            for task in spec.tasks
            if task.id not in self.launched
        }
        self._startable = [
            task.id
            for task in spec.tasks
            if self._unmet.get(task.id) == 0 and book.record(task.id).state == TaskState.PENDING
        ]

    # --- What may start -------------------------------------------------------------------

    def has_startable(self) -> bool:
        return bool(self._startable) and self.stopping is None

    def take_startable(self) -> list[PlanTask]:
        """The pending tasks whose dependencies have all succeeded, in declaration order, now
        handed to the workflow to run."""
        if self.stopping is not None:
            return []
        taken, self._startable = sorted(self._startable, key=self._index.__getitem__), []
        for task_id in taken:
            self.launched.append(task_id)
            del self._unmet[task_id]
        return [self.task(task_id) for task_id in taken]

    def task(self, task_id: str) -> PlanTask:
        """A task of the spec by id, without a walk through every task."""
        return self._spec.tasks[self._index[task_id]]

    def standing(self, task_id: str) -> tuple[Priority, int]:
        """Where the task's requests for a worker slot stand: its priority, then its
        declaration index (a key that is no task's: last)."""
        if task_id not in self._index:
            return Priority.LOW, len(self._index)
        return self.task(task_id).priority, self._index[task_id]

    # --- A task's way through the states around its run ----------------------------------

    def task_awaiting_approval(self, task_id: str, now: datetime) -> None:
        """Its dependencies succeeded; a person must approve it before it asks for a slot."""
        self._book.transition(task_id, TaskState.AWAITING_APPROVAL, self._book.latest(now))

    def approval_ended(self, task_id: str, gate: ApprovalGate, now: datetime) -> bool:
        """The wait for a person ended, with a decision or at the gate's timeout (a decision
        that landed with the timer still counts): True when approved; else the task ends in
        error (`approval_rejected`)."""
        record = self._book.record(task_id)
        if record.approval is None:
            record.approval = timed_out(gate, now)
        if record.approval.approved:
            return True
        self.task_error(task_id, now, rejection(record.approval))
        return False

    def task_ready(self, task_id: str, now: datetime) -> None:
        """Runnable: its dependencies succeeded (and a person approved, when asked)."""
        self._book.transition(task_id, TaskState.READY, self._book.latest(now))

    def task_reviewing(self, task_id: str, now: datetime) -> bool:
        """Its result is with reviewers or verifiers; True when it moved there (it stays under
        review from one round to the next)."""
        if self._book.record(task_id).state == TaskState.REVIEWING:
            return False
        self._book.transition(task_id, TaskState.REVIEWING, self._book.latest(now))
        return True

    def task_reviewed(
        self, task_id: str, review: ReviewRound, failed: TaskError | None, now: datetime
    ) -> bool:
        """A review or verification round of the task, in its record; a reviewer that gave no
        verdict (`failed`: its run failed for good, or its answer was not one) ends the task in
        error, as a fix cannot mend a reviewer. True when the task goes on."""
        self._book.reviewed(task_id, review)
        if failed is None:
            return True
        self.task_error(task_id, now, failed)
        return False

    def task_succeeded(self, task_id: str, now: datetime) -> None:
        """The task is done: its dependents whose dependencies have all succeeded may start."""
        self._book.end(task_id, TaskState.SUCCEEDED, now)
        for dependent in self._dependents[task_id]:
            if dependent in self._unmet:
                self._unmet[dependent] -= 1
                if self._unmet[dependent] == 0:
                    self._startable.append(dependent)

    def task_error(self, task_id: str, now: datetime, error: TaskError) -> list[str]:
        """The task failed for good (retries spent, review budget spent, approval rejected):
        its transitive dependents are skipped, naming it; independent branches go on. With
        `fail_fast` the plan stops. Returns the tasks skipped."""
        self._book.record(task_id).error = error
        self._book.end(task_id, TaskState.ERROR, now, reason=f"{error.type}: {error.message}")
        if self._spec.fail_fast and self.stopping is None:
            self.stopping = f"fail_fast: task {task_id} ended error"
        return self._skip_dependents(task_id, now)

    def task_cancelled(self, task_id: str, now: datetime, reason: str) -> None:
        if self._book.record(task_id).state not in ENDED_TASK_STATES:
            self._book.end(task_id, TaskState.CANCELLED, self._book.latest(now), reason=reason)

    def stop(self, reason: str) -> None:
        """Nothing new starts (a cancel); what runs is cancelled by the workflow."""
        self.stopping = self.stopping or reason

    def cancel_unended(self, now: datetime) -> None:
        """Once the plan stops and its running tasks are cancelled: every task that has not
        ended (waiting for dependencies, a slot, or a person) is cancelled."""
        for task in self._spec.tasks:
            self.task_cancelled(task.id, now, self.stopping or "plan stopped")

    def _skip_dependents(self, failed: str, now: datetime) -> list[str]:
        skipped: list[str] = []
        frontier = list(self._dependents[failed])
        book = self._book
        now = book.latest(now)
        while frontier:
            task_id = frontier.pop(0)
            record = book.record(task_id)
            if record.state != TaskState.PENDING:
                continue
            record.skipped_because = failed
            reason = f"depends on {failed}, which ended {book.record(failed).state.value}"
            book.end(task_id, TaskState.SKIPPED, now, reason=reason)
            self._unmet.pop(task_id, None)
            skipped.append(task_id)
            frontier += self._dependents[task_id]
        return skipped
