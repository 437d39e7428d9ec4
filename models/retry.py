"""The seed's retry configuration, expressed as a Temporal RetryPolicy."""

from datetime import timedelta
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from temporalio.common import RetryPolicy

from coord.models.agent_runs import Jitter
from coord.models.contract import NOT_RETRYABLE
from coord.models.durations import Duration
from coord.models.specs import MAX_COUNT


class RetryConfig(BaseModel):
    """`max_retries` counts retries after the first attempt (None: retry until success).
    `retry_on` empty means every failure type not in `no_retry_on` is retried."""

    model_config = ConfigDict(extra="forbid")

    max_retries: int | None = Field(default=3, ge=0, le=MAX_COUNT)
    backoff_type: Literal["exponential", "fixed"] = "exponential"
    initial_delay: Duration = timedelta(seconds=1)
    max_delay: Duration = timedelta(seconds=30)
    retry_on: list[str] = Field(default_factory=list)
    no_retry_on: list[str] = Field(
        default_factory=lambda: [kind.value for kind in sorted(NOT_RETRYABLE)]
    )
    jitter: Jitter = "full"
    """How the delay before each retry is spread: `full` (uniform up to the backoff, the
    default: runs failing together come back apart), `decorrelated`, or `none` (the backoff
    exactly)."""

    @model_validator(mode="after")
    def _delays_ordered(self) -> Self:
        if self.initial_delay <= timedelta(0):
            raise ValueError("initial_delay must be positive")
        if self.max_delay < self.initial_delay:
            raise ValueError("max_delay must not be shorter than initial_delay")
        return self

    def to_retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            initial_interval=self.initial_delay,
            backoff_coefficient=2.0 if self.backoff_type == "exponential" else 1.0,
            maximum_interval=self.max_delay,
            maximum_attempts=0 if self.max_retries is None else self.max_retries + 1,
            non_retryable_error_types=list(self.no_retry_on),
        )

    def until_success(self) -> Self:
        """The same backoff with no attempt limit and nothing non-retryable by type."""
        return self.model_copy(update={"max_retries": None, "no_retry_on": [], "retry_on": []})


DEFAULT_COMPENSATION_RETRY = RetryConfig(max_retries=None, max_delay=timedelta(minutes=1))
