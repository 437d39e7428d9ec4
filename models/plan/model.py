"""A plan's scheduler and state machine, apart from Temporal: which tasks may start, who gets a
worker slot, each task's way through the seed 003 states, failure isolation, the plan's outcome,
its progress view and its current details. Pure and serialisable like `ChainModel`, so it is
tested without a server; the workflow (`coord.workflows.plan.graph`) keeps only activities, timers,
cancellation and queries. Times are given by the caller (`workflow.now()`), never read here.

The cap: every agent activity a plan runs (a task's run, each review, each verifier) asks for
one of `max_workers` slots, waits until it is granted and gives it back when the activity
closes. Waiting requests are served by their task's priority (critical first), then by the
task's declaration order, then in the order asked."""

from bisect import insort
from collections import Counter
from datetime import datetime
from typing import Any

from pydantic import BaseModel, PrivateAttr

from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.mesh.agents import AgentRequest
from coord.models.mesh.assignment import Assignment
from coord.models.mesh.results import ResultReference
from coord.models.mesh.runs import RunDetour, kept
from coord.models.plan.gates import waiting_for
from coord.models.plan.spec import (
    ENDED_TASK_STATES,
    ActivityProgress,
    PlanProgress,
    PlanSpec,
    PlanState,
    PlanStatus,
    PlanTask,
    RunningTask,
    TaskError,
    TaskRecord,
    TaskState,
    Transition,
    counts_line,
    current_activity,
    parse_activity_id,
)

PRIORITY_RANK = {Priority.CRITICAL: 0, Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}
ACTIVE_STATES = frozenset({TaskState.RUNNING, TaskState.REVIEWING})
"""A task holding (or about to hold) worker slots: what the progress view lists."""
WATCHED_STATES = ACTIVE_STATES | {TaskState.AWAITING_APPROVAL}
DETAILS_RUNNING = 20
"""Running tasks the current details list by name; the rest are counted."""


class SlotRequest(BaseModel):
    """An agent activity waiting for a worker slot; `key` is its activity id."""

    key: str
    task: str
    rank: tuple[int, int, int]
    """(priority rank, declaration index, order asked): the smallest is served first."""


def _rank(request: SlotRequest) -> tuple[int, int, int]:
    return request.rank


def _elapsed(record: TaskRecord, now: datetime) -> float:
    """Seconds since the task started, to a tenth, as the progress view gives them."""
    return round((now - (record.started_at or now)).total_seconds(), 1)


class RunSeen(BaseModel):
    round: int
    attempt: int


class PlanModel(BaseModel):
    """A plan's bookkeeping: the spec, the record, the slots and which tasks were started. Made
    by `begin`; the workflow asks it what may start and tells it what happened."""

    spec: PlanSpec
    state: PlanState
    holders: list[str] = []
    """Activity ids holding a slot."""
    waiting: list[SlotRequest] = []
    """Requests waiting for a slot, kept in rank order."""
    launched: list[str] = []
    """Tasks handed to the workflow to run (their lifecycle started)."""
    asked: int = 0
    runs: dict[str, RunSeen] = {}
    """Per task, its current run's round and the attempt the record shows so far."""
    stopping: str | None = None
    """Why the plan stops early (a cancel, or `fail_fast`'s first error): nothing new starts."""

    _records: dict[str, TaskRecord] = PrivateAttr()
    _index: dict[str, int] = PrivateAttr()
    _dependents: dict[str, list[str]] = PrivateAttr()
    _unmet: dict[str, int] = PrivateAttr()
    """Per task not launched, how many of its dependencies have not succeeded yet."""
    _startable: list[str] = PrivateAttr()
    _counts: Counter[TaskState] = PrivateAttr()
    _watched: dict[str, None] = PrivateAttr()
    """The tasks the progress view lists (running, under review, awaiting approval), kept as
    they change so that publishing the details after each change does not walk every task."""
    _assigned: dict[str, None] = PrivateAttr()
    """The tasks whose agent was picked by capability (the details list them)."""
    _deciding: set[str] = PrivateAttr(default_factory=set)
    """Tasks with a decision whose caller is being read (one at a time per task)."""
    _closed: set[str] = PrivateAttr(default_factory=set)
    """Tasks whose approval timer fired while a decision was being checked: no other is taken."""

    @classmethod
    def begin(cls, spec: PlanSpec, now: datetime) -> "PlanModel":
        """A new plan: every task pending, the roots startable."""
        records = [
            TaskRecord(
                id=task.id,
                agent=spec.agent_of(task),
                summary=task.summary,
                transitions=[Transition(state=TaskState.PENDING, at=now)],
            )
            for task in spec.tasks
        ]
        state = PlanState(
            plan_id=spec.plan_id,
            name=spec.name,
            correlation_id=spec.correlation_id,
            max_workers=spec.max_workers,
            started_at=now,
            tasks=records,
        )
        return cls(spec=spec, state=state)

    def model_post_init(self, context: Any, /) -> None:
        """The indexes, derived from the spec and the record (so a model read back from its
        JSON schedules the same)."""
        self._records = {record.id: record for record in self.state.tasks}
        self._index = {task.id: i for i, task in enumerate(self.spec.tasks)}
        self._dependents = {task.id: [] for task in self.spec.tasks}
        for task in self.spec.tasks:
            for dependency in task.depends_on:
                self._dependents[dependency].append(task.id)
        succeeded = {r.id for r in self.state.tasks if r.state == TaskState.SUCCEEDED}
        self._unmet = {
            task.id: sum(d not in succeeded for d in task.depends_on)
            for task in self.spec.tasks
            if task.id not in self.launched
        }
        self._startable = [
            task.id
            for task in self.spec.tasks
            if self._unmet.get(task.id) == 0 and self._records[task.id].state == TaskState.PENDING
        ]
        self._counts = Counter(record.state for record in self.state.tasks)
        self._watched = {r.id: None for r in self.state.tasks if r.state in WATCHED_STATES}
        self._assigned = {r.id: None for r in self.state.tasks if r.assignment is not None}

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
        return self.spec.tasks[self._index[task_id]]

    def record(self, task_id: str) -> TaskRecord:
        return self._records[task_id]

    # --- Worker slots ---------------------------------------------------------------------

    def request_slot(self, key: str, task_id: str) -> None:
        """An activity (by its id) asks for a slot; it is granted when `holds_slot` is next
        asked (see there)."""
        priority = self.task(task_id).priority if task_id in self._index else Priority.LOW
        self.asked += 1
        rank = (PRIORITY_RANK[priority], self._index.get(task_id, len(self._index)), self.asked)
        insort(self.waiting, SlotRequest(key=key, task=task_id, rank=rank), key=_rank)

    def holds_slot(self, key: str) -> bool:
        """Whether the activity has its slot, free slots granted first (how runs recorded
        before the workflow granted slots itself wait: one wait condition per request).
        Granting waits for this question (a workflow's wait condition, asked once the
        workflow step has run everything it could) and for the tasks that became startable to
        be launched, so that every request of the step is ranked together: a critical task
        gets the slot before a low one that merely asked earlier in the same step. Asked of
        every waiting request at every step, so it answers from public fields first
        (pydantic's private attributes are slow to read)."""
        holders = self.holders
        if key in holders:
            return True
        if len(holders) >= self.spec.max_workers or self.has_startable():
            return False
        self.grant()
        return key in self.holders

    def grantable(self) -> bool:
        """Whether `grant` would give a slot now: a request waits, a slot is free, and no task
        waits to be launched (its request is ranked with the others once it has asked)."""
        waiting = bool(self.waiting) and len(self.holders) < self.spec.max_workers
        return waiting and not self.has_startable()

    def release_slot(self, key: str) -> None:
        """The activity closed (or never started): its slot is free for the next grant."""
        if key in self.holders:
            self.holders.remove(key)
        else:
            self.waiting = [request for request in self.waiting if request.key != key]

    def grant(self) -> list[str]:
        """Free slots to the waiting requests ranked first; returns their keys, in rank order."""
        free = self.spec.max_workers - len(self.holders)
        if free <= 0 or not self.waiting:
            return []
        granted, self.waiting = self.waiting[:free], self.waiting[free:]
        keys = [request.key for request in granted]
        self.holders += keys
        return keys

    # --- A task's way through the states --------------------------------------------------

    def task_awaiting_approval(self, task_id: str, now: datetime) -> None:
        """Its dependencies succeeded; a person must approve it before it asks for a slot."""
        self._transition(task_id, TaskState.AWAITING_APPROVAL, now)

    def checking_decision(self, task_id: str, checking: bool) -> None:
        """A decision for the task is being checked (its caller read), or no longer is."""
        if checking:
            self._deciding.add(task_id)
        else:
            self._deciding.discard(task_id)

    def deciding(self, task_id: str) -> bool:
        return task_id in self._deciding

    def checking_decisions(self) -> bool:
        """Some decision is being checked."""
        return bool(self._deciding)

    def close_approval(self, task_id: str) -> None:
        """The task's timer fired while a decision was being checked: it waits for that one."""
        self._closed.add(task_id)

    def approval_closed(self, task_id: str) -> bool:
        return task_id in self._closed

    def task_ready(self, task_id: str, now: datetime) -> None:
        """Runnable: its dependencies succeeded (and a person approved, when asked)."""
        self._transition(task_id, TaskState.READY, now)

    def task_assigned(self, task_id: str, assignment: Assignment) -> None:
        """A task naming capabilities is done by the agent picked for it (every round)."""
        record = self._records[task_id]
        record.agent = assignment.agent
        record.assignment = assignment
        self._assigned[task_id] = None

    def task_detoured(self, task_id: str, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run of the task that waited for its agent or went elsewhere; a task whose run went
        to another agent is done by it from then on (its fix rounds too)."""
        record = self._records[task_id]
        record.detours = kept(record.detours, detour)
        if assignment is not None:
            self.task_assigned(task_id, assignment)
        elif detour.to_agent is not None:
            record.agent = detour.to_agent

    def run_started(self, task_id: str, now: datetime, round: int = 1) -> None:
        """The task's agent run of `round` got its slot and is scheduled: attempt 1. A round
        after the first is a fix, counted once it starts (a plan stopped while the fix waited
        for its slot ran none)."""
        record = self._records[task_id]
        record.attempts += 1
        record.fixes = round - 1
        record.started_at = record.started_at or now
        record.progress = record.progress_at = None
        self.runs[task_id] = RunSeen(round=round, attempt=1)
        self._transition(task_id, TaskState.RUNNING, now, attempt=1)

    def run_unsent(self, task_id: str, round: int) -> None:
        """The run of `round` was cancelled in the workflow task that scheduled it, so it never
        reached the server: not an attempt, nor a fix."""
        record = self._records[task_id]
        record.attempts = max(0, record.attempts - 1)
        record.fixes = max(0, round - 2)

    def activity_seen(self, seen: ActivityProgress, now: datetime) -> bool:
        """What the progress reader saw of one of the plan's pending activities, for the plans
        that poll it (started before they stopped): its agent's latest summary and, for the
        task's current run, its attempt and last failure. A read is a moment late (the plan went
        on while the server was asked): what it says of a run or a review that has ended since
        is not recorded. Returns whether the record changed."""
        key = parse_activity_id(seen.activity_id)
        if key is None or key.task not in self._records:
            return False
        record = self._records[key.task]
        if not current_activity(record, key):
            return False
        if key.kind != "run":
            return self._progress_seen(record, seen.progress, now)
        retried = self.retries_seen(key.task, seen.attempt, seen.last_failure, now)
        return self._progress_seen(record, seen.progress, now) or retried

    def retries_seen(
        self, task_id: str, attempt: int, last_failure: str | None, now: datetime
    ) -> bool:
        """The current run is at `attempt` (the progress reader saw it, or its outcome said
        so): the attempts before it failed, each `failed -> running` in the record. Returns
        whether the record changed."""
        run = self.runs.get(task_id)
        if run is None or attempt <= run.attempt:
            return False
        for next_attempt in range(run.attempt + 1, attempt + 1):
            reason = last_failure if next_attempt == attempt else None
            self._transition(
                task_id, TaskState.FAILED, now, attempt=next_attempt - 1, reason=reason
            )
            self._transition(task_id, TaskState.RUNNING, now, attempt=next_attempt)
            self._records[task_id].attempts += 1
        run.attempt = attempt
        return True

    def _progress_seen(self, record: TaskRecord, progress: str | None, now: datetime) -> bool:
        if progress is None or progress == record.progress:
            return False
        record.progress, record.progress_at = progress, now
        return True

    def run_succeeded(
        self,
        task_id: str,
        now: datetime,
        *,
        data: dict[str, Any],
        reference: ResultReference | None = None,
        attempt: int | None = None,
    ) -> None:
        """The run's result: its data, or only its reference when it was stored by reference.
        The task stays running until its gates pass (`task_succeeded`)."""
        if attempt is not None:
            self.retries_seen(task_id, attempt, None, now)
        record = self._records[task_id]
        record.result, record.result_ref = (None, reference) if reference else (data, None)

    def task_reviewing(self, task_id: str, now: datetime) -> None:
        self._transition(task_id, TaskState.REVIEWING, now)

    def task_succeeded(self, task_id: str, now: datetime) -> None:
        """The task is done: its dependents whose dependencies have all succeeded may start."""
        self._end(task_id, TaskState.SUCCEEDED, now)
        for dependent in self._dependents[task_id]:
            if dependent in self._unmet:
                self._unmet[dependent] -= 1
                if self._unmet[dependent] == 0:
                    self._startable.append(dependent)

    def run_failed(self, task_id: str, now: datetime, error: TaskError, attempt: int) -> list[str]:
        """The run failed for good at `attempt`: `failed -> error`. Returns the tasks skipped."""
        self.retries_seen(task_id, attempt, None, now)
        self._transition(task_id, TaskState.FAILED, now, attempt=attempt, reason=error.message)
        return self.task_error(task_id, now, error)

    def task_error(self, task_id: str, now: datetime, error: TaskError) -> list[str]:
        """The task failed for good (retries spent, review budget spent, approval rejected):
        its transitive dependents are skipped, naming it; independent branches go on. With
        `fail_fast` the plan stops. Returns the tasks skipped."""
        self._records[task_id].error = error
        self._end(task_id, TaskState.ERROR, now, reason=f"{error.type}: {error.message}")
        if self.spec.fail_fast and self.stopping is None:
            self.stopping = f"fail_fast: task {task_id} ended error"
        return self._skip_dependents(task_id, now)

    def task_cancelled(self, task_id: str, now: datetime, reason: str) -> None:
        if self._records[task_id].state not in ENDED_TASK_STATES:
            self._end(task_id, TaskState.CANCELLED, now, reason=reason)

    def stop(self, reason: str) -> None:
        """Nothing new starts (a cancel); what runs is cancelled by the workflow."""
        self.stopping = self.stopping or reason

    def cancel_waiting(self, now: datetime) -> None:
        """Once the plan stops and its running tasks are cancelled: every task that has not
        ended (waiting for dependencies, a slot, or a person) is cancelled."""
        for record in self.state.tasks:
            self.task_cancelled(record.id, now, self.stopping or "plan stopped")
        self.waiting.clear()

    def _skip_dependents(self, failed: str, now: datetime) -> list[str]:
        skipped: list[str] = []
        frontier = list(self._dependents[failed])
        while frontier:
            task_id = frontier.pop(0)
            record = self._records[task_id]
            if record.state != TaskState.PENDING:
                continue
            record.skipped_because = failed
            reason = f"depends on {failed}, which ended {self._records[failed].state.value}"
            self._end(task_id, TaskState.SKIPPED, now, reason=reason)
            self._unmet.pop(task_id, None)
            skipped.append(task_id)
            frontier += self._dependents[task_id]
        return skipped

    def _end(
        self, task_id: str, state: TaskState, now: datetime, reason: str | None = None
    ) -> None:
        record = self._records[task_id]
        record.ended_at = now
        record.progress = None
        self._transition(task_id, state, now, reason=reason)

    def _transition(
        self,
        task_id: str,
        state: TaskState,
        now: datetime,
        *,
        attempt: int | None = None,
        reason: str | None = None,
    ) -> None:
        record = self._records[task_id]
        self._counts[record.state] -= 1
        self._counts[state] += 1
        record.state = state
        if state in WATCHED_STATES:
            self._watched[task_id] = None
        else:
            self._watched.pop(task_id, None)
        record.transitions.append(Transition(state=state, at=now, attempt=attempt, reason=reason))

    # --- The agent request ----------------------------------------------------------------

    def agent_request(
        self, task: PlanTask, round: int, workflow_id: str, extra: dict[str, Any] | None = None
    ) -> AgentRequest:
        """What `run_agent` gets for a task's run: the task's input as the event's payload,
        the results of its dependencies keyed by id (a reference where one was stored by
        reference), and what a round adds (`extra`: a fix round's review notes)."""
        agent = self._records[task.id].agent
        inputs = {**self.dependency_results(task), **(extra or {})}
        key = f"{workflow_id}/{task.id}/{round}"
        request = self._request(task, agent, f"{task.id}Requested", workflow_id, key, inputs)
        request.result_limit = self.spec.result_limit
        return request

    def reviewer_request(
        self,
        task: PlanTask,
        reviewer: str,
        activity_id: str,
        workflow_id: str,
        inputs: dict[str, Any],
    ) -> AgentRequest:
        """What a reviewer or verifier gets: the task's input (what was asked of it) as the
        event's payload, and its result in `inputs` (see `coord.models.plan.gates`)."""
        key = f"{workflow_id}/{activity_id}"
        return self._request(task, reviewer, f"{task.id}ReviewRequested", workflow_id, key, inputs)

    def _request(
        self,
        task: PlanTask,
        agent: str,
        event_type: str,
        workflow_id: str,
        idempotency_key: str,
        inputs: dict[str, Any],
    ) -> AgentRequest:
        event = EventEnvelope.new(
            event_type,
            workflow_id,
            payload=task.input,
            correlation_id=self.spec.correlation_id,
            priority=task.priority,
        )
        return AgentRequest(
            agent=agent,
            event=event,
            retry_on=task.retry.retry_on,
            config=self.spec.agents.get(agent),
            idempotency_key=idempotency_key,
            inputs=inputs,
        )

    def dependency_results(self, task: PlanTask) -> dict[str, Any]:
        return {dependency: self.result_input(dependency) for dependency in task.depends_on}

    def result_input(self, task_id: str) -> dict[str, Any]:
        """A task's result as an agent's input: its data, or its reference where it was stored
        by reference (`run_agent` resolves it to the data)."""
        record = self._records[task_id]
        if record.result_ref is not None:
            return record.result_ref.as_input()
        return record.result or {}

    # --- The plan's outcome and views -----------------------------------------------------

    def running(self) -> bool:
        """Some task is running or being reviewed (what the progress reader watches)."""
        counts = self._counts
        return any(counts[state] for state in ACTIVE_STATES)

    def finished(self) -> bool:
        """Every task has ended."""
        counts = self._counts
        return sum(counts[state] for state in ENDED_TASK_STATES) == len(self.state.tasks)

    def finish(self, now: datetime, *, cancelled: bool = False) -> PlanState:
        """The plan's status and summary line, once every task has ended."""
        succeeded = self._counts[TaskState.SUCCEEDED]
        if cancelled:
            status = PlanStatus.CANCELLED
        elif succeeded == len(self.state.tasks):
            status = PlanStatus.COMPLETED
        elif succeeded == 0 or self.stopping is not None:
            status = PlanStatus.FAILED
        else:
            status = PlanStatus.PARTIAL
        self.state.status = status
        self.state.ended_at = now
        self.state.summary = self.summary_line()
        return self.state

    def summary_line(self) -> str:
        """`4 of 6 succeeded, 1 error, 1 skipped` (and why it stopped early, if it did)."""
        line = counts_line(self.counts(), len(self.state.tasks))
        return f"{line} ({self.stopping})" if self.stopping else line

    def counts(self) -> dict[TaskState, int]:
        counts = self._counts
        return {state: counts[state] for state in TaskState if counts[state]}

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
            for record in self._active_records()
        ]
        return PlanProgress(
            plan_id=self.state.plan_id,
            status=self.state.status,
            counts=self.counts(),
            running=running,
            waiting_for=self.waiting_for(),
        )

    def _watched_records(self) -> list[TaskRecord]:
        """The watched tasks' records, in declaration order."""
        return [self._records[t] for t in sorted(self._watched, key=self._index.__getitem__)]

    def _active_records(self) -> list[TaskRecord]:
        """The records of the tasks running or under review, in declaration order."""
        return [record for record in self._watched_records() if record.state in ACTIVE_STATES]

    def _assigned_records(self) -> list[TaskRecord]:
        """The records of the tasks whose agent was picked by capability, in declaration
        order."""
        return [self._records[t] for t in sorted(self._assigned, key=self._index.__getitem__)]

    def waiting_for(self) -> list[str]:
        """What the plan waits for besides running agents: people, and free worker slots."""
        approvals = [
            self._approval_awaited(record)
            for record in self._watched_records()
            if record.state == TaskState.AWAITING_APPROVAL
        ]
        if self.waiting:
            cap = self.spec.max_workers
            approvals.append(f"a worker slot ({len(self.waiting)} waiting, max_workers {cap})")
        return approvals

    def _approval_awaited(self, record: TaskRecord) -> str:
        gate = self.task(record.id).approval
        since = record.transitions[-1].at
        return waiting_for(record.id, gate, since) if gate else f"approval of {record.id}"

    def details(self, now: datetime) -> str:
        """The plan as the Temporal UI shows it in 'current details' (markdown): what the
        `progress` query says, rendered from the record directly (the workflow renders it at
        every step, so it builds no models and walks only the tasks it lists)."""
        counts = ", ".join(f"{n} {state.value}" for state, n in self.counts().items())
        lines = [f"**Status:** {self.state.status.value} ({counts})"]
        running = self._active_records()
        for record in running[:DETAILS_RUNNING]:
            doing = f": {record.progress}" if record.progress else ""
            elapsed = _elapsed(record, now)
            lines.append(f"- **{record.id}** {record.state.value} {elapsed:.0f}s{doing}")
        if len(running) > DETAILS_RUNNING:
            lines.append(f"- and {len(running) - DETAILS_RUNNING} more")
        assigned = self._assigned_records()
        picked = [f"{r.id}: {r.assignment.describe()}" for r in assigned if r.assignment]
        if picked:
            lines.append(f"**Picked by capability:** {'; '.join(picked[-DETAILS_RUNNING:])}")
        waiting_for = self.waiting_for()
        if waiting_for:
            lines.append(f"**Waiting for:** {'; '.join(waiting_for)}")
        if self.state.summary:
            lines.append(f"**Summary:** {self.state.summary}")
        return "\n\n".join(lines)

    def memo_record(self) -> PlanState:
        """The record kept in the memo: bounded, so without task results, transitions and
        review rounds (the result, or the failure's details, has them all)."""
        tasks = [
            record.model_copy(update={"result": None, "transitions": [], "reviews": []})
            for record in self.state.tasks
        ]
        return self.state.model_copy(update={"tasks": tasks})
