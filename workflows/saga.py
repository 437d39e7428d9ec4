"""The `Saga` workflow: ordered agent steps with a compensation stack.

A step's compensation is pushed *before* the step runs, because after a timeout its outcome is
unknown; compensations must therefore tolerate "never happened". On a step's final failure, or on
cancellation, the stack is unwound (LIFO, or all at once), shielded from cancellation. After a
pivot step succeeds there is no way back: the remaining steps are retried forward instead.
"""

import asyncio
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from coord.models.events.envelope import EventEnvelope
    from coord.models.events.timeline import TimelineEntry
    from coord.models.mesh.agents import AgentRequest, AgentResult
    from coord.models.mesh.assignment import Assignment
    from coord.models.mesh.config import AgentConfig
    from coord.models.mesh.runs import RunDetour, kept
    from coord.models.mesh.usage import TokenMeter
    from coord.models.saga.spec import (
        CancelEffect,
        CompensationOutcome,
        CompletedStep,
        SagaCancel,
        SagaSpec,
        SagaState,
        SagaStatus,
        SagaStep,
        StackEntry,
    )
    from coord.models.wire.contract import (
        EVENT_SIGNAL,
        SAGA_RECORD_MEMO,
        SAGA_WORKFLOW,
        STATE_QUERY,
        FailureType,
        failure,
        failure_message,
        failure_type_of,
        saga_id_of,
    )
    from coord.models.wire.specs import SpecError
    from coord.models.wire.versions import (
        CHAIN_SEND_ONCE_PATCH,
        DEAD_LETTER_PATCH,
        SAGA_EVENTS_PATCH,
    )
    from coord.workflows._runtime.agent_runs import (
        RunSettings,
        declared_settings,
        outcomes_landed,
        start_agent_run,
    )
    from coord.workflows._runtime.common import (
        NO_INPUT,
        PlainInput,
        assign_agent,
        attempts,
        decode_input,
        park,
        signal_chain,
        uncancellable,
        upsert_search_attributes,
    )

T = TypeVar("T")
WAIT_FOR_CANCEL = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED

CANCELLED_STEP = {
    "failure": {"type": FailureType.CANCELLED.value, "message": "cancelled while running"}
}
"""The outcome of a step cancelled before it ended: unknown, so its compensation runs."""


class StepFailed(Exception):
    def __init__(self, index: int, step: SagaStep, error: ActivityError) -> None:
        super().__init__(f"step {index} {step.name} failed: {failure_message(error)}")
        self.index = index
        self.step = step


@workflow.defn(name=SAGA_WORKFLOW)
class Saga:
    def __init__(self) -> None:
        self._spec: SagaSpec | None = None
        self._state = SagaState(saga_id=saga_id_of(workflow.info().workflow_id))
        self._outcomes: dict[str, dict[str, Any]] = {}
        """Each ended step's outcome by name, `{"result": data}` or `{"failure": {...}}`: what
        later steps and compensations receive as inputs."""
        self._announcing = False
        self._announcements: list[asyncio.Task[None]] = []
        self._ran_by: dict[str, str] = {}
        """Steps whose run fell back to another agent, by name: who ran it."""
        self._chain_reachable = True
        """False once a send found no running chain: later events stay in the record only,
        so a saga without a chain pays one failed signal, not one per event."""

    @workflow.run
    async def run(self, raw_spec: PlainInput = NO_INPUT) -> SagaState:
        """`raw_spec` is raw on purpose: a malformed spec sent as plain JSON (Temporal CLI, UI),
        even one that does not decode, must fail the workflow with a message naming the field,
        not wedge its task."""
        self._announcing = workflow.patched(SAGA_EVENTS_PATCH)
        spec = self._validated(raw_spec)
        self._spec = spec
        self._state = SagaState(saga_id=spec.saga_id, correlation_id=spec.correlation_id)
        self._set_status(SagaStatus.IN_PROGRESS)
        try:
            return await self._outcome(spec)
        finally:
            await uncancellable(asyncio.gather(*self._announcements), self._note_late_cancel)

    async def _outcome(self, spec: SagaSpec) -> SagaState:
        try:
            await self._run_steps(spec)
        except StepFailed as failure:
            return await self._after_step_failure(failure)
        except asyncio.CancelledError:
            await uncancellable(self._compensate("saga cancelled"))
            self._keep_final_record()
            raise
        self._state.compensation_stack.clear()
        self._set_status(SagaStatus.COMPLETED)
        return self._state

    @workflow.query(name=STATE_QUERY)
    def state(self) -> SagaState:
        return self._state

    def _validated(self, raw_spec: PlainInput) -> SagaSpec:
        try:
            return decode_input(SagaSpec, raw_spec, "saga spec")
        except SpecError as error:
            self._state.failure_reason = str(error)
            self._set_status(SagaStatus.FAILED)
            raise self._failure(FailureType.INVALID_SPEC, str(error)) from None

    async def _run_steps(self, spec: SagaSpec) -> None:
        for index, step in enumerate(spec.steps, start=1):
            await self._run_step(index, step)
            if step.pivot:
                self._state.recovery = "forward"
                self._log("pivot passed, later steps are retried forward", step=step.name)

    async def _run_step(self, index: int, step: SagaStep) -> None:
        self._state.current_step = index
        if step.compensation and self._state.recovery == "backward":
            self._state.compensation_stack.append(
                StackEntry(step=index, compensate=step.compensation)
            )
        self._publish_progress()
        retry = step.retry.until_success() if self._state.recovery == "forward" else step.retry
        try:
            running = self._start_agent(
                await self._assigned(step),
                declared_settings(
                    step,
                    step.name,
                    retry=retry,
                    cancellation=WAIT_FOR_CANCEL,
                    inline_agents=self._spec_agents(),
                ),
                step=step.name,
                idempotency_key=self._idempotency_key(step),
                inputs={"steps": self._results()},
            )
            result = await self._await_step(running)
        except asyncio.CancelledError:
            self._outcomes[step.name] = CANCELLED_STEP
            raise
        except ActivityError as error:
            if is_cancelled_exception(error):
                self._outcomes[step.name] = CANCELLED_STEP
                raise asyncio.CancelledError from error
            self._step_failed(step, error)
            if self._cancel_unwinds():
                raise asyncio.CancelledError from error
            raise StepFailed(index, step, error) from error
        self._step_completed(index, step, result)
        if step.pivot and self._state.cancel is not None:
            self._state.cancel.effect = "forward"
        if self._cancel_unwinds():
            raise asyncio.CancelledError

    async def _assigned(self, step: SagaStep) -> str:
        """The step's agent: the one it names, or the one picked for its capabilities (recorded
        in `assignments` with the bids)."""
        assignment = await assign_agent(step.route, step.name)
        if assignment is None:
            return step.agent
        self._state.assignments[step.name] = assignment
        self._publish_progress()
        return assignment.agent

    def _agent_of(self, step: SagaStep) -> str:
        """Who ran the step: its fallback, the agent picked for it, its agent, or its name."""
        if step.name in self._ran_by:
            return self._ran_by[step.name]
        assigned = self._state.assignments.get(step.name)
        return assigned.agent if assigned else step.agent or step.name

    async def _await_step(self, running: "asyncio.Task[AgentResult]") -> AgentResult:
        """The step's result, whatever a cancel does meanwhile. A cancel is recorded when it
        lands. Before the pivot it is passed on to the agent, which may honour it or ignore it
        (no heartbeat, or done inside the heartbeat throttle): a result is kept either way and
        the stack is unwound after it. After the pivot the step simply runs on. A result that
        arrives in the same workflow task as the cancel is never discarded."""
        try:
            await workflow.wait([running])
        except asyncio.CancelledError:
            forward = self._state.recovery == "forward"
            self._note_cancel("forward" if forward else "unwind")
            await outcomes_landed()  # a result resolved in this workflow task lands first
            if not running.done() and not forward:
                running.cancel()
        return await uncancellable(running)

    def _step_completed(self, index: int, step: SagaStep, result: AgentResult) -> None:
        self._outcomes[step.name] = {"result": result.data}
        completed = self._announce(step.on_success, f"/{self._agent_of(step)}", result.data)
        self._state.completed_steps.append(
            CompletedStep(
                step=index, name=step.name, event=step.on_success, event_id=completed.event.id
            )
        )
        self._log("step completed", step=step.name, event=step.on_success)

    def _step_failed(self, step: SagaStep, error: ActivityError) -> None:
        failure = {"type": failure_type_of(error), "message": failure_message(error)}
        self._outcomes[step.name] = {"failure": failure}
        self._state.failed_event = step.on_failure
        self._announce(step.on_failure, f"/{self._agent_of(step)}", {"error": failure})

    def _results(self) -> dict[str, Any]:
        """The results of the steps completed so far, by step name."""
        return {
            name: outcome["result"]
            for name, outcome in self._outcomes.items()
            if "result" in outcome
        }

    def _idempotency_key(self, step: SagaStep, *suffix: str) -> str:
        """Unique to this saga run and step (the first run id, so a reused saga id gets new
        keys), the same on every retry and in a DLQ replay of the same run."""
        info = workflow.info()
        return "/".join([info.workflow_id, info.first_execution_run_id, step.name, *suffix])

    def _note_cancel(self, effect: CancelEffect) -> None:
        """Every cancel is recorded when it lands, whatever it then does."""
        if self._state.cancel is not None:
            return
        self._state.cancel = SagaCancel(
            requested_at=workflow.now(), during_step=self._state.current_step, effect=effect
        )
        self._log("cancel requested", effect=effect)
        self._publish_progress()

    def _note_cancel_while_compensating(self) -> None:
        self._note_cancel("compensating")

    def _note_late_cancel(self) -> None:
        self._note_cancel("ended")

    def _cancel_unwinds(self) -> bool:
        return self._state.cancel is not None and self._state.cancel.effect == "unwind"

    async def _after_step_failure(self, failure: StepFailed) -> SagaState:
        if self._state.recovery == "forward":
            self._state.failure_reason = f"{failure}; after the pivot, so nothing is compensated"
            self._set_status(SagaStatus.FAILED)
            raise self._failure(FailureType.SAGA_FAILED, self._state.failure_reason)
        await uncancellable(self._compensate(str(failure)), self._note_cancel_while_compensating)
        undone = self._compensated_names() or "nothing to undo"
        raise self._failure(FailureType.SAGA_COMPENSATED, f"{failure}; compensated: {undone}")

    async def _compensate(self, reason: str) -> None:
        assert self._spec is not None
        self._state.failure_reason = reason
        self._set_status(SagaStatus.COMPENSATING)
        pending = list(reversed(self._state.compensation_stack))
        if self._spec.parallel_compensation:
            await asyncio.gather(*(self._undo(entry) for entry in pending))
        else:
            for entry in pending:
                undone = await self._undo(entry)
                if not undone and not self._spec.continue_on_compensation_error:
                    break
        failed = [c for c in self._state.compensations if c.status == "failed"]
        if failed:
            errors = "; ".join(f"{c.compensate}: {c.error}" for c in failed)
            self._state.failure_reason = f"{reason}; compensation failed: {errors}"
            self._set_status(SagaStatus.COMPENSATION_FAILED)
            raise self._failure(FailureType.COMPENSATION_FAILED, self._state.failure_reason)
        self._set_status(SagaStatus.COMPENSATED)

    async def _undo(self, entry: StackEntry) -> bool:
        """Run one compensation, handing it what the step it undoes returned (or how it
        failed, when its outcome is unknown)."""
        assert self._spec is not None
        step = self._spec.steps[entry.step - 1]
        idempotency_key = self._idempotency_key(step, "undo")
        inputs = {"undoes": {"step": step.name, **self._outcomes[step.name]}}
        try:
            result = await self._start_agent(
                entry.compensate,
                RunSettings(
                    summary=f"compensate: {entry.compensate}",
                    retry=step.compensation_retry,
                    start_to_close=step.compensation_timeout,
                    schedule_to_start=step.schedule_to_start_timeout,
                    cancellation=WAIT_FOR_CANCEL,
                    inline_agents=self._spec_agents(),
                ),
                step=f"{step.name}/undo",
                idempotency_key=idempotency_key,
                inputs=inputs,
            )
        except ActivityError as error:
            outcome = CompensationOutcome(
                step=entry.step,
                compensate=entry.compensate,
                status="failed",
                error=failure_message(error),
            )
            self._state.compensations.append(outcome)
            self._publish_progress()
            await self._dead_letter(entry, error, idempotency_key, inputs)
            return False
        self._state.compensation_stack.remove(entry)
        self._state.compensations.append(
            CompensationOutcome(step=entry.step, compensate=entry.compensate, status="compensated")
        )
        self._announce(step.on_compensated, f"/{entry.compensate}", result.data)
        self._publish_progress()
        return True

    async def _dead_letter(
        self, entry: StackEntry, error: ActivityError, idempotency_key: str, inputs: dict[str, Any]
    ) -> None:
        """An undo that failed for good is parked for a person, with its idempotency key and
        inputs so a replay reaches the agent as the same run, and announced to the chain of
        the saga's correlation as `CompensationFailed`."""
        if not workflow.patched(DEAD_LETTER_PATCH):
            return
        assert self._spec is not None
        step = self._spec.steps[entry.step - 1]
        command = self._event(f"{entry.compensate}Command", payload=self._spec_input())
        message = f"compensation {entry.compensate} of step {entry.step} failed: "
        message += failure_message(error)
        await park(
            FailureType.COMPENSATION_FAILED,
            message,
            event=command,
            target_agent=entry.compensate,
            attempt_count=attempts(error, step.compensation_retry.to_retry_policy()),
            replay="run_agent",
            idempotency_key=idempotency_key,
            inputs=inputs,
        )
        notice = {"step": entry.step, "error": message}
        if self._announcing:
            self._announce("CompensationFailed", f"/saga/{self._state.saga_id}", notice)
        else:
            await self._signal_chain(self._event("CompensationFailed", payload=notice))

    def _start_agent(
        self,
        agent: str,
        settings: RunSettings,
        *,
        step: str,
        idempotency_key: str,
        inputs: dict[str, Any],
    ) -> "asyncio.Task[AgentResult]":
        """Every step and compensation is a command event handed to an agent run."""
        command = self._event(f"{agent}Command", payload=self._spec_input())
        request = AgentRequest(
            agent=agent,
            event=command,
            retry_on=settings.retry.retry_on,
            config=self._spec_agents().get(agent),
            idempotency_key=idempotency_key,
            inputs=inputs,
        )
        budget = self._spec.budget if self._spec else None
        settings = replace(settings, tokens=TokenMeter(self._state.tokens, budget))
        return start_agent_run(request, settings, partial(self._detoured, step))

    def _detoured(self, step: str, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run that waited for its agent or went elsewhere: kept in the record by step."""
        self._state.detours = kept(self._state.detours, detour.model_copy(update={"run": step}))
        if assignment is not None:
            self._state.assignments[step] = assignment
        elif detour.to_agent is not None:
            self._ran_by[step] = detour.to_agent
        self._publish_progress()

    def _announce(self, event_type: str, source: str, payload: dict[str, Any]) -> EventEnvelope:
        """Record one of the saga's events with its time, and send it to the correlation's
        chain (in the background; the run waits for every send before it ends)."""
        envelope = self._event(event_type, payload=payload, source=source)
        self._state.events.append(
            TimelineEntry.recording(
                envelope, seq=len(self._state.events) + 1, correlation_id=self._state.correlation_id
            )
        )
        if self._announcing and self._chain_reachable:
            self._announcements.append(asyncio.create_task(self._signal_chain(envelope)))
        return envelope

    async def _signal_chain(self, envelope: EventEnvelope) -> None:
        """Publish into the chain of the saga's correlation; when none runs, the saga's own
        record still has the event."""
        raw = envelope.model_dump(mode="json")
        if not await signal_chain(self._state.correlation_id, EVENT_SIGNAL, raw):
            self._chain_reachable = not workflow.patched(CHAIN_SEND_ONCE_PATCH)

    def _keep_final_record(self) -> None:
        """A cancelled run has no result to carry the record, so the memo keeps it, readable
        from the closed run without a worker."""
        if self._announcing:
            workflow.upsert_memo({SAGA_RECORD_MEMO: self._state})

    def _spec_agents(self) -> dict[str, AgentConfig]:
        return self._spec.agents if self._spec else {}

    def _spec_input(self) -> dict[str, Any]:
        assert self._spec is not None
        return self._spec.input

    def _event(
        self, event_type: str, payload: dict[str, Any], source: str | None = None
    ) -> EventEnvelope:
        """An event of this saga, caused by the saga's latest recorded event."""
        previous = self._state.events[-1].event_id if self._state.events else None
        return EventEnvelope.new(
            event_type,
            source or f"/saga/{self._state.saga_id}",
            payload=payload,
            correlation_id=self._state.correlation_id,
            causation_id=previous,
        )

    def _failure(self, failure_type: str, message: str) -> ApplicationError:
        """Business outcomes end the run as typed failures carrying the final record."""
        return failure(failure_type, message, self._state, non_retryable=True)

    def _compensated_names(self) -> str:
        return ", ".join(
            c.compensate for c in self._state.compensations if c.status == "compensated"
        )

    def _set_status(self, status: SagaStatus) -> None:
        self._state.status = status
        upsert_search_attributes(self._state.search_attributes())
        self._publish_progress()
        self._log("saga status", status=status.value, reason=self._state.failure_reason)

    def _publish_progress(self) -> None:
        workflow.set_current_details(render_details(self._state, self._spec))

    def _log(self, message: str, **fields: Any) -> None:
        workflow.logger.info(
            message,
            extra={
                "correlation_id": self._state.correlation_id,
                "saga_id": self._state.saga_id,
                **fields,
            },
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
