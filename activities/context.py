"""What an agent is: an async function of the event and its run's context."""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coord.models.envelope import EventEnvelope


@dataclass(frozen=True)
class AgentContext:
    agent: str
    attempt: int
    idempotency_key: str
    """Stable across retries of the same run, so agents can avoid repeating side effects."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """The request's `inputs`: joined events by slot, earlier saga results by step name."""


AgentFn = Callable[[EventEnvelope, AgentContext], Awaitable[Mapping[str, Any] | None]]
