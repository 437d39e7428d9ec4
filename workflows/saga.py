"""The `Saga` workflow: ordered agent steps with a compensation stack.

A step's compensation is pushed *before* the step runs, because after a timeout its outcome is
unknown; compensations must therefore tolerate "never happened". On a step's final failure, or on
cancellation, the stack is unwound (LIFO, or all at once), shielded from cancellation. After a
pivot step succeeds there is no way back: the remaining steps are retried forward instead.
"""

import asyncio
import contextlib
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from models.agent_config import AgentConfig
    from models.agents import AgentRequest, AgentResult
    from models.chain import chain_workflow_id
    from models.envelope import EventEnvelope
    from models.saga import (
        CompensationOutcome,
        CompletedStep,
        SagaSpec,
        SagaState,
        SagaStatus,
        SagaStep,
        StackEntry,
    )
    from models.specs import SpecError, parse_model
    from workflows import search_attributes
    from workflows.common import DEAD_LETTER_PATCH, attempts, failure_message, park

T = TypeVar("T")


class StepFailed(Exception):
    def __init__(self, index: int, step: SagaStep, error: ActivityError) -> None:
        super().__init__(f"step {index} {step.name} failed: {failure_message(error)}")
        self.index = index
        self.step = step


async def uncancellable(awaitable: Awaitable[T]) -> T:
    """Run to the end even if the workflow is cancelled (again) meanwhile."""
    task = asyncio.ensure_future(awaitable)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise


@workflow.defn(name="Saga")
class Saga:
    def __init__(self) -> None:
        self._spec: SagaSpec | None = None
        self._state = SagaState(saga_id=workflow.info().workflow_id.removeprefix("saga-"))

    @workflow.run
    async def run(self, raw_spec: Any) -> SagaState:
        """`raw_spec` is untyped on purpose: a malformed spec sent as plain JSON (Temporal CLI,
        UI) must fail the workflow with a message naming the field, not wedge its task."""
        spec = self._validated(raw_spec)
        self._spec = spec
        self._state = SagaState(saga_id=spec.saga_id, correlation_id=spec.correlation_id)
        self._set_status(SagaStatus.IN_PROGRESS)
        try:
            await self._run_steps(spec)
        except StepFailed as failure:
            return await self._after_step_failure(failure)
        except asyncio.CancelledError:
            await uncancellable(self._compensate("saga cancelled"))
            raise
        self._state.compensation_stack.clear()
        self._set_status(SagaStatus.COMPLETED)
        return self._state

    @workflow.query
    def state(self) -> SagaState:
        return self._state

    def _validated(self, raw_spec: Any) -> SagaSpec:
        try:
            return parse_model(SagaSpec, raw_spec, "saga spec")
        except SpecError as error:
            self._state.failure_reason = str(error)
            self._set_status(SagaStatus.FAILED)
            raise self._failure("invalid_spec", str(error)) from None

    async def _run_steps(self, spec: SagaSpec) -> None:
        for index, step in enumerate(spec.steps, start=1):
            if self._state.recovery == "forward":
                await uncancellable(self._run_step(index, step))
            else:
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
            result = await self._run_agent(
                step.agent,
                summary=step.name,
                timeout=step.timeout,
                retry_policy=retry.to_retry_policy(),
                retry_on=retry.retry_on,
                heartbeat_timeout=step.heartbeat_timeout,
            )
        except ActivityError as error:
            if is_cancelled_exception(error):
                raise asyncio.CancelledError from error
            self._state.failed_event = step.on_failure
            raise StepFailed(index, step, error) from error
        completed = self._event(step.on_success, payload=result.data)
        self._state.completed_steps.append(
            CompletedStep(step=index, event=step.on_success, event_id=completed.event.id)
        )
        self._log("step completed", step=step.name, event=step.on_success)

    async def _after_step_failure(self, failure: StepFailed) -> SagaState:
        if self._state.recovery == "forward":
            self._state.failure_reason = f"{failure}; after the pivot, so nothing is compensated"
            self._set_status(SagaStatus.FAILED)
            raise self._failure("saga_failed", self._state.failure_reason)
        await uncancellable(self._compensate(str(failure)))
        undone = self._compensated_names() or "nothing to undo"
        raise self._failure("saga_compensated", f"{failure}; compensated: {undone}")

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
            raise self._failure("compensation_failed", self._state.failure_reason)
        self._set_status(SagaStatus.COMPENSATED)

    async def _undo(self, entry: StackEntry) -> bool:
        assert self._spec is not None
        step = self._spec.steps[entry.step - 1]
        try:
            await self._run_agent(
                entry.compensate,
                summary=f"compensate: {entry.compensate}",
                timeout=step.compensation_timeout,
                retry_policy=step.compensation_retry.to_retry_policy(),
                retry_on=step.compensation_retry.retry_on,
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
            await self._dead_letter(entry, error)
            return False
        self._state.compensation_stack.remove(entry)
        self._state.compensations.append(
            CompensationOutcome(step=entry.step, compensate=entry.compensate, status="compensated")
        )
        self._publish_progress()
        return True

    async def _dead_letter(self, entry: StackEntry, error: ActivityError) -> None:
        """An undo that failed for good is parked for a person, and announced to the chain of
        the saga's correlation as `CompensationFailed`."""
        if not workflow.patched(DEAD_LETTER_PATCH):
            return
        assert self._spec is not None
        step = self._spec.steps[entry.step - 1]
        command = self._event(f"{entry.compensate}Command", payload=self._spec_input())
        message = f"compensation {entry.compensate} of step {entry.step} failed: "
        message += failure_message(error)
        await park(
            "compensation_failed",
            message,
            event=command,
            target_agent=entry.compensate,
            attempt_count=attempts(error, step.compensation_retry.to_retry_policy()),
            replay="run_agent",
        )
        notice = self._event("CompensationFailed", payload={"step": entry.step, "error": message})
        chain = workflow.get_external_workflow_handle(chain_workflow_id(self._state.correlation_id))
        with contextlib.suppress(ApplicationError):
            await chain.signal("event", notice.model_dump(mode="json"))

    async def _run_agent(
        self,
        agent: str,
        *,
        summary: str,
        timeout: timedelta,
        retry_policy: RetryPolicy,
        retry_on: list[str],
        heartbeat_timeout: timedelta | None = None,
    ) -> AgentResult:
        """Every step and compensation is a command event handed to `run_agent`."""
        command = self._event(f"{agent}Command", payload=self._spec_input())
        result: AgentResult = await workflow.execute_activity(
            "run_agent",
            AgentRequest(
                agent=agent, event=command, retry_on=retry_on, config=self._spec_agents().get(agent)
            ),
            result_type=AgentResult,
            start_to_close_timeout=timeout,
            heartbeat_timeout=heartbeat_timeout,
            retry_policy=retry_policy,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=summary,
        )
        return result

    def _spec_agents(self) -> dict[str, AgentConfig]:
        return self._spec.agents if self._spec else {}

    def _spec_input(self) -> dict[str, Any]:
        assert self._spec is not None
        return self._spec.input

    def _event(self, event_type: str, payload: dict[str, Any]) -> EventEnvelope:
        previous = self._state.completed_steps[-1].event_id if self._state.completed_steps else None
        return EventEnvelope.new(
            event_type,
            f"/saga/{self._state.saga_id}",
            payload=payload,
            correlation_id=self._state.correlation_id,
            causation_id=previous,
        )

    def _failure(self, failure_type: str, message: str) -> ApplicationError:
        """Business outcomes end the run as typed failures carrying the final record."""
        return ApplicationError(message, self._state, type=failure_type, non_retryable=True)

    def _compensated_names(self) -> str:
        return ", ".join(
            c.compensate for c in self._state.compensations if c.status == "compensated"
        )

    def _set_status(self, status: SagaStatus) -> None:
        self._state.status = status
        search_attributes.upsert(
            search_attributes.coordination_attributes(
                correlation_id=self._state.correlation_id or self._state.saga_id,
                pattern="saga",
                status=status.value,
            )
        )
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
    if state.compensations:
        undone = ", ".join(f"{c.compensate} ({c.status})" for c in state.compensations)
        lines.append(f"**Compensations:** {undone}")
    if state.failure_reason:
        lines.append(f"**Reason:** {state.failure_reason}")
    return "\n\n".join(lines)
