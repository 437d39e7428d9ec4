"""What a plan announces into its correlation's chain (the event taxonomy,
coord.models.events.taxonomy), decided from its record alone: every change of a task's state
(`TaskBook.transition`) and every review round becomes one or more events, each caused by the
event before it in the task's life, so the causation links form a tree back to `PlanStarted`.

Pure: the workflow hands a sink that sends each event (in the background); a test hands a list's
`append`."""

from collections.abc import Callable
from datetime import datetime
from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.events.taxonomy import (
    AgentHandoff,
    ApprovalRequested,
    DecisionMade,
    DependencyResolved,
    Payload,
    PlanCompleted,
    PlanStarted,
    ReviewCompleted,
    ReviewRequested,
    TaskCancelled,
    TaskCompleted,
    TaskFailed,
    TaskSkipped,
    TaskStarted,
    VerificationCompleted,
)
from coord.models.events.timeline import TimelineEntry
from coord.models.plan.spec import (
    PlanSpec,
    PlanState,
    PlanTask,
    ReviewRound,
    TaskRecord,
    TaskState,
    Transition,
)

Sink = Callable[[EventEnvelope], None]
EVENTS_WINDOW = 200
"""The newest announcements a plan's record keeps (the chain's timeline keeps as many)."""


class PlanAnnouncer:
    """The plan's announcements and the latest event of each task (what its next one is
    caused by)."""

    def __init__(self, spec: PlanSpec, state: PlanState, sink: Sink) -> None:
        self._spec = spec
        self._state = state
        self._seq = 0
        self._sink = sink
        self._source = f"/plan/{spec.plan_id}"
        self._tasks = {task.id: task for task in spec.tasks}
        self._latest: dict[str, str] = {}
        """Task id -> its latest event's id."""
        self._completed: dict[str, int] = {}
        """Task id -> the order its `TaskCompleted` was announced in."""
        self._last: str | None = None
        self._at: datetime | None = None
        """The time of the move being announced (`transition`): its events are stamped with it
        (a retry's failure reported by its worker happened before the workflow heard of it)."""
        self._started = self._announce(
            "PlanStarted",
            PlanStarted(
                plan_id=spec.plan_id, name=spec.name, tasks=[task.id for task in spec.tasks]
            ),
            None,
        )

    def latest(self, task_id: str) -> str:
        """The id of the task's latest event (`PlanStarted` before it has one)."""
        return self._latest.get(task_id, self._started)

    def transition(self, record: TaskRecord, moved: Transition) -> None:
        """A task changed state: the events that says, by the state it reached, at its time."""
        self._at = moved.at
        try:
            self._moved(record, moved)
        finally:
            self._at = None

    def _moved(self, record: TaskRecord, moved: Transition) -> None:
        task = self._tasks[record.id]
        previous = record.transitions[-2].state if len(record.transitions) > 1 else None
        state = moved.state
        if state in (TaskState.AWAITING_APPROVAL, TaskState.READY):
            self._waited(task, record, previous)
        elif state == TaskState.RUNNING:
            self._started_run(task, record, moved)
        elif state == TaskState.REVIEWING:
            kind = "review" if task.review is not None else "verify"
            requested = ReviewRequested(
                **self._task_fields(record), kind=kind, round=len(record.reviews) + 1
            )
            self._task_event(record.id, "ReviewRequested", requested)
        else:
            self._ended(task, record, moved, previous)

    def reviewed(self, record: TaskRecord, review: ReviewRound) -> None:
        """A review or verification round ended: its verdicts."""
        fields = self._task_fields(record)
        names = [verdict.reviewer for verdict in review.verdicts]
        payload: Payload
        if review.kind == "review":
            stage = review.stage.value if review.stage is not None else None
            payload = ReviewCompleted(
                **fields, round=review.round, stage=stage, passed=review.passed, reviewers=names
            )
        else:
            payload = VerificationCompleted(
                **fields, round=review.round, passed=review.passed, verifiers=names
            )
        self._task_event(record.id, type(payload).__name__, payload)

    def plan_ended(self, state: PlanState) -> None:
        """The plan ended, when its record says (after the last event it saw)."""
        payload = PlanCompleted(
            plan_id=state.plan_id, status=state.status.value, summary=state.summary or ""
        )
        self._at = state.ended_at
        try:
            self._announce("PlanCompleted", payload, self._last)
        finally:
            self._at = None

    def _waited(self, task: PlanTask, record: TaskRecord, previous: TaskState | None) -> None:
        """Its dependencies succeeded (handed over, then resolved), then it awaits a person or
        is ready; ready after a person approved: the decision."""
        if previous == TaskState.AWAITING_APPROVAL:
            self._decision(record)
            return
        self._resolved(task, record)
        if record.state == TaskState.AWAITING_APPROVAL:
            approvers = task.approval.approvers if task.approval is not None else None
            requested = ApprovalRequested(**self._task_fields(record), approvers=approvers or [])
            self._task_event(record.id, "ApprovalRequested", requested)

    def _resolved(self, task: PlanTask, record: TaskRecord) -> None:
        if not task.depends_on:
            return
        for dependency in task.depends_on:
            handoff = AgentHandoff(
                plan_id=self._spec.plan_id,
                from_task=dependency,
                from_agent=self._spec.agent_of(self._tasks[dependency]),
                to_task=task.id,
                to_agent=record.agent,
            )
            self._announce("AgentHandoff", handoff, self.latest(dependency))
        last = max(task.depends_on, key=lambda dependency: self._completed.get(dependency, 0))
        resolved = DependencyResolved(
            plan_id=self._spec.plan_id, task=task.id, dependencies=list(task.depends_on)
        )
        self._latest[task.id] = self._announce("DependencyResolved", resolved, self.latest(last))

    def _decision(self, record: TaskRecord) -> None:
        decided = record.approval
        if decided is None:
            return
        payload = DecisionMade(
            kind="approval",
            subject=f"{self._spec.plan_id}/{record.id}",
            outcome="approved" if decided.approved else "rejected",
            by=decided.by,
            reason=decided.reason,
        )
        self._task_event(record.id, "DecisionMade", payload)

    def _started_run(self, task: PlanTask, record: TaskRecord, moved: Transition) -> None:
        payload = TaskStarted(
            **self._task_fields(record), attempt=moved.attempt or 1, round=record.fixes + 1
        )
        self._task_event(record.id, "TaskStarted", payload)

    def _ended(
        self, task: PlanTask, record: TaskRecord, moved: Transition, previous: TaskState | None
    ) -> None:
        state = moved.state
        fields = self._task_fields(record)
        plan_id = self._spec.plan_id
        if state == TaskState.SUCCEEDED:
            self._completed[record.id] = len(self._completed) + 1
            completed = TaskCompleted(**fields, attempts=record.attempts)
            self._task_event(record.id, "TaskCompleted", completed)
        elif state in (TaskState.FAILED, TaskState.ERROR):
            if previous == TaskState.AWAITING_APPROVAL:
                self._decision(record)
            final = state == TaskState.ERROR
            reason = moved.reason or ""
            failed = TaskFailed(**fields, attempt=moved.attempt, reason=reason, final=final)
            self._task_event(record.id, "TaskFailed", failed)
        elif state == TaskState.SKIPPED:
            because = record.skipped_because or ""
            skipped = TaskSkipped(plan_id=plan_id, task=record.id, because=because)
            self._latest[record.id] = self._announce("TaskSkipped", skipped, self.latest(because))
        elif state == TaskState.CANCELLED:
            cancelled = TaskCancelled(plan_id=plan_id, task=record.id, reason=moved.reason or "")
            self._task_event(record.id, "TaskCancelled", cancelled)

    def _task_event(self, task_id: str, event_type: str, payload: Payload) -> None:
        """An event of a task, caused by the task's latest one."""
        self._latest[task_id] = self._announce(event_type, payload, self.latest(task_id))

    def _task_fields(self, record: TaskRecord) -> dict[str, Any]:
        return {"plan_id": self._spec.plan_id, "task": record.id, "agent": record.agent}

    def _announce(self, event_type: str, payload: Payload, cause: str | None) -> str:
        envelope = EventEnvelope.new(
            event_type,
            self._source,
            payload=payload.model_dump(mode="json"),
            correlation_id=self._spec.correlation_id,
            causation_id=cause,
            timestamp=self._at,
        )
        self._sink(envelope)
        self._last = envelope.event.id
        self._keep(envelope)
        return envelope.event.id

    def _keep(self, envelope: EventEnvelope) -> None:
        """The event's row in the record's window (trimmed when it reaches twice its size)."""
        self._seq += 1
        events = self._state.events
        row = TimelineEntry.recording(
            envelope, seq=self._seq, correlation_id=self._spec.correlation_id
        )
        events.append(row)
        if len(events) >= 2 * EVENTS_WINDOW:
            del events[:-EVENTS_WINDOW]
