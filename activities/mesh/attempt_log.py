"""The attempts of the runs a worker is running, kept until each run's outcome carries them back
(coord.models.mesh.attempts). An activity task's attempts may run on any worker serving its
agent: they travel in its heartbeats' details, with its tally (`RunCounter.carry_attempts`,
for a run that counts its retries). A local run's all run on this worker, inside local
activities that send no heartbeat, so they are kept here: by the run's workflow run and
idempotency key (the executions of one run share it, and a batch's runs share their
activity), else its activity, for the runs whose attempts may still go on, at most MAX_RUNS
(the oldest dropped first: a run the workflow gave up on, such as a batched first attempt it
did not retry, or moved to another worker)."""

from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from coord.activities.mesh.run_tally import RunCounter
from coord.models.mesh.agents import AgentRequest, AgentResult
from coord.models.mesh.attempts import MAX_REPORTED, REASON_CHARS, RUN_ATTEMPTS, AttemptTime
from coord.models.mesh.runs import GATE_FAILURES
from coord.models.wire.contract import RUN_AGENTS_ACTIVITY, failure

MAX_RUNS = 10_000
"""Runs whose earlier attempts a worker keeps at most."""


class AttemptLog:
    """The earlier attempts of the runs under way on this worker, by run."""

    def __init__(self) -> None:
        self._runs: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def succeeded(
        self, request: AgentRequest, result: AgentResult, tally: RunCounter, started: datetime
    ) -> AgentResult:
        """`result` carrying the run's attempts, this one last; the run is forgotten."""
        done = AttemptTime(attempt=tally.attempt, started_at=started, ended_at=datetime.now(UTC))
        reported = [*self._earlier(request, tally), done.model_dump(mode="json")]
        result.metadata = {**result.metadata, RUN_ATTEMPTS: reported[-MAX_REPORTED:]}
        return result

    def _earlier(self, request: AgentRequest, tally: RunCounter) -> list[dict[str, Any]]:
        """The run's attempts before this one, as reported: carried by the heartbeats of an
        activity task, kept here for a local run (and forgotten: its outcome reports them)."""
        if not activity.info().is_local:
            return tally.earlier_attempts
        return self._runs.pop(_run_of(request), [])

    def failed(
        self, request: AgentRequest, error: ApplicationError, tally: RunCounter, started: datetime
    ) -> ApplicationError:
        """`error` carrying the run's attempts in its first detail, this one last; kept for the
        run's next attempt unless it is not retried. A gate's refusal (the agent was not
        called: not an attempt) and a failure without an attempt go back as they are."""
        detail = error.details[0] if error.details else None
        if error.type in GATE_FAILURES or not isinstance(detail, dict):
            return error
        ended = AttemptTime(
            attempt=tally.attempt,
            started_at=started,
            ended_at=datetime.now(UTC),
            type=error.type or "",
            message=error.message[:REASON_CHARS],
        )
        earlier = self._earlier(request, tally)
        reported = [*earlier, ended.model_dump(mode="json")][-MAX_REPORTED:]
        if not (error.non_retryable or _last_attempt()):
            self._keep(request, tally, reported)
        return failure(
            error.type or "",
            error.message,
            {**detail, RUN_ATTEMPTS: reported},
            *error.details[1:],
            non_retryable=error.non_retryable,
            retry_after=error.next_retry_delay,
        )

    def _keep(self, request: AgentRequest, tally: RunCounter, reported: list[Any]) -> None:
        """The run's attempts for its next: carried by its heartbeats, or kept here for a local
        run."""
        if not activity.info().is_local:
            tally.carry_attempts(reported)
            return
        self._runs[_run_of(request)] = reported
        while len(self._runs) > MAX_RUNS:
            self._runs.popitem(last=False)


def attempt_began() -> datetime:
    """When the running attempt began: an activity task's when the server scheduled it (its
    wait on its agent's queue is the attempt's), a local run's now."""
    info = activity.info()
    return datetime.now(UTC) if info.is_local else info.current_attempt_scheduled_time


def _last_attempt() -> bool:
    """Whether the activity's retry policy allows it no attempt after this one. A batch's
    (RUN_AGENTS) is its runs' first attempts, each retried by its workflow in an execution of
    its own (`_AgentRun.batched`), which reports it too: never the last by its policy."""
    info = activity.info()
    if info.activity_type == RUN_AGENTS_ACTIVITY:
        return False
    limit = info.retry_policy.maximum_attempts if info.retry_policy is not None else 0
    return 0 < limit <= info.attempt


def _run_of(request: AgentRequest) -> str:
    info = activity.info()
    run = request.idempotency_key or info.activity_id
    return f"{info.workflow_id}/{info.workflow_run_id}/{run}"
