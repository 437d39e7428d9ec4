"""An aggregator's state and rules, apart from Temporal: the join (which event fills which slot,
the quorum that completes it), the deadline, the lookback's events, duplicates, events from
another correlation, events that arrive after the end, the emitted event and the final record.

Pure, so it is tested without a server (tests/test_aggregator_model.py); the workflow
(`coord.workflows.aggregator`) keeps the Temporal part: the deadline timer, signals, attaching
to and leaving its chain, the lookback activity, parking, search attributes and continue-as-new.

The rules:
- every event received (signal or lookback) is counted once: `received = matched + unmatched +
  duplicates + rejected_count + ignored_after_finish`;
- an event id seen before is a duplicate (a bounded window of ids is kept, and carried across
  continue-as-new); an event of another correlation than the aggregator's is unmatched;
- the lookback offers the chain's earlier events oldest first, lifecycle notices left out, so a
  live event that arrived meanwhile is recognised as the same one;
- the join completes when its quorum (`mode`, `at_least`, `threshold`) holds, even if the
  deadline or a cancel lands in the same moment; otherwise the deadline times it out;
- after the end, an event addressed to it is parked (`target_ended`), while a duplicate, an
  event its chain only forwarded, or a lifecycle notice is counted and dropped."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from coord.models.aggregator.spec import (
    AggregatorCarry,
    AggregatorInput,
    AggregatorSpec,
    AggregatorState,
    AggregatorStatus,
    SlotStatus,
    aggregation_payload,
    parse_aggregator_input,
)
from coord.models.events.envelope import LIFECYCLE_NOTICES, EventEnvelope
from coord.models.events.joins import Slot
from coord.models.wire.durations import MIN_DURATION, format_duration

INVALID_SPEC_STANDIN = AggregatorSpec(
    aggregator_id="invalid",
    wait_for=[Slot(type="none")],
    timeout=MIN_DURATION,
    on_complete="none",
    on_timeout="none",
)
"""Keeps the handlers working (and recording) while the run reports the invalid spec."""
SEEN_WINDOW = 1000
REJECTED_WINDOW = 20


class AggregatorModel:
    """One aggregator's bookkeeping: `begin` makes it from the run's input (a spec, or what the
    previous run carried), `invalid` when that input is refused, `carry` gives the next run's."""

    def __init__(
        self,
        spec: AggregatorSpec,
        carried: AggregatorCarry,
        *,
        spec_error: str | None = None,
    ) -> None:
        self.spec = spec
        self.spec_error = spec_error
        self.state = carried.state
        self.join = carried.join
        self.deadline = carried.deadline
        self.chain_joined = carried.chain_joined
        """Attached to its chain and looked back already: a continued run does neither again."""
        self._seen = dict.fromkeys(carried.seen)
        self._awaited = frozenset(slot.type for slot in self.join.slots)
        """The types its slots await: an event of another type fits none, told at no cost."""
        self.first_run = False
        """Made from a spec, not from what a previous run carried."""

    @classmethod
    def begin(cls, raw: Any, start: datetime) -> "AggregatorModel":
        """From the run's decoded input: a first run's deadline is `start` plus the timeout.
        Raises SpecError naming the field when the input is not a valid spec or carry."""
        spec, carried = parse_aggregator_input(raw)
        model = cls(spec, carried or cls._fresh(spec, start + spec.timeout))
        model.first_run = carried is None
        return model

    @property
    def rewound(self) -> bool:
        """A rewound copy's first run: it has a past to take (`take_past`)."""
        return self.first_run and self.spec.rewind is not None

    def take_past(self, start: datetime) -> None:
        """A rewound copy starts from its original's join as it stood just before the point:
        the slots filled then, counted as received and matched, their ids remembered (so the
        same event heard again is a duplicate), and the deadline its original had left."""
        past = self.spec.rewind
        if past is None:
            return
        self.join.received = dict(past.slots)
        for arrival in past.slots.values():
            self._remember(arrival.event_id)
        self.state.received += len(past.slots)
        self.state.matched += len(past.slots)
        if past.time_left is not None:
            self.deadline = start + past.time_left

    @classmethod
    def invalid(cls, reason: str, now: datetime) -> "AggregatorModel":
        """A refused input: a stand-in spec keeps the handlers recording what arrives."""
        return cls(INVALID_SPEC_STANDIN, cls._fresh(INVALID_SPEC_STANDIN, now), spec_error=reason)

    @staticmethod
    def _fresh(spec: AggregatorSpec, deadline: datetime) -> AggregatorCarry:
        state = AggregatorState(
            aggregator_id=spec.aggregator_id,
            correlation_id=spec.correlation_id,
            rewind_of=spec.rewind.of.search_value() if spec.rewind else None,
        )
        return AggregatorCarry(
            state=state, join=spec.new_join(), deadline=deadline, seen=[], chain_joined=False
        )

    @property
    def waiting(self) -> bool:
        return self.state.status == AggregatorStatus.WAITING

    @property
    def satisfied(self) -> bool:
        return self.join.satisfied

    def time_left(self, now: datetime) -> timedelta:
        return max(self.deadline - now, timedelta())

    def deadline_summary(self, *, dated: bool = True) -> str:
        """What the deadline timer is shown as in the UI."""
        after = f"{format_duration(self.spec.timeout)} after start"
        return (
            f"deadline: {self.deadline:%Y-%m-%d %H:%M:%S} UTC ({after})"
            if dated
            else f"deadline: {after}"
        )

    def arrived(self) -> None:
        """An event reached it by signal: counted before anything else is known of it."""
        self.state.received += 1

    def offer(self, envelope: EventEnvelope, clock: Callable[[], datetime]) -> bool:
        """While it waits: a duplicate, an event of another correlation (unmatched), or one
        offered to the join (which fills a slot, or matches none). True: it matched a slot.
        `clock` gives the arrival time, asked only of an event of a type a slot awaits: in a
        flood most match none, and the workflow's clock costs more than the rest of their
        handling."""
        header = envelope.event
        scope = self.spec.correlation_id
        if header.id in self._seen:
            self.state.duplicates += 1
            return False
        self._remember(header.id)
        if scope is not None and header.correlation_id not in (None, scope):
            self.state.unmatched += 1
            return False
        if header.type not in self._awaited:
            self.state.unmatched += 1
            return False
        if self.join.offer(envelope, clock()) == "unmatched":
            self.state.unmatched += 1
            return False
        self.state.matched += 1
        return True

    def looked_back(self, recorded: list[EventEnvelope], now: datetime) -> list[EventEnvelope]:
        """The chain's earlier events, oldest first; lifecycle notices are not events to join.
        Returns those that matched a slot."""
        matched = []
        for envelope in sorted(recorded, key=lambda e: e.event.timestamp):
            if envelope.event.type not in LIFECYCLE_NOTICES:
                self.state.received += 1
                if self.offer(envelope, lambda: now):
                    matched.append(envelope)
        return matched

    def lookback_failed(self, message: str) -> None:
        """The chain could not be read: recorded, and the join goes on with the live events."""
        self.state.lookback_failure = message

    def after_end(self, envelope: EventEnvelope, *, addressed: bool, settled: bool) -> str | None:
        """An event heard after the end: counted (a duplicate; one its chain only forwarded, or
        a lifecycle notice), or the reason to park it (None: nothing to park). Runs recorded
        before the deadline-first order (`settled` False) parked every one."""
        header = envelope.event
        if settled and header.id in self._seen:
            self.state.duplicates += 1
        elif settled and (not addressed or header.type in LIFECYCLE_NOTICES):
            self.state.ignored_after_finish += 1
        else:
            reason = f"event {header.id} ({header.type}): the aggregator ended"
            self.reject(reason)
            return reason
        return None

    def reject(self, reason: str) -> None:
        """An event refused (invalid, or addressed to it after the end): the latest are kept."""
        self.state.rejected_count += 1
        self.state.rejected.append(reason)
        del self.state.rejected[:-REJECTED_WINDOW]

    def outcome(self, *, cancelled: bool) -> AggregatorStatus:
        """How the wait ended: the join complete (even if a cancel or the deadline landed with
        its last event), cancelled, or timed out."""
        if self.join.satisfied:
            return AggregatorStatus.COMPLETED
        return AggregatorStatus.CANCELLED if cancelled else AggregatorStatus.TIMED_OUT

    def finish(self, status: AggregatorStatus) -> EventEnvelope | None:
        """The end: `on_complete` or `on_timeout` is emitted (nothing when cancelled), carrying
        the joined events and what is missing, caused by the latest arrival."""
        self.state.status = status
        if status == AggregatorStatus.CANCELLED:
            return None
        completed = status == AggregatorStatus.COMPLETED
        arrivals = sorted(self.join.received.values(), key=lambda a: a.received_at)
        self.state.emitted = EventEnvelope.new(
            self.spec.on_complete if completed else self.spec.on_timeout,
            f"/aggregator/{self.spec.aggregator_id}",
            payload=aggregation_payload(self.spec, self.join),
            correlation_id=self.spec.correlation_id,
            causation_id=arrivals[-1].event_id if arrivals else None,
        )
        return self.state.emitted

    def published(self) -> None:
        """The emitted event reached the correlation's chain."""
        self.state.published_to_chain = True

    def continue_as_new_due(self, suggested: bool) -> bool:
        """Only once joined to its chain: a continued run does not attach or look back again."""
        return self.chain_joined and suggested

    def carry(self) -> AggregatorInput:
        """The next run's input: the spec and everything the join has so far."""
        carried = AggregatorCarry(
            state=self.state,
            join=self.join,
            deadline=self.deadline,
            seen=list(self._seen)[-SEEN_WINDOW:],
            chain_joined=self.chain_joined,
        )
        return AggregatorInput(spec=self.spec, carried=carried)

    def record(self) -> AggregatorState:
        """The status table: each expected event, the count line, the deadline. The time left is
        the reader's to add (`AggregatorState.as_of`): only it knows the time it reads at."""
        return self.state.model_copy(
            update={
                "slots": self._slot_table(),
                "progress": self.progress(),
                "deadline": self.deadline,
                "seconds_left": None,
            }
        )

    def progress(self) -> str:
        count = f"{len(self.join.received)}/{len(self.spec.wait_for)} events received"
        if self.join.needed < len(self.spec.wait_for):
            count += f" ({self.join.needed} needed)"
        missing = ", ".join(slot.describe() for slot in self.join.missing)
        if self.waiting and missing:
            return f"{count}, waiting for {missing}"
        return f"{count}; {self.state.status.value}"

    def details(self) -> str:
        """The run's current details in the UI (markdown)."""
        lines = [self.progress(), f"**Deadline:** {self.deadline:%Y-%m-%d %H:%M:%S} UTC"]
        if self.state.lookback_failure:
            lines.append(f"**Lookback failed:** {self.state.lookback_failure}")
        return "\n\n".join(lines)

    def _remember(self, event_id: str) -> None:
        self._seen[event_id] = None
        if len(self._seen) > 2 * SEEN_WINDOW:
            self._seen = dict.fromkeys(list(self._seen)[-SEEN_WINDOW:])

    def _slot_table(self) -> list[SlotStatus]:
        rows = []
        for index, slot in enumerate(self.spec.wait_for):
            arrival = self.join.received.get(index)
            rows.append(
                SlotStatus(
                    type=slot.type,
                    source=slot.source,
                    status="received" if arrival else "waiting",
                    received_at=arrival.received_at if arrival else None,
                    event_id=arrival.event_id if arrival else None,
                )
            )
        return rows
