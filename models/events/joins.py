"""Waiting for several events: the one piece of join logic that chain subscriptions and
aggregators share. Pure and serializable, so workflows carry it across continue-as-new."""

import math
from collections import Counter
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coord.models.events.envelope import EventEnvelope


class Slot(BaseModel):
    """An expected event: its type, and optionally who must send it (the `from`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: str = Field(min_length=1)
    source: str | None = Field(default=None, alias="from")

    def accepts(self, envelope: EventEnvelope) -> bool:
        return envelope.event.type == self.type and self.source in (None, envelope.event.source)

    def describe(self) -> str:
        return f"{self.type} from {self.source}" if self.source else self.type


class Arrival(BaseModel):
    event_id: str
    source: str
    received_at: datetime
    timestamp: datetime | None = None
    """The event's own time (its header's `timestamp`); None in arrivals recorded before it
    was kept, which then count by their arrival time."""
    payload: dict[str, Any] = Field(default_factory=dict)

    @property
    def event_time(self) -> datetime:
        return self.timestamp or self.received_at


def share_needed(threshold: float, count: int) -> int:
    """How many of `count` make up the share `threshold` (a quorum: an aggregator's events, a
    vote's approvals). Rounded to a tenth of one, then up, so a threshold of 0.67 means two of
    three, as it intends (0.67 x 3 = 2.01 would otherwise need all three); at least one."""
    return max(1, math.ceil(round(threshold * count, 1)))


Offer = Literal["recorded", "replaced", "kept", "unmatched"]


class JoinState(BaseModel):
    slots: list[Slot]
    needed: int = Field(ge=1)
    keep: Literal["first", "latest"] = "first"
    received: dict[int, Arrival] = Field(default_factory=dict)
    """Slot index → the event that filled it since the join last fired."""

    @classmethod
    def of(
        cls,
        slots: list[Slot],
        *,
        mode: Literal["all", "any"] = "all",
        at_least: int | None = None,
        threshold: float | None = None,
        keep: Literal["first", "latest"] = "first",
    ) -> "JoinState":
        """`all`, `any`, a count (`at_least`) or a share of the slots (`threshold`, the mesh
        consensus threshold, counted by `share_needed`)."""
        needed = len(slots) if mode == "all" else 1
        if at_least is not None:
            needed = at_least
        elif threshold is not None:
            needed = share_needed(threshold, len(slots))
        return cls(slots=slots, needed=needed, keep=keep)

    def offer(self, envelope: EventEnvelope, received_at: datetime) -> Offer:
        """Fill the first free slot this event fits. When every fitting slot is taken, `keep`
        decides by event time, not arrival order (a lookback offers older events after newer
        live ones): `first` keeps the earliest events, `latest` the newest, so the held event
        furthest from that end (the newest, or the oldest) gives way to one nearer to it."""
        fitting = [i for i, slot in enumerate(self.slots) if slot.accepts(envelope)]
        if not fitting:
            return "unmatched"
        arrival = Arrival(
            event_id=envelope.event.id,
            source=envelope.event.source,
            received_at=received_at,
            timestamp=envelope.event.timestamp,
            payload=envelope.payload,
        )
        free = [i for i in fitting if i not in self.received]
        if free:
            self.received[free[0]] = arrival
            return "recorded"
        held = sorted(fitting, key=lambda i: self.received[i].event_time)
        if self.keep == "latest":
            index = held[0]
            replaces = arrival.event_time >= self.received[index].event_time
        else:
            index = held[-1]
            replaces = arrival.event_time < self.received[index].event_time
        if not replaces:
            return "kept"
        self.received[index] = arrival
        return "replaced"

    @property
    def satisfied(self) -> bool:
        return len(self.received) >= self.needed

    @property
    def missing(self) -> list[Slot]:
        return [slot for i, slot in enumerate(self.slots) if i not in self.received]

    def slot_keys(self) -> list[str]:
        """A name per slot: its event type; `type from source` where the type repeats; numbered
        (`#1`, `#2`) where even that repeats."""
        types = Counter(slot.type for slot in self.slots)
        names = [slot.describe() if types[slot.type] > 1 else slot.type for slot in self.slots]
        repeated, seen = Counter(names), Counter[str]()
        keys = []
        for name in names:
            seen[name] += 1
            keys.append(f"{name} #{seen[name]}" if repeated[name] > 1 else name)
        return keys

    def inputs(self) -> dict[str, dict[str, Any]]:
        """The received events keyed by slot, each with its type, id, source, arrival time and
        payload: one shape for what a joined agent receives (`AgentRequest.inputs`) and what an
        aggregator's emitted event carries."""
        keys = self.slot_keys()
        return {
            keys[i]: {"type": self.slots[i].type, **self.received[i].model_dump(mode="json")}
            for i in sorted(self.received)
        }

    def fire(self) -> list[Arrival]:
        """Consume the received events (in slot order) so the join can fire again."""
        arrivals = [self.received[i] for i in sorted(self.received)]
        self.received = {}
        return arrivals
