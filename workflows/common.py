"""Helpers shared by the workflows."""

from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutError

with workflow.unsafe.imports_passed_through():
    from models.dlq import DeadLetter
    from models.envelope import EventEnvelope


DEAD_LETTER_PATCH = "dead-letter-queue"


def failure_message(error: BaseException) -> str:
    """The innermost message, which is the agent's own words rather than Temporal's wrapper."""
    while error.__cause__ is not None:
        error = error.__cause__
    return str(error)


def failure_type(error: ActivityError) -> str:
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return cause.type or "ApplicationError"
    if isinstance(cause, TimeoutError):
        return "timeout"
    return type(cause).__name__


def attempts(error: ActivityError, retry_policy: RetryPolicy) -> int:
    """The attempt `run_agent` reported with its failure. A timeout is Temporal's, so the agent
    could not report it: when the server gave up because the policy's attempts were used up,
    that maximum is the count; 1 when nothing says more."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.details:
        detail = cause.details[0]
        if isinstance(detail, dict) and isinstance(detail.get("attempt"), int):
            return int(detail["attempt"])
    if error.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED and retry_policy.maximum_attempts:
        return retry_policy.maximum_attempts
    return 1


async def park(
    failure_type: str,
    message: str,
    *,
    event: EventEnvelope | None = None,
    raw: Any = None,
    target_agent: str | None = None,
    attempt_count: int = 1,
    replay: Literal["signal", "rerun", "run_agent"] = "signal",
    idempotency_key: str | None = None,
    inputs: dict[str, Any] | None = None,
    causation_depth: int | None = None,
) -> None:
    """Hand what this workflow could not handle to the dead-letter queue; nothing is dropped.

    Runs recorded before the queue existed replay without it (the `dead-letter-queue` patch)."""
    if not workflow.patched(DEAD_LETTER_PATCH):
        return
    now = workflow.now()
    letter = DeadLetter(
        event=event,
        raw=raw,
        target_workflow=workflow.info().workflow_id,
        target_agent=target_agent,
        failure_type=failure_type,
        message=message,
        attempts=attempt_count,
        first_failed_at=now,
        last_failed_at=now,
        replay=replay,
        idempotency_key=idempotency_key,
        inputs=inputs or {},
        causation_depth=causation_depth,
    )
    await workflow.execute_activity(
        "park_dead_letter",
        letter,
        start_to_close_timeout=timedelta(seconds=30),
        summary=f"dead-letter: {failure_type}",
    )
