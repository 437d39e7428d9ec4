"""A plan apart from Temporal: its record (`PlanState`) and the parts that keep it, each with one
job: the task graph (`PlanGraph`: which tasks may start, their states around their runs, failure
isolation), the task runs (`TaskRuns`: the run lifecycle), the worker slots (`SlotQueue`), the
approval decisions being checked (`Decisions`), the agents' requests (`TaskRequests`) and the
readers' views (`PlanView`). Pure and serialisable like `ChainModel`, so it is tested without a
server; the workflow (`coord.workflows.plan.graph`) keeps only activities, timers, cancellation
and queries. Times are given by the caller (`workflow.now()`), never read here.

What needs more than one part is here: a slot is granted only once the tasks that became
startable were launched (their requests are ranked with the others), a stopped plan cancels
what waits, and the outcome."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr

from coord.models.plan.announcer import PlanAnnouncer, Sink
from coord.models.plan.gates import Decisions
from coord.models.plan.graph import PlanGraph
from coord.models.plan.records import TaskBook
from coord.models.plan.report import final_status, summary_of
from coord.models.plan.requests import TaskRequests
from coord.models.plan.runs import TaskRuns
from coord.models.plan.slots import SlotQueue
from coord.models.plan.spec import (
    Planning,
    PlanSpec,
    PlanState,
    PlanStatus,
    PlanTask,
    ReusedTask,
    TaskRecord,
    TaskState,
    Transition,
)
from coord.models.plan.view import PlanView


class PlanModel(BaseModel):
    """A plan's spec, record and parts. Made by `begin`; the workflow asks its parts what may
    start and tells them what happened."""

    spec: PlanSpec
    state: PlanState
    graph: PlanGraph = Field(default_factory=PlanGraph)
    runs: TaskRuns = Field(default_factory=TaskRuns)
    slots: SlotQueue

    _book: TaskBook = PrivateAttr()
    _requests: TaskRequests = PrivateAttr()
    _view: PlanView = PrivateAttr()
    _decisions: Decisions = PrivateAttr(default_factory=Decisions)

    @classmethod
    def begin(cls, spec: PlanSpec, now: datetime) -> "PlanModel":
        """A new plan: every task pending, the roots startable (a rewound copy's reused tasks
        succeeded already, so what depends on them alone is startable too)."""
        reused = {task.id: task for task in spec.rewind.tasks} if spec.rewind else {}
        records = [
            _reused(spec, task, reused[task.id], now)
            if task.id in reused
            else _pending(spec, task, now)
            for task in spec.tasks
        ]
        state = PlanState(
            plan_id=spec.plan_id,
            name=spec.name,
            correlation_id=spec.correlation_id,
            max_workers=spec.max_workers,
            started_at=now,
            tasks=records,
            rewind_of=spec.rewind.of.search_value() if spec.rewind else None,
        )
        return cls(spec=spec, state=state, slots=SlotQueue(max_workers=spec.max_workers))

    def model_post_init(self, context: Any, /) -> None:
        """The parts joined up over the one record (so a model read back from its JSON
        schedules the same)."""
        self._join()

    def _join(self) -> None:
        index = {task.id: i for i, task in enumerate(self.spec.tasks)}
        self._book = book = TaskBook(self.state, index)
        self.graph.attach(self.spec, book, index)
        self.runs.attach(book, self.graph)
        self._requests = TaskRequests(self.spec, book, self.state.messages)
        self._view = PlanView(self.state, book, self.graph, self.slots)

    @property
    def book(self) -> TaskBook:
        return self._book

    @property
    def requests(self) -> TaskRequests:
        return self._requests

    @property
    def view(self) -> PlanView:
        return self._view

    @property
    def decisions(self) -> Decisions:
        return self._decisions

    @property
    def stopping(self) -> str | None:
        """Why the plan stops early, if it does (`PlanGraph.stopping`)."""
        return self.graph.stopping

    def record(self, task_id: str) -> TaskRecord:
        return self._book.record(task_id)

    def task(self, task_id: str) -> PlanTask:
        return self.graph.task(task_id)

    def announce_to(self, sink: Sink) -> None:
        """From now on the plan announces its lifecycle to `sink`, starting with
        `PlanStarted`."""
        self._book.announcer = PlanAnnouncer(self.spec, self.state, sink)

    def latest_event(self, task_id: str) -> str | None:
        """The id of the task's latest announced event (what a vote it starts is caused by);
        None when the plan does not announce."""
        announcer = self._book.announcer
        return announcer.latest(task_id) if announcer is not None else None

    def add_tasks(self, tasks: list[PlanTask], now: datetime) -> None:
        """A running plan grows (`coord.models.plan.planner.extended_tasks` validated them):
        the tasks join the spec and the record pending, and the parts are joined up again
        over them, as for a model read back from its JSON (a new task whose dependencies have
        all succeeded is startable at once)."""
        self.spec.tasks.extend(tasks)
        self.state.tasks.extend(_pending(self.spec, task, now) for task in tasks)
        self._join()

    # --- Worker slots ---------------------------------------------------------------------

    def request_slot(self, key: str, task_id: str) -> None:
        """An activity (by its id) of the task asks for a slot, ranked by the task's standing
        (`PlanGraph.standing`)."""
        self.slots.request(key, task_id, *self.graph.standing(task_id))

    def holds_slot(self, key: str) -> bool:
        """Whether the activity has its slot, free slots granted first (how runs recorded
        before the workflow granted slots itself wait: one wait condition per request).
        Granting waits for this question (a workflow's wait condition, asked once the
        workflow step has run everything it could) and for the tasks that became startable to
        be launched, so that every request of the step is ranked together: a critical task
        gets the slot before a low one that merely asked earlier in the same step. Asked of
        every waiting request at every step, so it answers from public fields first
        (pydantic's private attributes are slow to read)."""
        slots = self.slots
        if key in slots.holders:
            return True
        if slots.full() or self.graph.has_startable():
            return False
        slots.grant()
        return key in slots.holders

    def grantable(self) -> bool:
        """Whether `SlotQueue.grant` would give a slot now: a request waits, a slot is free,
        and no task waits to be launched (its request is ranked with the others once it has
        asked)."""
        return self.slots.grantable() and not self.graph.has_startable()

    # --- The plan's end -------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Nothing new starts (a cancel); what runs is cancelled by the workflow."""
        self.graph.stop(reason)

    def cancel_waiting(self, now: datetime) -> None:
        """Once the plan stops and its running tasks are cancelled: every task that has not
        ended (waiting for dependencies, a slot, or a person) is cancelled."""
        self.graph.cancel_unended(now)
        self.slots.waiting.clear()

    def finished(self) -> bool:
        """Every task has ended."""
        return self._book.finished()

    def planning_refused(self, planning: Planning, now: datetime) -> PlanState:
        """The planner gave no graph the plan can run: the plan ends failed, saying why, and
        no task ran."""
        self.state.planning = planning
        self.state.status = PlanStatus.FAILED
        self.state.ended_at = now
        self.state.summary = f"planning failed: {planning.error}"
        return self.state

    def finish(self, now: datetime, *, cancelled: bool = False) -> PlanState:
        """The plan's status and summary line, once every task has ended; it ended no earlier
        than the latest time its record has seen (`TaskBook.latest`)."""
        counts, total = self._book.counts(), len(self.state.tasks)
        stopping = self.graph.stopping
        status = final_status(counts, total, stopped=stopping is not None, cancelled=cancelled)
        self.state.status = status
        self.state.ended_at = self._book.latest(now)
        self.state.summary = summary_of(counts, total, stopping)
        if self._book.announcer is not None:
            self._book.announcer.plan_ended(self.state)
        return self.state


def _reused(spec: PlanSpec, task: PlanTask, reused: ReusedTask, now: datetime) -> TaskRecord:
    """A task a rewound copy takes from its original as it succeeded: never run here."""
    record = _pending(spec, task, now)
    record.state, record.result, record.result_ref = (
        TaskState.SUCCEEDED,
        reused.result,
        reused.result_ref,
    )
    record.transitions.append(Transition(state=TaskState.SUCCEEDED, at=now))
    return record


def _pending(spec: PlanSpec, task: PlanTask, now: datetime) -> TaskRecord:
    return TaskRecord(
        id=task.id,
        agent=spec.agent_of(task),
        summary=task.summary,
        transitions=[Transition(state=TaskState.PENDING, at=now)],
    )
