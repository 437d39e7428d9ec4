"""The life of one agent run as a pattern's model records it: started, then succeeded or failed.

The chain and the plan (and any pattern that runs agents) keep their runs by their own key (a
chain's run, a plan's task) and their own result, but answer the same four calls, so the
workflow side (`workflows/_runtime/agent_runs.py`) drives any of them the same way."""

from collections.abc import Collection
from datetime import datetime
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from coord.models.mesh.attempts import AttemptTime

__all__ = ["RunFailure", "RunLifecycle"]

KeyT = TypeVar("KeyT", contravariant=True)
ResultT = TypeVar("ResultT", contravariant=True)
RunningT = TypeVar("RunningT", covariant=True)


class RunFailure(BaseModel):
    """How a run failed for good: its failure type (the contract's taxonomy), the agent's own
    words, and the attempts it took."""

    model_config = ConfigDict(frozen=True)

    type: str
    message: str
    attempts: int = 1
    times: dict[int, AttemptTime] = {}
    """The run's attempts by number as its worker reported them (coord.models.mesh.attempts):
    when each began and ended, how each that failed failed."""


class RunLifecycle(Protocol[KeyT, ResultT, RunningT]):
    def run_started(self, key: KeyT, now: datetime) -> None:
        """The run was sent to its agent."""

    def run_succeeded(self, key: KeyT, now: datetime, result: ResultT) -> None:
        """The agent answered; the model records the result and what follows from it."""

    def run_failed(self, key: KeyT, now: datetime, failure: RunFailure) -> None:
        """The run failed for good (its retries spent, or a failure that is not retried)."""

    def running(self) -> Collection[RunningT]:
        """The runs sent and not yet ended."""
