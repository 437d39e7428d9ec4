"""Aggregator specs (the phase1-complete) and the aggregator's status table."""

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coord.models.events.envelope import EventEnvelope
from coord.models.events.joins import Arrival, JoinState, Slot
from coord.models.events.rewind import CopyPast
from coord.models.wire.contract import (
    Pattern,
    SearchValues,
    aggregator_workflow_id,
    coordination_attributes,
)
from coord.models.wire.durations import Duration
from coord.models.wire.specs import IDENTIFIER, MAX_ITEMS, MAX_NAME, parse_model


class AggregatorRewind(CopyPast):
    """A rewound copy's past: the slots its original's join held just before the rewind point
    (slot index: the event that filled it), and the time its deadline had left then."""

    slots: dict[int, Arrival] = Field(default_factory=dict, max_length=MAX_ITEMS)
    time_left: Duration | None = None
    """None: the copy waits its whole `timeout`, as a new aggregator would."""


class AggregatorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    aggregator_id: str = Field(pattern=IDENTIFIER, max_length=MAX_NAME)
    description: str = ""
    wait_for: list[Slot] = Field(min_length=1, max_length=MAX_ITEMS)
    timeout: Duration
    on_complete: str = Field(min_length=1)
    on_timeout: str = Field(min_length=1)
    mode: Literal["all", "any"] = "all"
    at_least: int | None = Field(default=None, ge=1)
    threshold: float | None = Field(default=None, gt=0, le=1)
    keep: Literal["first", "latest"] = "first"
    correlation_id: str | None = Field(default=None, pattern=IDENTIFIER, max_length=MAX_NAME)
    lookback: bool = False
    rewind: AggregatorRewind | None = None
    """Set on a rewound copy (`coord rewind`): the slots it takes from its original."""

    @field_validator("mode", mode="before")
    @classmethod
    def _mode_is_all_or_any(cls, value: Any) -> Any:
        """A quorum is no mode but fields of its own: `mode: {at_least: 2}` is told where it
        goes, not just which two words `mode` takes."""
        if value in ("all", "any"):
            return value
        raise ValueError(
            "should be 'all' or 'any'; a quorum is no mode but a top-level field beside it: "
            "at_least: 2 or threshold: 0.67"
        )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.at_least is not None and self.threshold is not None:
            raise ValueError("threshold: give at most one of at_least and threshold")
        if self.at_least is not None and self.at_least > len(self.wait_for):
            raise ValueError(
                f"at_least: {self.at_least} is more than the {len(self.wait_for)} awaited events"
            )
        if self.lookback and self.correlation_id is None:
            raise ValueError("lookback: needs correlation_id (it reads that correlation's chain)")
        if self.rewind is not None:
            outside = sorted(i for i in self.rewind.slots if not 0 <= i < len(self.wait_for))
            if outside:
                raise ValueError(f"rewind.slots: {outside[0]} is no slot of wait_for")
        return self

    def new_join(self) -> JoinState:
        return JoinState.of(
            list(self.wait_for),
            mode=self.mode,
            at_least=self.at_least,
            threshold=self.threshold,
            keep=self.keep,
        )

    @property
    def workflow_id(self) -> str:
        return aggregator_workflow_id(self.aggregator_id, self.correlation_id)


class AggregatorStatus(StrEnum):
    WAITING = "waiting"
    COMPLETED = "completed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class SlotStatus(BaseModel):
    type: str
    source: str | None = None
    status: Literal["received", "waiting"]
    received_at: datetime | None = None
    event_id: str | None = None


class AggregatorState(BaseModel):
    """The status table: each expected event, the count line, the deadline. Every event
    it received (by signal or lookback) is counted once: `received = matched + unmatched +
    duplicates + rejected_count + ignored_after_finish`."""

    aggregator_id: str
    correlation_id: str | None = None
    status: AggregatorStatus = AggregatorStatus.WAITING
    slots: list[SlotStatus] = Field(default_factory=list)
    progress: str = ""
    deadline: datetime | None = None
    seconds_left: float | None = None
    """Time left until the deadline as the reader sees it (`as_of`); the workflow's `state`
    query leaves it out, since a query only knows the time of the run's last workflow task."""
    received: int = 0
    matched: int = 0
    duplicates: int = 0
    unmatched: int = 0
    rejected: list[str] = Field(default_factory=list)
    """The latest rejections (invalid envelopes, events addressed to it after it finished)."""
    rejected_count: int = 0
    ignored_after_finish: int = 0
    """Events it only listened to (forwarded by its chain) or lifecycle notices, heard after it
    had finished: dropped, never dead-lettered."""
    lookback_failure: str | None = None
    """Why reading the chain's earlier events failed, when it did; the join went on without."""
    emitted: EventEnvelope | None = None
    published_to_chain: bool = False
    rewind_of: str | None = None
    """A rewound copy's original and event (`CoordRewindOf`): `<correlation>@<event id>`."""

    def as_of(self, now: datetime) -> "AggregatorState":
        """The record with the time left until the deadline, seen at `now`."""
        if self.status != AggregatorStatus.WAITING or self.deadline is None:
            return self
        left = max(self.deadline - now, timedelta()).total_seconds()
        return self.model_copy(update={"seconds_left": left})

    def search_attributes(self) -> SearchValues:
        """What the run is found by: set at start (the first record), upserted on every change."""
        key = self.correlation_id or self.aggregator_id
        return coordination_attributes(
            Pattern.AGGREGATOR, correlation_id=key, status=self.status, rewind_of=self.rewind_of
        )


class AggregatorCarry(BaseModel):
    """What a run hands to the next when it continues-as-new."""

    state: AggregatorState
    join: JoinState
    deadline: datetime
    seen: list[str]
    """The latest event ids (a bounded window), so duplicates are still recognised."""
    chain_joined: bool
    """Attached to its chain and looked back already; the next run does neither again."""


class AggregatorInput(BaseModel):
    """A continued run's input. A first run's input is the spec itself."""

    model_config = ConfigDict(extra="forbid")

    spec: AggregatorSpec
    carried: AggregatorCarry


def parse_aggregator_input(raw: Any) -> tuple[AggregatorSpec, AggregatorCarry | None]:
    """The spec (a first run), or the spec and what the previous run carried."""
    if isinstance(raw, dict) and "carried" in raw:
        continued = parse_model(AggregatorInput, raw, "aggregator input")
        return continued.spec, continued.carried
    return parse_model(AggregatorSpec, raw, "aggregator spec"), None


def aggregation_payload(spec: AggregatorSpec, join: JoinState) -> dict[str, Any]:
    """What on_complete / on_timeout carry: the joined events keyed by slot, each with its
    payload (`inputs`, the shape a joined chain agent receives), and what did not arrive."""
    return {
        "aggregator_id": spec.aggregator_id,
        "inputs": join.inputs(),
        "missing": [slot.model_dump(mode="json", by_alias=True) for slot in join.missing],
        "needed": join.needed,
    }
