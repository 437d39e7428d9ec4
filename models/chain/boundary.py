"""What crosses between a chain's model and its workflow, both ways.

In: `RunContext`, what the model reads of the run it is in (the workflow's clock, its history's
length, the versions it was recorded with, its payload converter for the signals it decodes
late). The model asks exactly where a decision needs it, as the workflow would: a patch is looked
up the first time a decision depends on it, which is where its marker goes in the history, so a
run replays as it was recorded.

Out: the `Outbox`, what the model decided to send (parkings, forwards to listeners, its status
for the UI's search attributes), in the order it decided. The workflow takes and sends it after
each hand-off, within the same workflow step, so sends go out in the order they did when the
workflow made each decision itself. Nothing in the model sends or waits."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, TypedDict

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.attempts import AttemptTime
from coord.models.wire.contract import SearchValues


@dataclass(frozen=True)
class Undecodable:
    """A signal's event that did not decode or validate: why, and what it carried (as the
    dead-letter queue records it)."""

    reason: str
    raw: Any


class RunContext(Protocol):
    """The workflow's side of what the model reads (`workflow.now()`, `workflow.info()`,
    `workflow.patched()`, the payload converter); a test gives fixed values."""

    def now(self) -> datetime: ...

    def history_length(self) -> int: ...

    def continue_as_new_suggested(self) -> bool: ...

    def patched(self, patch: str) -> bool: ...

    def decode(self, text: str) -> EventEnvelope | Undecodable:
        """An `event` signal's envelope from the JSON text it carried."""


@dataclass(frozen=True)
class Rejection:
    """Why an event is not handled; the model records it and parks the event."""

    kind: str
    reason: str
    depth: int | None = None
    """The event's causation depth, kept so what its parking causes counts from there."""


class ParkDetails(TypedDict, total=False):
    """What a parking says besides its failure type and message: the keywords of `park`."""

    event: EventEnvelope | None
    raw: Any
    target_agent: str
    attempt_count: int
    failed_attempts: Mapping[int, AttemptTime]
    replay: Literal["signal", "rerun", "run_agent"]
    idempotency_key: str | None
    inputs: dict[str, Any]
    causation_depth: int | None


@dataclass(frozen=True)
class Parking:
    """What goes to the dead-letter queue: the arguments of the workflow's `park`."""

    failure_type: str
    message: str
    details: ParkDetails


@dataclass(frozen=True)
class Forward:
    """A recorded event for the chain's listeners, by `signal` (`chain_event`; `event` in runs
    recorded before lifecycle notices)."""

    envelope: EventEnvelope
    signal: str
    listeners: tuple[str, ...]


@dataclass(frozen=True)
class StatusChanged:
    """The chain's status changed (an alert paused it, its resolution resumed it): the search
    attributes the UI finds it by, as they are now."""

    attributes: SearchValues


Send = Parking | Forward | StatusChanged


class Outbox:
    """What the model decided to send, oldest first, until the workflow takes it."""

    def __init__(self) -> None:
        self._sends: list[Send] = []

    def put(self, send: Send) -> None:
        self._sends.append(send)

    def take(self) -> list[Send]:
        sends, self._sends = self._sends, []
        return sends
