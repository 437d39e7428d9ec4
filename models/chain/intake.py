"""How events come into a chain and what they start: one queue, admission, rejection, the
timeline, and matching.

Every event enters the queue once: a signal's (its JSON text, decoded when a workflow task takes
it, a bounded number a task; or decoded already, when it came in another encoding), or one the
chain publishes itself (an agent run's). The queue hands them out in that order of lanes: the
decoded ones first (`inbox`), then the texts still to decode (`arrivals`), as runs recorded
before took them. Each taken event is admitted (deduplicated, its correlation and causation
depth checked) and recorded in the timeline, or rejected: counted, kept in a window and parked.
Both lanes are part of the record, so what waits is carried across continue-as-new.

A recorded event is then matched (`ChainMatching`): the subscriptions it fits (topic, type, CEL
filter), the joins it completes, each a run to queue, and the alert policy it pauses or resumes
the chain by. A dead letter replayed (`rerun`) names its subscription instead."""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from coord.models.chain.boundary import (
    Outbox,
    ParkDetails,
    Parking,
    Rejection,
    RunContext,
    Undecodable,
)
from coord.models.chain.budget import RunBudget
from coord.models.chain.spec import (
    ChainCarry,
    ChainSpec,
    ChainStatus,
    RejectedEvent,
    RerunRequest,
    Subscription,
    replayed_inputs,
    run_idempotency_key,
)
from coord.models.events.envelope import LIFECYCLE_NOTICES, EventEnvelope
from coord.models.events.filters import evaluate
from coord.models.events.taxonomy import announcement_depth, is_announcement
from coord.models.events.timeline import TimelineEntry
from coord.models.wire.contract import FailureType
from coord.models.wire.sizes import ByteBudget, json_size, newest_within, preview
from coord.models.wire.versions import CHAIN_TAKES_ANNOUNCEMENTS_PATCH, LIFECYCLE_NOTICES_PATCH

TIMELINE_WINDOW = 200
TIMELINE_BYTES = 8 * 1024 * 1024
"""Payload bytes the timeline keeps (and carries across continue-as-new) at most; the carry goes
to the payload store by reference, but one run still holds it in memory and in its queries."""
SEEN_WINDOW = 1000
REJECTED_WINDOW = 20
EVENTS_PER_TASK = 100
"""What one workflow task takes in at most, with `BYTES_PER_WORKFLOW_TASK` of their payloads.
Each event may send commands (forwards to listeners, parking) whose payloads travel together in
the task's completion, which the server caps at 4 MB; a long task holds queries back, and one
past 2 s fails as a potential deadlock (a busy worker takes a few ms an event)."""

Admission = Literal["recorded", "duplicate"]
Arrival = str | EventEnvelope | Undecodable
"""A signal's event as it enters the queue: its JSON text, or what decoding it gave."""


@dataclass
class TaskShare:
    """What one workflow task has taken in so far: events, and a budget of their payloads."""

    taken: int = 0
    budget: ByteBudget = field(default_factory=ByteBudget)
    more: bool = False
    """Set when the share is spent with events still waiting: the next task takes them."""

    def full(self) -> bool:
        return self.taken >= EVENTS_PER_TASK or self.budget.full()


class ChainIntake:
    """Events in: the queue, admission, rejection, the timeline and its causation depths."""

    def __init__(
        self, record: ChainCarry, spec: ChainSpec, outbox: Outbox, context: RunContext
    ) -> None:
        self._record = record
        self._spec = spec
        self._outbox = outbox
        self._context = context
        self._timeline_bytes = sum(json_size(entry.payload) for entry in record.timeline)
        self.keep_after: Callable[[], int | None] = lambda: None
        """The sequence number after which rows are kept whatever the window (the log's rows
        not written yet; `ChainLog.keep_after`)."""
        self.numbers_rows = False
        """Set once the run starts: whether each row gets its `position` in the log (runs
        recorded before left it unset)."""
        self.budget = RunBudget(record, spec, SEEN_WINDOW)
        self._sized: tuple[EventEnvelope, int] | None = None
        """The last event taken and its payload's JSON bytes: told once, for the task's share
        and the timeline's bytes both."""

    def timeline_bytes(self) -> int:
        """The payload bytes the timeline holds now."""
        return self._timeline_bytes

    def receive(self, arrival: Arrival) -> None:
        """A signal's event enters the queue: its text waits to be decoded; one decoded already
        waits in the first lane, unless the chain is closing (then it is rejected)."""
        if isinstance(arrival, str):
            self._record.arrivals.append(arrival)
            return
        envelope = self._decoded(arrival)
        if envelope is None:
            return
        if self._record.closing:
            closing = self.ended(envelope, FailureType.CHAIN_CLOSING, "the chain is closing")
            self.reject(closing, envelope=envelope)
            return
        self._record.inbox.append(envelope)

    def publish(self, envelope: EventEnvelope, causes: list[str]) -> None:
        """An event the chain publishes (an agent run's) enters the queue's first lane; one
        caused by a join keeps all its causes for its timeline row."""
        if len(causes) > 1:
            self._record.joined_causes[envelope.event.id] = causes
        self._record.inbox.append(envelope)

    def taken_as_recorded(self, envelope: EventEnvelope) -> bool:
        """Whether this event is a rewound copy's past (it is then no longer waited for)."""
        recorded = self._record.recorded
        if recorded and envelope.event.id in recorded:
            recorded.remove(envelope.event.id)
            return True
        return False

    def waiting(self) -> bool:
        """Events wait to be taken: decoded, or signals not decoded yet."""
        return bool(self._record.inbox or self._record.arrivals)

    def take(self, share: TaskShare) -> EventEnvelope | None:
        """The next waiting event, counted in the task's share; None for a signal that did not
        decode (rejected)."""
        share.taken += 1
        if self._record.inbox:
            envelope: EventEnvelope | None = self._record.inbox.pop(0)
        else:
            envelope = self._decoded(self._context.decode(self._record.arrivals.pop(0)))
        if envelope is not None:
            share.budget.spend(self._payload_bytes(envelope))
        return envelope

    def _payload_bytes(self, envelope: EventEnvelope) -> int:
        if self._sized is None or self._sized[0] is not envelope:
            self._sized = (envelope, json_size(envelope.payload))
        return self._sized[1]

    def refuse_waiting(self) -> None:
        """Every waiting event of a chain that has ended is rejected and parked, never dropped
        (the signals still to decode are decoded first)."""
        arrivals, self._record.arrivals = self._record.arrivals, []
        decoded = [self._decoded(self._context.decode(text)) for text in arrivals]
        waiting = [*self._record.inbox, *(e for e in decoded if e is not None)]
        self._record.inbox.clear()
        for envelope in waiting:
            self.reject(
                self.ended(envelope, FailureType.CHAIN_ENDED, "the chain has ended"),
                envelope=envelope,
            )

    def admit(self, envelope: EventEnvelope) -> Admission | Rejection:
        """Deduplicates, checks the correlation and the causation depth, then records the event
        in the timeline (it is then matched)."""
        header = envelope.event
        if self.seen(header.id):
            self._record.state.received += 1
            self._record.state.duplicates += 1
            return "duplicate"
        rejection = self.screen(envelope)
        if rejection is not None:
            return rejection
        if header.correlation_id is None:
            header.correlation_id = self._record.state.correlation_id
        self._record.state.received += 1
        self.remember(envelope, self.depth(envelope))
        if header.type == self._spec.terminal_event:
            self._record.state.terminal_seen = True
        return "recorded"

    def seen(self, event_id: str) -> bool:
        """The chain has taken this event id in already (within `SEEN_WINDOW`)."""
        return event_id in self._record.depths

    def screen(self, envelope: EventEnvelope) -> Rejection | None:
        """Why admitting the event would reject it (another correlation's, or a probable
        causation loop), changing nothing: an acknowledged publish's validator refuses with it."""
        header = envelope.event
        correlation_id = self._record.state.correlation_id
        if header.correlation_id not in (None, correlation_id):
            return Rejection(
                FailureType.FOREIGN_CORRELATION,
                f"event {header.id}: correlation_id {header.correlation_id!r} is not this "
                f"chain's ({correlation_id!r})",
            )
        depth = self.depth(envelope)
        if depth > self._spec.max_causation_depth:
            path = " ← ".join(self._causation_path(header.causation_id))
            return Rejection(
                FailureType.CAUSATION_LOOP,
                f"event {header.id} ({header.type}): causation depth {depth} exceeds "
                f"{self._spec.max_causation_depth}, a probable loop; path: {header.type} ← {path}",
                depth,
            )
        if not self.budget.enabled:
            return None
        return self.budget.refusal(envelope, self._announced(envelope), depth)

    def seq_of(self, event_id: str) -> int | None:
        """The timeline number the event got, while the timeline window keeps its row."""
        for entry in reversed(self._record.timeline):
            if entry.event_id == event_id:
                return entry.seq
        return None

    def reject(
        self, rejection: Rejection, *, envelope: EventEnvelope | None = None, raw: Any = None
    ) -> None:
        """Counts an event received and rejected, keeps it in the record's window and parks it,
        but a lifecycle notice (recorded only: parking it would announce another; runs
        recorded before parked those too) or a plan's or vote's announcement (the pattern's
        own record has it)."""
        notice = envelope is not None and envelope.event.type in LIFECYCLE_NOTICES
        parked = not (notice and self._context.patched(LIFECYCLE_NOTICES_PATCH))
        if envelope is not None and self._announced(envelope):
            parked = False
        state = self._record.state
        state.received += 1
        state.rejected_count += 1
        if envelope is not None and rejection.depth is not None:
            self._record.depths[envelope.event.id] = rejection.depth
        event_id = envelope.event.id if envelope else None
        rejected = RejectedEvent(
            time=self._context.now(), reason=rejection.reason, event_id=event_id, raw=preview(raw)
        )
        state.rejected.append(rejected)
        del state.rejected[:-REJECTED_WINDOW]
        if parked:
            state.dead_lettered += 1
            details = ParkDetails(event=envelope, raw=raw, causation_depth=rejection.depth)
            self._outbox.put(Parking(rejection.kind, rejection.reason, details))

    def ended(self, envelope: EventEnvelope, kind: str, why: str) -> Rejection:
        """The rejection of an event that arrives while the chain is closing or has ended."""
        return Rejection(kind, f"event {envelope.event.id}: {why}", self.depth(envelope))

    def depth(self, envelope: EventEnvelope) -> int:
        """How many causes lead to this event; 0 for an event whose cause is unknown here. A
        lifecycle notice about an event this chain no longer remembers carries that event's
        depth; an announcement adds no depth to its cause's (`announcement_depth`)."""
        cause = envelope.event.causation_id
        if cause is None:
            return 0
        depth = self._record.depths.get(cause)
        if self._announced(envelope):
            return announcement_depth(envelope, depth)
        carried = envelope.payload.get("causation_depth")
        if depth is None and envelope.event.type in LIFECYCLE_NOTICES and isinstance(carried, int):
            depth = carried
        return 0 if depth is None else depth + 1

    def _announced(self, envelope: EventEnvelope) -> bool:
        """A plan's or vote's announcement, in a run that takes them as such."""
        return is_announcement(envelope) and self._context.patched(CHAIN_TAKES_ANNOUNCEMENTS_PATCH)

    def remember(self, envelope: EventEnvelope, depth: int) -> None:
        """The event's row in the timeline, its depth and cause; the windows trimmed when they
        reach twice their size (`TIMELINE_WINDOW`, `TIMELINE_BYTES`, `SEEN_WINDOW`)."""
        record, header = self._record, envelope.event
        record.seq += 1
        record.state.events_seen += 1
        record.depths[header.id] = depth
        record.causes[header.id] = header.causation_id
        if self.budget.enabled:
            self.budget.remember(envelope, self._announced(envelope))
        record.timeline.append(
            TimelineEntry.recording(
                envelope,
                seq=record.seq,
                correlation_id=record.state.correlation_id,
                causes=record.joined_causes.pop(header.id, None),
                position=record.state.events_seen if self.numbers_rows else None,
            )
        )
        self._timeline_bytes += self._payload_bytes(envelope)
        if len(record.timeline) > 2 * TIMELINE_WINDOW or self._timeline_bytes > 2 * TIMELINE_BYTES:
            record.timeline = timeline_window(record.timeline, self.keep_after())
            self._timeline_bytes = sum(json_size(entry.payload) for entry in record.timeline)
        if len(record.depths) > 2 * SEEN_WINDOW:
            for stale in list(record.depths)[:-SEEN_WINDOW]:
                del record.depths[stale]
                record.causes.pop(stale, None)
                self.budget.forget(stale)

    def carried(self) -> dict[str, Any]:
        """The causes, depths and first causes the next run carries: the newest of each."""
        record = self._record
        return {
            "causes": dict(list(record.causes.items())[-SEEN_WINDOW:]),
            "depths": dict(list(record.depths.items())[-SEEN_WINDOW:]),
            **self.budget.carried(),
        }

    def _decoded(self, arrival: EventEnvelope | Undecodable) -> EventEnvelope | None:
        if isinstance(arrival, Undecodable):
            rejection = Rejection(FailureType.INVALID_ENVELOPE, arrival.reason)
            self.reject(rejection, raw=arrival.raw)
            return None
        return arrival

    def _causation_path(self, event_id: str | None) -> list[str]:
        types = {entry.event_id: entry.event for entry in self._record.timeline}
        path: list[str] = []
        while event_id is not None and len(path) <= self._spec.max_causation_depth:
            path.append(types.get(event_id, event_id))
            event_id = self._record.causes.get(event_id)
        return path


def timeline_window(
    timeline: list[TimelineEntry], keep_after: int | None = None
) -> list[TimelineEntry]:
    """The newest rows a chain keeps: `TIMELINE_WINDOW` rows and `TIMELINE_BYTES` of payload,
    and every row after sequence `keep_after` (not yet in the log) besides."""
    window = newest_within(
        timeline, TIMELINE_WINDOW, TIMELINE_BYTES, lambda entry: json_size(entry.payload)
    )
    if keep_after is None:
        return window
    unwritten = [entry for entry in timeline if entry.seq > keep_after]
    return unwritten if len(unwritten) > len(window) else window


@dataclass(frozen=True)
class Fired:
    """A subscription an event completed the join of (or a dead letter replayed): its run's
    causes (the join's events, in order), inputs (each event's payload by type), and for a
    replay, the idempotency key it runs again under."""

    subscription: Subscription
    causes: list[str]
    inputs: dict[str, Any]
    idempotency_key: str | None = None


class ChainMatching:
    """Events to runs: subscriptions, filters, joins, alerts and reruns."""

    def __init__(
        self,
        record: ChainCarry,
        spec: ChainSpec,
        workflow_id: str,
        intake: ChainIntake,
    ) -> None:
        self._record = record
        self._spec = spec
        self._workflow_id = workflow_id
        self._intake = intake
        self._viewed: tuple[EventEnvelope, dict[str, Any]] | None = None
        """The last event the filters read and its JSON form: dumped once for its alert and
        every subscription's filter, not once a filter."""

    def match(self, envelope: EventEnvelope, now: datetime) -> list[Fired]:
        """Offers a recorded event to each subscription it fits: the joins it completes, each
        a run of the subscription's agent to queue, in the spec's order."""
        fired = []
        for subscription in self._spec.subscriptions:
            if self._subscribed(subscription, envelope):
                join = self._record.joins[subscription.name]
                join.offer(envelope, now)
                if join.satisfied:
                    inputs = join.inputs()
                    causes = [arrival.event_id for arrival in join.fire()]
                    fired.append(Fired(subscription, causes, inputs))
        return fired

    def apply_alerts(self, envelope: EventEnvelope, *, resolutions_never_pause: bool) -> bool:
        """Pauses new agent work on an alert, resumes it on its resolution; returns whether the
        status was set. (In runs recorded before lifecycle notices, a resolution that arrives
        while running and also matches the alert pauses the chain.)"""
        policy = self._spec.alerts
        if policy is None:
            return False
        state = self._record.state
        resumes = envelope.event.type in policy.resume_on
        if resumes and state.status == ChainStatus.PAUSED:
            state.status = ChainStatus.RUNNING
            state.pause_reason = None
            return True
        if resumes and resolutions_never_pause:
            return False
        if envelope.routing.topic == policy.topic and self._passes(policy.pause_when, envelope):
            state.status = ChainStatus.PAUSED
            state.pause_reason = f"{envelope.event.type} ({envelope.event.id})"
            return True
        return False

    def rerun(self, request: RerunRequest) -> Fired | None:
        """A dead letter replayed: the subscription's agent runs again on the (fixed) event,
        which counts its depth from the event it replays (the run to queue); an unknown
        subscription is rejected (None)."""
        try:
            subscription = self._spec.subscription(request.subscription)
        except KeyError:
            reason = f"rerun: unknown subscription {request.subscription!r}"
            self._intake.reject(
                Rejection(FailureType.INVALID_RERUN, reason), envelope=request.event
            )
            return None
        self._record.state.received += 1
        replayed = request.event.event
        self._intake.remember(
            request.event, self._record.depths.get(replayed.causation_id or "", 0)
        )
        key = request.idempotency_key or run_idempotency_key(
            self._workflow_id, subscription.name, replayed.causation_id or replayed.id
        )
        return Fired(subscription, [replayed.id], replayed_inputs(request), key)

    def waiting(self) -> list[str]:
        """The joins that have some of their events and wait for the rest."""
        return [
            f"{name} waits for {', '.join(slot.describe() for slot in join.missing)}"
            for name, join in self._record.joins.items()
            if join.needed > 1 and join.received
        ]

    def _subscribed(self, subscription: Subscription, envelope: EventEnvelope) -> bool:
        topic = envelope.routing.topic
        if subscription.topic and topic and subscription.topic != topic:
            return False
        if envelope.event.type not in subscription.events:
            return False
        return subscription.filter is None or self._passes(subscription.filter, envelope)

    def _passes(self, expression: str, envelope: EventEnvelope) -> bool:
        """A filter that cannot be evaluated on this event does not match it; the error is
        counted in the chain's state, never raised."""
        outcome = evaluate(expression, self._as_json(envelope))
        if outcome.error:
            self._record.state.filter_errors += 1
            self._record.state.last_filter_error = (
                f"event {envelope.event.id}: filter {expression!r}: {outcome.error}"
            )
        return outcome.matched

    def _as_json(self, envelope: EventEnvelope) -> dict[str, Any]:
        """The event as filters read it, dumped once an event (the last one's is kept: every
        filter is evaluated while the event is taken in, after its admission set it)."""
        if self._viewed is None or self._viewed[0] is not envelope:
            self._viewed = (envelope, envelope.model_dump(mode="json"))
        return self._viewed[1]
