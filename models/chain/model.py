"""The reactive chain's bookkeeping, apart from Temporal: intake (deduplication and the causation
depth window), the timeline, matching events to subscriptions and their joins, the run queue,
the alert pause, the accounting of `ChainState` and the carry for continue-as-new. Pure and
serialisable like `JoinState`: its fields are the carry, so it is tested without a server, and
the workflow (`coord.workflows.chain.reactive`) keeps only signals, activities, parking, forwarding,
timers, continue-as-new and its details. Nothing here sends or waits: what is to be parked comes
back as a `Parking`, for the workflow to send."""

import hashlib
import heapq
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict

from pydantic import PrivateAttr

from coord.models.chain.spec import (
    AgentRun,
    ChainCarry,
    ChainInput,
    ChainSpec,
    ChainState,
    ChainStatus,
    QueuedRun,
    RejectedEvent,
    RerunRequest,
    RunAssignment,
    Subscription,
    replayed_inputs,
    run_idempotency_key,
)
from coord.models.events.envelope import LIFECYCLE_NOTICES, EventEnvelope, Priority
from coord.models.events.filters import evaluate
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentRequest, AgentResult
from coord.models.mesh.assignment import Assignment
from coord.models.mesh.runs import RunDetour, kept
from coord.models.vote.spec import VoteSpec, VoteState
from coord.models.wire.contract import (
    FailureType,
    SearchValues,
    correlation_id_of_chain,
)
from coord.models.wire.sizes import json_size, newest_within, preview
from coord.models.wire.specs import MAX_NAME

PRIORITY_RANK = {Priority.CRITICAL: 0, Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}
TIMELINE_WINDOW = 200
TIMELINE_BYTES = 8 * 1024 * 1024
"""Payload bytes the timeline keeps (and carries across continue-as-new) at most; the carry goes
to the payload store by reference, but one run still holds it in memory and in its queries."""
SEEN_WINDOW = 1000
REJECTED_WINDOW = 20
ASSIGNMENT_WINDOW = 20

Admission = Literal["recorded", "duplicate"]


@dataclass(frozen=True)
class Rejection:
    """Why an event is not handled; the workflow records it here and parks the event."""

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
    replay: Literal["signal", "rerun", "run_agent"]
    idempotency_key: str | None
    inputs: dict[str, Any]
    causation_depth: int | None


@dataclass(frozen=True)
class Parking:
    """What the workflow hands to the dead-letter queue: the arguments of its `park`."""

    failure_type: str
    message: str
    details: ParkDetails


class ChainModel(ChainCarry):
    """A chain's bookkeeping; `begin` makes it from the chain's input, `carry` gives the next
    run's input. The queue is a heap of `QueuedRun` (priority, then arrival)."""

    _spec: ChainSpec = PrivateAttr()
    _workflow_id: str = PrivateAttr()
    _signals_per_run: int = PrivateAttr()
    _timeline_bytes: int = PrivateAttr()
    _running: dict[int, AgentRun] = PrivateAttr()
    """Runs started here, by their queue number, not handed over: never carried (the run
    continues as new when none is left)."""
    _unconfirmed: set[int] = PrivateAttr()
    """Runs handed over whose `ChainRun` has not been confirmed started: continue-as-new waits
    for those too, so a start that fails is still this run's to handle."""

    @classmethod
    def begin(cls, chain_input: ChainInput, workflow_id: str) -> "ChainModel":
        """A new chain's model, or the one its previous run carried."""
        spec = chain_input.spec
        carried = chain_input.carried or ChainCarry(
            state=ChainState(correlation_id=chain_input.correlation_id, spec=spec.name),
            seq=0,
            timeline=[],
            causes={},
            depths={},
            joins={s.name: s.new_join() for s in spec.subscriptions},
            inbox=[],
            queue=[],
        )
        model = cls.model_construct(**dict(carried))
        heapq.heapify(model.queue)
        model._spec = spec
        model._workflow_id = workflow_id
        model._signals_per_run = chain_input.signals_per_run
        model._timeline_bytes = sum(json_size(entry.payload) for entry in model.timeline)
        model._running = {}
        model._unconfirmed = set()
        return model

    def admit(self, envelope: EventEnvelope) -> Admission | Rejection:
        """Deduplicates, checks the correlation and the causation depth, then records the event
        in the timeline (the workflow then applies alerts and matches it)."""
        header = envelope.event
        if header.id in self.depths:
            self.state.received += 1
            self.state.duplicates += 1
            return "duplicate"
        correlation_id = self.state.correlation_id
        if header.correlation_id is None:
            header.correlation_id = correlation_id
        if header.correlation_id != correlation_id:
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
        self.state.received += 1
        self._remember(envelope, depth)
        if header.type == self._spec.terminal_event:
            self.state.terminal_seen = True
        return "recorded"

    def match(self, envelope: EventEnvelope, now: datetime) -> None:
        """Offers a recorded event to each subscription it fits; a join it completes queues a
        run of the subscription's agent."""
        for subscription in self._spec.subscriptions:
            if self._subscribed(subscription, envelope):
                join = self.joins[subscription.name]
                join.offer(envelope, now)
                if join.satisfied:
                    inputs = join.inputs()
                    causes = [arrival.event_id for arrival in join.fire()]
                    self._enqueue(subscription, envelope, causes, inputs=inputs)

    def rerun(self, request: RerunRequest) -> Rejection | None:
        """A dead letter replayed: the subscription's agent runs again on the (fixed) event."""
        try:
            subscription = self._spec.subscription(request.subscription)
        except StopIteration:
            reason = f"rerun: unknown subscription {request.subscription!r}"
            return Rejection(FailureType.INVALID_RERUN, reason)
        self.state.received += 1
        replayed = request.event.event
        self._remember(request.event, self.depths.get(replayed.causation_id or "", 0))
        key = request.idempotency_key or run_idempotency_key(
            self._workflow_id, subscription.name, replayed.causation_id or replayed.id
        )
        inputs = replayed_inputs(request)
        self._enqueue(
            subscription, request.event, [replayed.id], inputs=inputs, idempotency_key=key
        )
        return None

    def reject(
        self,
        rejection: Rejection,
        now: datetime,
        *,
        envelope: EventEnvelope | None = None,
        raw: Any = None,
        parked: bool,
    ) -> Parking | None:
        """Counts an event received and rejected, and parks it unless told not to (a lifecycle
        notice is recorded but not parked: parking it would announce another)."""
        self.state.received += 1
        self.state.rejected_count += 1
        if envelope is not None and rejection.depth is not None:
            self.depths[envelope.event.id] = rejection.depth
        event_id = envelope.event.id if envelope else None
        self.state.rejected.append(
            RejectedEvent(time=now, reason=rejection.reason, event_id=event_id, raw=preview(raw))
        )
        del self.state.rejected[:-REJECTED_WINDOW]
        if not parked:
            return None
        self.state.dead_lettered += 1
        details = ParkDetails(event=envelope, raw=raw, causation_depth=rejection.depth)
        return Parking(rejection.kind, rejection.reason, details)

    def ended(self, envelope: EventEnvelope, kind: str, why: str) -> Rejection:
        """The rejection of an event that arrives while the chain is closing or has ended."""
        return Rejection(kind, f"event {envelope.event.id}: {why}", self.depth(envelope))

    def depth(self, envelope: EventEnvelope) -> int:
        """How many causes lead to this event; 0 for an event whose cause is unknown here. A
        lifecycle notice about an event this chain no longer remembers carries that event's
        depth."""
        cause = envelope.event.causation_id
        if cause is None:
            return 0
        depth = self.depths.get(cause)
        carried = envelope.payload.get("causation_depth")
        if depth is None and envelope.event.type in LIFECYCLE_NOTICES and isinstance(carried, int):
            depth = carried
        return 0 if depth is None else depth + 1

    def apply_alerts(self, envelope: EventEnvelope, *, resolutions_never_pause: bool) -> bool:
        """Pauses new agent work on an alert, resumes it on its resolution; returns whether the
        status was set. (In runs recorded before lifecycle notices, a resolution that arrives
        while running and also matches the alert pauses the chain.)"""
        policy = self._spec.alerts
        if policy is None:
            return False
        resumes = envelope.event.type in policy.resume_on
        if resumes and self.state.status == ChainStatus.PAUSED:
            self.state.status = ChainStatus.RUNNING
            self.state.pause_reason = None
            return True
        if resumes and resolutions_never_pause:
            return False
        if envelope.routing.topic == policy.topic and self._passes(policy.pause_when, envelope):
            self.state.status = ChainStatus.PAUSED
            self.state.pause_reason = f"{envelope.event.type} ({envelope.event.id})"
            return True
        return False

    def _publish(self, event_type: str, run: AgentRun, payload: dict[str, Any]) -> None:
        """An event an agent run publishes joins the inbox, caused by the run's trigger."""
        envelope = self._published(event_type, run, payload)
        if len(run.causes) > 1:
            self.joined_causes[envelope.event.id] = run.causes
        self.inbox.append(envelope)

    def _published(self, event_type: str, run: AgentRun, payload: dict[str, Any]) -> EventEnvelope:
        trigger = run.trigger
        return EventEnvelope.new(
            event_type,
            f"/{run.agent}",
            payload=payload,
            correlation_id=self.state.correlation_id,
            causation_id=trigger.event.id,
            topic=self._spec.subscription(run.subscription).topic or trigger.routing.topic,
            priority=trigger.routing.priority,
        )

    def agent_request(self, run: AgentRun) -> AgentRequest:
        """What the `run_agent` activity gets for a run."""
        subscription = self._spec.subscription(run.subscription)
        return AgentRequest(
            agent=run.agent,
            event=run.trigger,
            retry_on=subscription.retry.retry_on,
            config=self._spec.agents.get(run.agent),
            idempotency_key=run.idempotency_key,
            inputs=run.inputs,
            tokens=self.state.tokens.allowance(self._spec.budget),
        )

    def run_assigned(self, run: AgentRun, assignment: Assignment) -> None:
        """A run of a subscription naming capabilities goes to the agent picked for it."""
        run.agent = assignment.agent
        picked = RunAssignment(
            subscription=run.subscription, event_id=run.trigger.event.id, assignment=assignment
        )
        self.state.assignments.append(picked)
        del self.state.assignments[:-ASSIGNMENT_WINDOW]

    def run_detoured(self, run: AgentRun, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run that waited for its agent or went elsewhere (kept in `detours`); one that went
        to another agent runs, and publishes, as that agent."""
        label = f"{run.subscription} ← {run.trigger.event.id}"
        self.state.detours = kept(self.state.detours, detour.model_copy(update={"run": label}))
        if assignment is not None:
            self.run_assigned(run, assignment)
        elif detour.to_agent is not None:
            run.agent = detour.to_agent

    def run_started(self, run: AgentRun) -> None:
        publishes = self._spec.subscription(run.subscription).publishes
        if publishes.on_start:
            self._publish(publishes.on_start, run, {"agent": run.agent})

    def run_failed(self, run: AgentRun, failure_type: str, error: str, attempts: int) -> Parking:
        """A run that failed for good is published as its failure event and parked, to be run
        again by a `rerun`."""
        publishes = self._spec.subscription(run.subscription).publishes
        if publishes.on_failure:
            self._publish(publishes.on_failure, run, {"error": error})
        self.state.dead_lettered += 1
        return self._run_parking(
            run,
            failure_type,
            f"{run.agent} failed on {run.trigger.event.type}: {error}",
            target_agent=run.subscription,
            attempt_count=attempts,
            replay="rerun",
        )

    def run_succeeded(
        self, run: AgentRun, result: AgentResult, refused: Collection[str] = ()
    ) -> list[tuple[Rejection, EventEnvelope]]:
        """The subscription's success events carry the result's data; the agent's own
        publications follow, but those of a `refused` type (`refused_types`), which come back
        as rejections for the workflow to record and park. Agent output is data: a
        prompt-injected model cannot make the chain publish what its subscription does not
        declare. (Runs recorded before the rule refuse nothing.) The run's tokens are counted
        in the chain's record."""
        self.state.tokens.add(result)
        for event_type in self._spec.subscription(run.subscription).publishes.on_success:
            self._publish(event_type, run, result.data)
        rejections = []
        for request in result.publish:
            if request.type not in refused:
                self._publish(request.type, run, request.payload)
                continue
            envelope = self._published(request.type, run, request.payload)
            rejections.append((self._not_allowed(run, result, envelope), envelope))
        return rejections

    def refused_types(self, run: AgentRun, result: AgentResult) -> set[str]:
        """The types among the agent's own publications that it may not publish: neither its
        subscription's `publishes` nor its declaration (`result.may_publish`) names them."""
        publishes = self._spec.subscription(run.subscription).publishes
        allowed = publishes.allowed(result.may_publish)
        if allowed is None:
            return set()
        return {request.type for request in result.publish} - allowed

    def _not_allowed(
        self, run: AgentRun, result: AgentResult, envelope: EventEnvelope
    ) -> Rejection:
        subscription = self._spec.subscription(run.subscription)
        allowed = sorted(subscription.publishes.allowed(result.may_publish) or [])
        return Rejection(
            FailureType.PUBLISH_NOT_ALLOWED,
            f"event {envelope.event.id}: {run.agent} (subscription {run.subscription}) may not "
            f"publish {envelope.event.type}; it may publish {', '.join(allowed) or 'nothing'} "
            "(declare the type in the subscription's `publishes.events` or the agent's "
            "`publishes`)",
            self.depth(envelope),
        )

    def vote_spec(self, run: AgentRun) -> VoteSpec:
        """The vote a vote subscription's run holds, its trigger's payload the proposal: id
        `<correlation_id>-<digest of the subscription and the trigger's event id>`, unique per
        run (a rerun's trigger is a new event) and from the run's input alone, so a replay
        elsewhere starts the same child. Raises SpecError when the payload is not a proposal a
        vote takes."""
        subscription = self._spec.subscription(run.subscription)
        assert subscription.vote is not None
        key = f"{run.subscription}/{run.trigger.event.id}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        correlation_id = self.state.correlation_id
        vote_id = f"{correlation_id[: MAX_NAME - len(digest) - 1]}-{digest}"
        return VoteSpec.of(
            vote_id,
            subscription.vote,
            run.trigger.payload,
            correlation_id=correlation_id,
            agents=self._spec.agents,
        )

    def vote_ended(self, run: AgentRun, vote: VoteState) -> None:
        """Decided publishes the subscription's success events, rejected or no quorum its
        failure event (with `error` saying how); each carries the vote's record, its ballots."""
        publishes = self._spec.subscription(run.subscription).publishes
        record = vote.model_dump(mode="json")
        failure = vote.failure()
        if failure is None:
            for event_type in publishes.on_success:
                self._publish(event_type, run, record)
        elif publishes.on_failure:
            self._publish(publishes.on_failure, run, {**record, "error": failure[1]})

    def can_dispatch(self) -> bool:
        """A run is queued, a slot is free (runs in flight hold theirs) and no alert holds the
        chain."""
        return (
            bool(self.queue)
            and len(self._running) + len(self.in_flight) < self._spec.max_concurrency
            and self.state.status != ChainStatus.PAUSED
        )

    def start_next(self) -> tuple[int, AgentRun]:
        """The queued run of the highest priority (then the earliest) moves to the running."""
        queued = heapq.heappop(self.queue)
        self._running[queued.seq] = queued.run
        return queued.seq, queued.run

    def finish(self, seq: int) -> None:
        """The run is done here: ended, or handed over."""
        self._running.pop(seq, None)

    def hand_over(self, seq: int) -> None:
        """The run goes to a `ChainRun` of its own: in flight (carried across continue-as-new)
        from now, its outcome awaited by signal; unconfirmed until its start is."""
        self.in_flight[seq] = self._running.pop(seq)
        self._unconfirmed.add(seq)

    def confirmed(self, seq: int) -> None:
        self._unconfirmed.discard(seq)

    def landed(self, seq: int) -> AgentRun | None:
        """The run in flight an outcome names, no longer in flight; None for none (an outcome
        that came already, or that no run of this chain sent)."""
        return self.in_flight.pop(seq, None)

    @property
    def signals_per_run(self) -> int:
        return self._signals_per_run

    @property
    def running(self) -> bool:
        """Runs this run holds: continue-as-new waits for them (not for runs in flight)."""
        return bool(self._running or self._unconfirmed)

    def take_queued(self) -> list[Parking]:
        """The runs a chain that ended (paused) never started, in queue order, parked so an
        operator can run them from the dead-letter queue: a run of a named agent runs it again;
        a vote's or a capability's run (no agent of its own yet) is a `rerun` of its
        subscription."""
        queued = [entry.run for entry in sorted(self.queue)]
        self.queue.clear()
        self.state.dead_lettered += len(queued)
        return [self._never_ran(run) for run in queued]

    def _never_ran(self, run: AgentRun) -> Parking:
        agent = self._spec.subscription(run.subscription).agent
        return self._run_parking(
            run,
            FailureType.CHAIN_ENDED,
            f"{run.agent} on {run.trigger.event.type} never ran: the chain ended "
            f"{self.state.status.value} while it was queued",
            target_agent=agent or run.subscription,
            replay="run_agent" if agent else "rerun",
        )

    def _run_parking(
        self,
        run: AgentRun,
        failure_type: str,
        message: str,
        *,
        target_agent: str,
        replay: Literal["rerun", "run_agent"],
        attempt_count: int = 1,
    ) -> Parking:
        """A run parked with its trigger, key and inputs, and the causation depth its replay
        counts from."""
        details = ParkDetails(
            event=run.trigger,
            target_agent=target_agent,
            attempt_count=attempt_count,
            replay=replay,
            idempotency_key=run.idempotency_key,
            inputs=run.inputs,
            causation_depth=self.depths.get(run.trigger.event.id),
        )
        return Parking(failure_type, message, details)

    def waiting(self) -> bool:
        """Events wait to be handled: in the inbox, or signals not decoded yet."""
        return bool(self.inbox or self.arrivals)

    def take_inbox(self) -> list[EventEnvelope]:
        waiting = list(self.inbox)
        self.inbox.clear()
        return waiting

    def close_idle(self) -> bool:
        """The idle timeout ends a chain with nothing running."""
        if self.running or self.in_flight:
            return False
        self.state.status = ChainStatus.IDLE_CLOSED
        return True

    def end(self) -> None:
        if self.state.status in (ChainStatus.RUNNING, ChainStatus.PAUSED):
            self.state.status = ChainStatus.CLOSED if self.closing else ChainStatus.COMPLETED

    def finished(self, outbound: int) -> bool:
        """Done: closed idle, or nothing left to do after the terminal event or a `close` (a
        paused chain that was closed leaves its queued runs to be parked)."""
        if self.state.status == ChainStatus.IDLE_CLOSED:
            return True
        idle = not self.running and not self.in_flight and not self.waiting() and not outbound
        stuck = self.state.status == ChainStatus.PAUSED
        if self.closing:
            return idle and (not self.queue or stuck)
        return self.state.terminal_seen and idle and not self.queue

    def attach(self, workflow_id: str) -> None:
        if workflow_id not in self.listeners:
            self.listeners.append(workflow_id)

    def detach(self, workflow_id: str) -> None:
        if workflow_id in self.listeners:
            self.listeners.remove(workflow_id)

    def snapshot(self) -> ChainState:
        """The chain's record as its `state` query answers."""
        return self.state.model_copy(
            update={
                "running": [
                    f"{r.agent} ← {r.trigger.event.type}"
                    for r in [*self._running.values(), *self.in_flight.values()]
                ],
                "waiting": self._waiting(),
                "queued": len(self.queue),
                "listeners": list(self.listeners),
            }
        )

    def status_attributes(self) -> SearchValues:
        """What the chain's run is found by in the UI (its record's, as the start sets them)."""
        return self.state.search_attributes()

    def details(self) -> str:
        """The text the Temporal UI shows for the chain."""
        state = self.snapshot()
        lines = [f"**Status:** {state.status.value} · **events seen:** {state.events_seen}"]
        if state.pause_reason:
            lines.append(f"**Paused by:** {state.pause_reason}")
        lines.append(f"**Running:** {', '.join(state.running) or 'none'}")
        lines.append(f"**Waiting:** {'; '.join(state.waiting) or 'none'}")
        if state.queued:
            lines.append(f"**Queued runs:** {state.queued}")
        if state.rejected:
            lines.append(f"**Rejected events:** {len(state.rejected)}")
        if state.assignments:
            latest = state.assignments[-1]
            lines.append(
                f"**Last picked by capability:** {latest.subscription} ← {latest.event_id}: "
                f"{latest.assignment.describe()}"
            )
        if state.detours:
            lines.append(f"**Last detour:** {state.detours[-1].describe()}")
        return "\n\n".join(lines)

    def carry(self) -> ChainInput:
        """What the next run starts from; windows trimmed, so its size does not grow with age."""
        return ChainInput(
            spec=self._spec,
            correlation_id=self.state.correlation_id,
            signals_per_run=self._signals_per_run,
            carried=self._carried(),
        )

    def _carried(self) -> ChainCarry:
        trimmed = {
            "state": self.snapshot(),
            "timeline": timeline_window(self.timeline),
            "causes": dict(list(self.causes.items())[-SEEN_WINDOW:]),
            "depths": dict(list(self.depths.items())[-SEEN_WINDOW:]),
        }
        return ChainCarry(**(dict(self) | trimmed))

    def _remember(self, envelope: EventEnvelope, depth: int) -> None:
        header = envelope.event
        self.seq += 1
        self.state.events_seen += 1
        self.depths[header.id] = depth
        self.causes[header.id] = header.causation_id
        self.timeline.append(
            TimelineEntry.recording(
                envelope,
                seq=self.seq,
                correlation_id=self.state.correlation_id,
                causes=self.joined_causes.pop(header.id, None),
            )
        )
        self._timeline_bytes += json_size(envelope.payload)
        if len(self.timeline) > 2 * TIMELINE_WINDOW or self._timeline_bytes > 2 * TIMELINE_BYTES:
            self.timeline = timeline_window(self.timeline)
            self._timeline_bytes = sum(json_size(entry.payload) for entry in self.timeline)
        if len(self.depths) > 2 * SEEN_WINDOW:
            for stale in list(self.depths)[:-SEEN_WINDOW]:
                del self.depths[stale]
                self.causes.pop(stale, None)

    def _causation_path(self, event_id: str | None) -> list[str]:
        types = {entry.event_id: entry.event for entry in self.timeline}
        path: list[str] = []
        while event_id is not None and len(path) <= self._spec.max_causation_depth:
            path.append(types.get(event_id, event_id))
            event_id = self.causes.get(event_id)
        return path

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
        outcome = evaluate(expression, envelope.model_dump(mode="json"))
        if outcome.error:
            self.state.filter_errors += 1
            self.state.last_filter_error = (
                f"event {envelope.event.id}: filter {expression!r}: {outcome.error}"
            )
        return outcome.matched

    def _enqueue(
        self,
        subscription: Subscription,
        trigger: EventEnvelope,
        causes: list[str],
        *,
        inputs: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        self.seq += 1
        key = idempotency_key or run_idempotency_key(
            self._workflow_id, subscription.name, trigger.event.id
        )
        run = AgentRun(
            subscription=subscription.name,
            agent=subscription.agent or subscription.name,
            trigger=trigger,
            causes=causes,
            inputs=inputs or {},
            idempotency_key=key,
        )
        rank = PRIORITY_RANK[trigger.routing.priority]
        heapq.heappush(self.queue, QueuedRun(rank=rank, seq=self.seq, run=run))

    def _waiting(self) -> list[str]:
        return [
            f"{name} waits for {', '.join(slot.describe() for slot in join.missing)}"
            for name, join in self.joins.items()
            if join.needed > 1 and join.received
        ]


def timeline_window(timeline: list[TimelineEntry]) -> list[TimelineEntry]:
    """The newest rows a chain keeps: `TIMELINE_WINDOW` rows and `TIMELINE_BYTES` of payload."""
    return newest_within(
        timeline, TIMELINE_WINDOW, TIMELINE_BYTES, lambda entry: json_size(entry.payload)
    )


def standin_input(workflow_id: str) -> ChainInput:
    """What a chain whose input does not validate holds until `run` reports the error: no
    subscriptions, nothing to do."""
    return ChainInput.model_construct(
        spec=ChainSpec.model_construct(name="invalid", subscriptions=[], triggers=[]),
        correlation_id=correlation_id_of_chain(workflow_id),
    )
