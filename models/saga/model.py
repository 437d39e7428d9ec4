"""A saga's state and rules, apart from Temporal: which step runs next and with what retries, the
compensation stack and the order it is unwound in, the pivot after which nothing is undone, what
a cancel does, the saga's events (its timeline rows) and its final record (`SagaState`).

Pure, so it is tested without a server (tests/test_saga_model.py); the workflow
(`coord.workflows.saga`) keeps only the Temporal part: agent runs, the cancel as Temporal delivers
it, dead-lettering a failed compensation, sending the events to the chain, search attributes and
the memo. Every decision is asked of this model; nothing here sends or waits.

The rules:
- a step's compensation is pushed onto the stack *before* the step runs, since after a timeout
  its outcome is unknown (compensations must therefore tolerate "never happened"); so a failed
  step's own compensation is unwound too, and a step without one adds nothing;
- on a step's final failure the stack is unwound top first (or all at once with
  `parallel_compensation`); a failed compensation stops the unwinding unless
  `continue_on_compensation_error`, and is left on the stack;
- once the pivot step has succeeded there is no way back: the remaining steps are retried until
  they succeed, and a failure fails the saga without compensating anything;
- a cancel is recorded once, when it lands, with what it did (`SagaCancel.effect`): before the
  pivot it unwinds the stack (after the running step's result, which is kept), after it the saga
  runs on."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentRequest
from coord.models.mesh.assignment import Assignment
from coord.models.mesh.retry import RetryConfig
from coord.models.mesh.runs import RunDetour, kept
from coord.models.saga.spec import (
    CancelEffect,
    CompensationOutcome,
    CompletedStep,
    RecordedStep,
    SagaCancel,
    SagaSpec,
    SagaState,
    SagaStatus,
    SagaStep,
    StackEntry,
)
from coord.models.wire.contract import FailureType

CANCELLED_STEP = {
    "failure": {"type": FailureType.CANCELLED.value, "message": "cancelled while running"}
}
"""The outcome of a step cancelled before it ended: unknown, so its compensation runs."""
CANCEL_REASON = "saga cancelled"
Inputs = dict[str, Any]
"""What a run is handed besides its event (`AgentRequest.inputs`)."""
At = datetime | None
"""When a run ended, as its worker reported it (`attempts.ran_until`); None: now (the workflow's
time; a run ahead of its turn, or in the workflow task it began in, ended after it)."""


@dataclass(frozen=True)
class SagaEnd:
    """How a saga that did not complete ends: the typed failure its run raises (carrying the
    final record)."""

    failure_type: str
    message: str


class SagaModel:
    """One saga run's bookkeeping. Made with the saga id alone (the record a query sees before
    the spec is read), then `begin` with the spec, or `refuse` when the spec is invalid."""

    def __init__(self, saga_id: str) -> None:
        self.state = SagaState(saga_id=saga_id)
        self._spec: SagaSpec | None = None
        self._run_key = ""
        self._outcomes: dict[str, dict[str, Any]] = {}
        """Each ended step's outcome by name, `{"result": data}` or `{"failure": {...}}`: what
        later steps and compensations receive as inputs."""
        self.made_ahead: dict[str, tuple[EventEnvelope, str]] = {}  # saga.ahead: by run key
        self._ran_by: dict[str, str] = {}
        """Steps whose run fell back to another agent, by name: who ran it."""
        self._step_failure = ""

    def refuse(self, reason: str) -> SagaEnd:
        """The spec does not validate: the saga fails at once, naming the field."""
        self.state.failure_reason, self.state.status = reason, SagaStatus.FAILED
        return SagaEnd(FailureType.INVALID_SPEC, reason)

    def begin(self, spec: SagaSpec, *, workflow_id: str, first_run_id: str) -> None:
        """The run's first record, in progress. The first run id makes the idempotency keys, so
        a reused saga id gets new ones, the same on every retry and in a DLQ replay."""
        self._spec = spec
        self._run_key = f"{workflow_id}/{first_run_id}"
        self.state = SagaState(
            saga_id=spec.saga_id,
            correlation_id=spec.correlation_id,
            status=SagaStatus.IN_PROGRESS,
            rewind_of=spec.rewind.of.search_value() if spec.rewind else None,
        )
        for index, recorded in enumerate(spec.rewind.steps if spec.rewind else [], start=1):
            self._reuse(index, spec.steps[index - 1], recorded)

    def _reuse(self, index: int, step: SagaStep, recorded: RecordedStep) -> None:
        """A rewound copy's step taken from its original as it stood: its compensation on the
        stack, its result for later steps, its event in the timeline under its original id."""
        self.step_started(index, step)
        row = recorded.event.model_copy(
            update={"seq": len(self.state.events) + 1, "correlation_id": self.state.correlation_id}
        )
        self.state.events.append(row)
        self._succeeded(index, step, recorded.result, row.event_id)

    @property
    def spec(self) -> SagaSpec:
        assert self._spec is not None, "the saga's spec is read by `begin`"
        return self._spec

    def steps(self) -> Iterator[tuple[int, SagaStep]]:
        """The steps left to run in their order, numbered from 1 as the record numbers them (a
        rewound copy's first steps are its original's, taken at `begin`)."""
        reused = len(self.spec.rewind.steps) if self.spec.rewind else 0
        return enumerate(self.spec.steps[reused:], start=reused + 1)

    @property
    def forward(self) -> bool:
        """The pivot has passed: nothing is compensated any more."""
        return self.state.recovery == "forward"

    def step_started(self, index: int, step: SagaStep) -> RetryConfig:
        """The step is about to run: its compensation goes on the stack first (before the pivot
        has passed). Returns its retries: its own, or until it succeeds after the pivot."""
        self.state.current_step = index
        if step.compensation and not self.forward:
            self.state.compensation_stack.append(
                StackEntry(step=index, compensate=step.compensation)
            )
        return step.retry.until_success() if self.forward else step.retry

    def step_agent(self, step: SagaStep, assignment: Assignment | None) -> str:
        """The step's agent: the one it names, or the one picked for its capabilities (kept)."""
        if assignment is None:
            return step.agent
        self.state.assignments[step.name] = assignment
        return assignment.agent

    def step_succeeded(self, index: int, step: SagaStep, data: Inputs, at: At) -> EventEnvelope:
        """Records the result, announces `on_success` at `at` (made ahead: under its reserved id).
        A pivot turns recovery forward; a cancel that came while it ran then lets it run on."""
        _, event_id = self.made_ahead.pop(self.step_key(step), (None, None))
        source = f"/{self.agent_of(step)}"
        completed = announced(self.state, step.on_success, source, data, event_id, at)
        self._succeeded(index, step, data, completed.event.id)
        return completed

    def _succeeded(self, index: int, step: SagaStep, data: dict[str, Any], event_id: str) -> None:
        self._outcomes[step.name] = {"result": data}
        self.state.completed_steps.append(
            CompletedStep(step=index, name=step.name, event=step.on_success, event_id=event_id)
        )
        if step.pivot:
            if self.state.cancel is not None:
                self.state.cancel.effect = "forward"
            self.state.recovery = "forward"

    def step_failed(
        self, index: int, step: SagaStep, failure_type: str, message: str, at: At
    ) -> EventEnvelope:
        """Records how the step failed (or why it was not run); announces `on_failure` at `at`."""
        failure = {"type": failure_type, "message": message}
        self._outcomes[step.name] = {"failure": failure}
        self._step_failure = f"step {index} {step.name} failed: {message}"
        self.state.current_step, self.state.failed_event = index, step.on_failure
        error, source = {"error": failure}, f"/{self.agent_of(step)}"
        return announced(self.state, step.on_failure, source, error, at=at)

    def step_cancelled(self, step: SagaStep) -> None:
        """The step was cancelled before it ended: its outcome is unknown."""
        self._outcomes[step.name] = CANCELLED_STEP

    def step_request(self, step: SagaStep, agent: str, retry: RetryConfig) -> AgentRequest:
        """What the step's run is handed: the command event and the results so far."""
        results = {
            name: done["result"] for name, done in self._outcomes.items() if "result" in done
        }
        return self._request(agent, retry, self.step_key(step), {"steps": results})

    def step_key(self, step: SagaStep) -> str:
        return f"{self._run_key}/{step.name}"

    def undo_request(self, entry: StackEntry) -> tuple[SagaStep, AgentRequest]:
        """The step undone, and the run undoing it: handed that step's outcome (its result, or
        how it failed when its outcome is unknown)."""
        step = self.spec.steps[entry.step - 1]
        inputs = {"undoes": {"step": step.name, **self._outcomes[step.name]}}
        key = f"{self._run_key}/{step.name}/undo"
        return step, self._request(entry.compensate, step.compensation_retry, key, inputs)

    def _request(self, agent: str, retry: RetryConfig, key: str, inputs: Inputs) -> AgentRequest:
        made = self.made_ahead.get(key)
        return AgentRequest(
            agent=agent,
            event=self.command(agent) if made is None else made[0],
            retry_on=retry.retry_on,
            config=self.spec.agents.get(agent),
            idempotency_key=key,
            inputs=inputs,
            rewind_of=self.state.rewind_of,
        )

    def agent_of(self, step: SagaStep) -> str:
        """Who ran the step: its fallback, the agent picked for it, its agent, or its name."""
        if step.name in self._ran_by:
            return self._ran_by[step.name]
        assigned = self.state.assignments.get(step.name)
        return assigned.agent if assigned else step.agent or step.name

    def detoured(self, run: str, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run that waited for its agent or went elsewhere: kept in the record by run."""
        self.state.detours = kept(self.state.detours, detour.model_copy(update={"run": run}))
        if assignment is not None:
            self.state.assignments[run] = assignment
        elif detour.to_agent is not None:
            self._ran_by[run] = detour.to_agent

    def cancel_effect(self) -> CancelEffect:
        """What a cancel landing while a step runs does: unwind, or after the pivot nothing."""
        return "forward" if self.forward else "unwind"

    def cancel_requested(self, effect: CancelEffect, now: datetime) -> bool:
        """The first cancel is recorded when it lands, with what it does; True if this one."""
        if self.state.cancel is not None:
            return False
        self.state.cancel = SagaCancel(
            requested_at=now, during_step=self.state.current_step, effect=effect
        )
        return True

    @property
    def unwinding(self) -> bool:
        """A cancel has asked to unwind the stack: no further step runs."""
        return self.state.cancel is not None and self.state.cancel.effect == "unwind"

    def after_failure(self) -> SagaEnd | None:
        """A step failed for good. After the pivot the saga fails as it stands; before it, None:
        the stack is to be unwound (`compensating`)."""
        if not self.forward:
            return None
        reason = f"{self._step_failure}; after the pivot, so nothing is compensated"
        self.state.failure_reason, self.state.status = reason, SagaStatus.FAILED
        return SagaEnd(FailureType.SAGA_FAILED, reason)

    def compensating(self, *, cancelled: bool) -> list[StackEntry]:
        """The unwinding starts (a failed step, a cancel): what to run, top of stack first."""
        self.state.failure_reason = CANCEL_REASON if cancelled else self._step_failure
        self.state.status = SagaStatus.COMPENSATING
        return list(reversed(self.state.compensation_stack))

    def undone(self, entry: StackEntry, data: Inputs, at: At) -> EventEnvelope:
        """The compensation ran: off the stack, recorded, its `on_compensated` announced at `at`."""
        step = self.spec.steps[entry.step - 1]
        self.state.compensation_stack.remove(entry)
        self.state.compensations.append(
            CompensationOutcome(step=entry.step, compensate=entry.compensate, status="compensated")
        )
        return announced(self.state, step.on_compensated, f"/{entry.compensate}", data, at=at)

    def undo_failed(self, entry: StackEntry, message: str) -> str:
        """A compensation failed for good: recorded, left on the stack; its dead letter's text."""
        failed = CompensationOutcome(
            step=entry.step, compensate=entry.compensate, status="failed", error=message
        )
        self.state.compensations.append(failed)
        return f"compensation {entry.compensate} of step {entry.step} failed: {message}"

    def goes_on(self, undone: bool) -> bool:
        """Whether the unwinding goes on after a compensation (in order, one at a time)."""
        return undone or self.spec.continue_on_compensation_error

    def compensation_ended(self) -> SagaEnd | None:
        """The unwinding is over: compensated, or an end naming each failed compensation."""
        failed = [c for c in self.state.compensations if c.status == "failed"]
        if not failed:
            self.state.status = SagaStatus.COMPENSATED
            return None
        errors = "; ".join(f"{c.compensate}: {c.error}" for c in failed)
        self.state.failure_reason = f"{self.state.failure_reason}; compensation failed: {errors}"
        self.state.status = SagaStatus.COMPENSATION_FAILED
        return SagaEnd(FailureType.COMPENSATION_FAILED, self.state.failure_reason)

    def undo_failed_notice(
        self, entry: StackEntry, message: str, *, recorded: bool
    ) -> EventEnvelope:
        """`CompensationFailed`, for the correlation's chain (in the timeline when `recorded`)."""
        notice = {"step": entry.step, "error": message}
        if recorded:
            return announced(
                self.state, "CompensationFailed", f"/saga/{self.state.saga_id}", notice
            )
        return saga_event(self.state, "CompensationFailed", notice)

    def compensated_end(self) -> SagaEnd:
        """A failed step's saga, unwound: the failure names the step and what was undone."""
        undone = [c.compensate for c in self.state.compensations if c.status == "compensated"]
        message = f"{self._step_failure}; compensated: {', '.join(undone) or 'nothing to undo'}"
        return SagaEnd(FailureType.SAGA_COMPENSATED, message)

    def completed(self) -> None:
        """Every step succeeded: nothing is left to undo."""
        self.state.compensation_stack.clear()
        self.state.status = SagaStatus.COMPLETED

    def command(self, agent: str) -> EventEnvelope:
        """The command event a step's or a compensation's agent run is handed: the saga's input."""
        return saga_event(self.state, f"{agent}Command", self.spec.input)

    def details(self) -> str:
        return render_details(self.state, self._spec)


def announced(
    state: SagaState,
    event_type: str,
    source: str,
    payload: dict[str, Any],
    event_id: str | None = None,
    at: datetime | None = None,
) -> EventEnvelope:
    """One of the saga's events, recorded in its timeline, for the correlation's chain, at `at`
    (else now)."""
    envelope = saga_event(state, event_type, payload, source, event_id=event_id, at=at)
    state.events.append(
        TimelineEntry.recording(
            envelope, seq=len(state.events) + 1, correlation_id=state.correlation_id
        )
    )
    return envelope


def saga_event(
    state: SagaState,
    event_type: str,
    payload: dict[str, Any],
    source: str | None = None,
    *,
    event_id: str | None = None,
    caused_by: str | None = None,
    at: datetime | None = None,
) -> EventEnvelope:
    """An event of the saga, caused by its latest recorded event, or by `caused_by` (an event
    reserved ahead, not recorded yet)."""
    previous = state.events[-1].event_id if state.events else None
    return EventEnvelope.new(
        event_type,
        source or f"/saga/{state.saga_id}",
        payload=payload,
        correlation_id=state.correlation_id,
        causation_id=caused_by or previous,
        event_id=event_id,
        timestamp=at,
    )


def render_details(state: SagaState, spec: SagaSpec | None) -> str:
    """The saga as the Temporal UI shows it in 'current details' (markdown)."""
    lines = [f"**Status:** {state.status.value}"]
    if spec is not None and state.current_step is not None:
        step = spec.steps[state.current_step - 1]
        lines.append(f"**Step {state.current_step}/{len(spec.steps)}:** {step.name}")
    done = ", ".join(f"{c.step}:{c.event}" for c in state.completed_steps) or "none"
    stack = ", ".join(e.compensate for e in reversed(state.compensation_stack)) or "empty"
    lines += [f"**Completed:** {done}", f"**Compensation stack (top first):** {stack}"]
    if state.assignments:
        picked = "; ".join(f"{step}: {a.describe()}" for step, a in state.assignments.items())
        lines.append(f"**Picked by capability:** {picked}")
    if state.detours:
        lines.append(f"**Detours:** {'; '.join(d.describe() for d in state.detours[-3:])}")
    if state.compensations:
        undone = ", ".join(f"{c.compensate} ({c.status})" for c in state.compensations)
        lines.append(f"**Compensations:** {undone}")
    if state.cancel:
        lines.append(
            f"**Cancel requested:** {state.cancel.requested_at:%H:%M:%S} ({state.cancel.effect})"
        )
    if state.failure_reason:
        lines.append(f"**Reason:** {state.failure_reason}")
    return "\n\n".join(lines)
