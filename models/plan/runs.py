"""A plan's task runs, the run lifecycle (`RunLifecycle`, coord.models.mesh.lifecycle) as a plan
keeps it: a task's agent run (or its vote) started, retried, answered or failed for good, and
what its progress reader saw of it. Keyed by task id; a task's fix rounds are runs of the same
task, numbered from 1. A run that failed for good ends its task in error through the graph
(`PlanGraph.task_error`), which skips the task's dependents."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, PrivateAttr

from coord.models.mesh.agents import AgentResult
from coord.models.mesh.assignment import Assignment
from coord.models.mesh.attempts import AttemptTime, attempt_times
from coord.models.mesh.lifecycle import RunFailure
from coord.models.mesh.results import ResultReference
from coord.models.mesh.runs import RunDetour, kept
from coord.models.plan.graph import PlanGraph
from coord.models.plan.records import TaskBook
from coord.models.plan.spec import (
    ENDED_TASK_STATES,
    ActivityProgress,
    TaskError,
    TaskRecord,
    TaskState,
    current_activity,
    parse_activity_id,
)


class RunSeen(BaseModel):
    """A task's current run: its round, the attempt its record shows so far, and whether it
    was answered (succeeded, failed for good, or never sent)."""

    round: int
    attempt: int
    answered: bool = False


class TaskRuns(BaseModel):
    """Per task, its current run; the records and the graph are `attach`ed (see `PlanModel`).
    Satisfies `RunLifecycle[str, AgentResult, str]`: keyed by task id, a run's result is its
    agent's, and `running` names the tasks whose run is out."""

    runs: dict[str, RunSeen] = {}

    _book: TaskBook = PrivateAttr()
    _graph: PlanGraph = PrivateAttr()

    def attach(self, book: TaskBook, graph: PlanGraph) -> None:
        self._book, self._graph = book, graph

    def run_started(self, task_id: str, now: datetime, round: int = 1) -> None:
        """The task's agent run of `round` got its slot and is scheduled: attempt 1, no earlier
        than the latest time the record has seen (`TaskBook.latest`: after its dependencies
        ended, and after the run whose slot it took). A round after the first is a fix,
        counted once it starts (a plan stopped while the fix waited for its slot ran none)."""
        now = self._book.latest(now)
        record = self._book.record(task_id)
        record.attempts += 1
        record.fixes = round - 1
        record.started_at = record.started_at or now
        record.progress = record.progress_at = None
        self.runs[task_id] = RunSeen(round=round, attempt=1)
        self._book.transition(task_id, TaskState.RUNNING, now, attempt=1)

    def run_unsent(self, task_id: str, round: int) -> None:
        """The run of `round` was cancelled in the workflow task that scheduled it, so it never
        reached the server: not an attempt, nor a fix."""
        record = self._book.record(task_id)
        record.attempts = max(0, record.attempts - 1)
        record.fixes = max(0, round - 2)
        self._answered(task_id)

    def run_succeeded(self, task_id: str, now: datetime, result: AgentResult) -> None:
        """The run's result: its data, or only its reference when it was stored by reference;
        the attempt it succeeded at closes the attempts before it. The task stays running
        until its gates pass (`PlanGraph.task_succeeded`)."""
        attempt = result.metadata.get("attempt")
        times = attempt_times(result.metadata)
        if isinstance(attempt, int):
            self.retries_seen(task_id, attempt, None, now, times)
        self._ran_until(task_id, times.get(attempt) if isinstance(attempt, int) else None)
        self.result_kept(task_id, result.data, result.reference)

    def result_kept(
        self,
        task_id: str,
        data: dict[str, Any],
        reference: ResultReference | None = None,
        ended_as: str | None = None,
    ) -> None:
        """The run was answered: its result is the task's (`ended_as`: how it ended, in words,
        for a result that is a record of its own, a vote's)."""
        record = self._book.record(task_id)
        record.result, record.result_ref = (None, reference) if reference else (data, None)
        if ended_as is not None:
            record.ended_as = ended_as
        self._answered(task_id)

    def run_failed(self, task_id: str, now: datetime, failure: RunFailure) -> None:
        """The run failed for good at its `attempts`: `failed -> error`, its dependents
        skipped (`PlanGraph.task_error`), when its worker said it failed (else now)."""
        self.retries_seen(task_id, failure.attempts, None, now, failure.times)
        self._ran_until(task_id, failure.times.get(failure.attempts))
        self._book.transition(
            task_id, TaskState.FAILED, now, attempt=failure.attempts, reason=failure.message
        )
        self._answered(task_id)
        self._graph.task_error(task_id, now, TaskError.of(failure))

    def running(self) -> list[str]:
        """The tasks whose run is out: sent, not answered, and their task not ended (a
        cancelled task's run is not waited for)."""
        book = self._book
        return [
            task_id
            for task_id, run in self.runs.items()
            if not run.answered and book.record(task_id).state not in ENDED_TASK_STATES
        ]

    def _ran_until(self, task_id: str, last: AttemptTime | None) -> None:
        """The run's last attempt ended when its worker said (a local run's whole run, retries
        included, ends in the workflow task it began in): the task's record goes on from
        then (`TaskBook.ran_until`)."""
        if last is not None:
            self._book.ran_until(task_id, last.ended_at)

    def _answered(self, task_id: str) -> None:
        run = self.runs.get(task_id)
        if run is not None:
            run.answered = True

    # --- Retries and progress -------------------------------------------------------------

    def retries_seen(
        self,
        task_id: str,
        attempt: int,
        last_failure: str | None,
        now: datetime,
        times: Mapping[int, AttemptTime] | None = None,
    ) -> bool:
        """The current run is at `attempt` (the progress reader saw it, or its outcome said
        so): the attempts before it failed, each `failed -> running` in the record, when and
        how its worker said (`times`), else now, the last with `last_failure`. Returns
        whether the record changed."""
        run = self.runs.get(task_id)
        if run is None or attempt <= run.attempt:
            return False
        times = times or {}
        for next_attempt in range(run.attempt + 1, attempt + 1):
            failed, began = times.get(next_attempt - 1), times.get(next_attempt)
            reason = last_failure if next_attempt == attempt else None
            self._book.transition(
                task_id,
                TaskState.FAILED,
                failed.ended_at if failed else now,
                attempt=next_attempt - 1,
                reason=_reason(failed) if failed else reason,
            )
            at = began.started_at if began else now
            self._book.transition(task_id, TaskState.RUNNING, at, attempt=next_attempt)
            self._book.record(task_id).attempts += 1
        run.attempt = attempt
        return True

    def activity_seen(self, seen: ActivityProgress, now: datetime) -> bool:
        """What the progress reader saw of one of the plan's pending activities, for the plans
        that poll it (started before they stopped): its agent's latest summary and, for the
        task's current run, its attempt and last failure. A read is a moment late (the plan went
        on while the server was asked): what it says of a run or a review that has ended since
        is not recorded. Returns whether the record changed."""
        key = parse_activity_id(seen.activity_id)
        if key is None or key.task not in self._book:
            return False
        record = self._book.record(key.task)
        if not current_activity(record, key):
            return False
        if key.kind != "run":
            return _progress_seen(record, seen.progress, now)
        retried = self.retries_seen(key.task, seen.attempt, seen.last_failure, now)
        return _progress_seen(record, seen.progress, now) or retried

    # --- Who runs it ----------------------------------------------------------------------

    def task_assigned(self, task_id: str, assignment: Assignment) -> None:
        """A task naming capabilities is done by the agent picked for it (every round)."""
        self._book.assign(task_id, assignment)

    def task_detoured(self, task_id: str, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run of the task that waited for its agent or went elsewhere; a task whose run went
        to another agent is done by it from then on (its fix rounds too)."""
        record = self._book.record(task_id)
        record.detours = kept(record.detours, detour)
        if assignment is not None:
            self.task_assigned(task_id, assignment)
        elif detour.to_agent is not None:
            record.agent = detour.to_agent


def _reason(failed: AttemptTime) -> str:
    """A failed attempt's reason as its worker reported it: its message, else its type."""
    return failed.message or failed.type


def _progress_seen(record: TaskRecord, progress: str | None, now: datetime) -> bool:
    if progress is None or progress == record.progress:
        return False
    record.progress, record.progress_at = progress, now
    return True
