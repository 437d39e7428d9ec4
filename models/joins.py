"""Waiting for several events: the one piece of join logic that chain subscriptions (and
aggregators) share. Pure and serializable, so workflows carry it across continue-as-new."""

from typing import Literal

from pydantic import BaseModel, Field

JoinMode = Literal["any", "all"]


class JoinState(BaseModel):
    expected: list[str]
    mode: JoinMode = "any"
    received: dict[str, str] = Field(default_factory=dict)
    """Event type → id of the first event of that type since the join last fired."""

    def offer(self, event_type: str, event_id: str) -> bool:
        """Record the event if the join waits for it; True when the join is now satisfied."""
        if event_type not in self.expected:
            return False
        self.received.setdefault(event_type, event_id)
        return self.satisfied

    @property
    def satisfied(self) -> bool:
        if self.mode == "all":
            return len(self.received) == len(set(self.expected))
        return bool(self.received)

    @property
    def missing(self) -> list[str]:
        return [t for t in self.expected if t not in self.received]

    def fire(self) -> list[str]:
        """Consume the received events (their ids, in expected order) so the join can fire again."""
        ids = [self.received[t] for t in self.expected if t in self.received]
        self.received = {}
        return ids
