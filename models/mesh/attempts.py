"""When a run's attempts began and ended, and how each that failed failed, as the worker that
ran them reports it with the run's outcome.

A workflow's clock (`workflow.now()`) is the start of the workflow task it is in: a run that
ends in the task it began in (a local activity, its retries included, or a batch of them)
would be recorded as taking no time, and the attempts a run spent before its outcome came back
would all be stamped with the moment it did. So the worker stamps each attempt it runs
(`AttemptTime`) and hands the ones of the run it knows of back with the outcome: in the
result's `metadata` (RUN_ATTEMPTS, with POOL_WAIT, the time the last attempt waited for a
permit of its agent's pool) and in the first detail of a failure (beside its `attempt`). The
workflow reads them from the outcome it recorded, so a replay reads the same.

The worker knows the attempts it ran itself (a local run's all run on it; an activity task's
retry may go to another worker): an attempt it does not know of is stamped, as before, when
the outcome came back, without a reason."""

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coord.models.mesh.agents import AgentResult

__all__ = [
    "MAX_REPORTED",
    "MIN_POOL_WAIT",
    "POOL_WAIT",
    "REASON_CHARS",
    "RUN_ATTEMPTS",
    "AttemptTime",
    "attempt_times",
    "ended_at",
    "pool_wait",
    "ran_until",
]

RUN_ATTEMPTS = "run_attempts"
"""The key of a result's `metadata` (and of a failure's first detail) holding the attempts."""
POOL_WAIT = "pool_wait_s"
"""The key of a result's `metadata` holding the seconds its attempt waited for a pool permit."""
MIN_POOL_WAIT = timedelta(milliseconds=250)
"""A shorter wait for a permit is the ledger's answer, not a wait in line: not reported."""
MAX_REPORTED = 10
"""Attempts reported with an outcome at most: the latest."""
REASON_CHARS = 500
"""Characters of a failed attempt's message kept in its report."""


class AttemptTime(BaseModel):
    """One attempt as its worker saw it: when it began and ended, and, if it failed, how."""

    model_config = ConfigDict(frozen=True)

    attempt: int = Field(ge=1)
    started_at: datetime
    ended_at: datetime
    type: str = ""
    """Its failure type (empty: it succeeded)."""
    message: str = Field(default="", max_length=REASON_CHARS)


def attempt_times(reported: Mapping[str, Any] | None) -> dict[int, AttemptTime]:
    """The attempts an outcome reports (a result's `metadata`, a failure's first detail), by
    attempt; none when it reports none or what it reports does not read (a worker's data)."""
    entries = (reported or {}).get(RUN_ATTEMPTS)
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        return {}
    times: dict[int, AttemptTime] = {}
    for entry in entries[-MAX_REPORTED:]:
        try:
            time = AttemptTime.model_validate(entry)
        except ValidationError:
            continue
        times[time.attempt] = time
    return times


def ended_at(reported: Mapping[str, Any] | None) -> datetime | None:
    """When the outcome's last attempt ended, as its worker reported it (None: not reported)."""
    times = attempt_times(reported)
    return times[max(times)].ended_at if times else None


def ran_until(result: AgentResult) -> datetime | None:
    """When the run that gave `result` ended, as its worker reported it (None: not reported)."""
    return ended_at(result.metadata)


def pool_wait(metadata: Mapping[str, Any]) -> float | None:
    """The seconds a result's attempt waited for a permit of its agent's pool (None: none)."""
    waited = metadata.get(POOL_WAIT)
    if isinstance(waited, bool) or not isinstance(waited, int | float) or waited <= 0:
        return None
    return float(waited)
