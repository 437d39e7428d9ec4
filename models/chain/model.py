"""A reactive chain's model, apart from Temporal: its record (`ChainCarry`: what it carries
across continue-as-new, so it is tested without a server) and the parts that decide on it, each
one job: `ChainIntake` (events in) and `ChainMatching` (events to runs), in one module; `ChainRuns`
and `RunOutcomes` (the runs and what they publish), `ChainPacing` (its budgets). The workflow
(`coord.workflows.chain.reactive`) hands each event to it once and sends what it decides
(`boundary.Outbox`); it keeps only signals, timers, starting runs and continue-as-new."""

from coord.models.chain.boundary import (
    Forward,
    Outbox,
    Rejection,
    RunContext,
    StatusChanged,
)
from coord.models.chain.intake import (
    Admission,
    Arrival,
    ChainIntake,
    ChainMatching,
    TaskShare,
    timeline_window,
)
from coord.models.chain.log import ChainLog
from coord.models.chain.outcomes import RunOutcomes
from coord.models.chain.pacing import ChainPacing
from coord.models.chain.runs import ChainRuns
from coord.models.chain.spec import (
    ChainCarry,
    ChainInput,
    ChainSpec,
    ChainState,
    ChainStatus,
    RecordedEvents,
    RerunRequest,
)
from coord.models.events.envelope import LIFECYCLE_NOTICES, EventEnvelope
from coord.models.wire.contract import (
    CHAIN_EVENT_SIGNAL,
    EVENT_SIGNAL,
    FailureType,
    PublishAnswer,
    SearchValues,
    correlation_id_of_chain,
)
from coord.models.wire.versions import (
    COPY_ENDS_AFTER_ITS_HAND_OVER_PATCH,
    FLOOD_PATCH,
    LIFECYCLE_NOTICES_PATCH,
    REWIND_COMPLETE_PATCH,
)


class ChainModel:
    """A chain's record and its parts; made from the chain's input (a new chain's, or the one
    its previous run carried), `carry` gives the next run's input."""

    def __init__(self, chain_input: ChainInput, workflow_id: str, context: RunContext) -> None:
        spec = chain_input.spec
        self.spec = spec
        self.record = chain_input.carried or ChainCarry(
            state=ChainState(
                correlation_id=chain_input.correlation_id,
                spec=spec.name,
                rewind_of=chain_input.rewind_of.search_value() if chain_input.rewind_of else None,
            ),
            seq=0,
            timeline=[],
            causes={},
            depths={},
            joins={s.name: s.new_join() for s in spec.subscriptions},
            inbox=[],
            queue=[],
        )
        self.outbox = Outbox()
        self.intake = ChainIntake(self.record, spec, self.outbox, context)
        self.outcomes = RunOutcomes(self.record, spec, self.intake, self.outbox, context)
        self.runs = ChainRuns(self.record, spec, workflow_id, self.outcomes, self.intake.budget)
        self.matching = ChainMatching(self.record, spec, workflow_id, self.intake)
        self.pacing = ChainPacing(chain_input.signals_per_run, self.runs, context)
        self.log = ChainLog(self.record, self.intake.timeline_bytes)
        self.intake.keep_after = self.log.keep_after
        self._context = context
        self._signals_per_run = chain_input.signals_per_run

    def receive(self, arrival: Arrival) -> None:
        """An `event` signal's event, handed over once: it enters the intake's queue."""
        self.intake.receive(arrival)

    def take_next(self, share: TaskShare) -> bool:
        """Takes the next waiting event in, within the workflow task's share: recorded (then
        forwarded, its alerts applied, matched) or rejected; what that decides waits in the
        outbox. False when none is taken: none waits, events are held back for the next run,
        or the share is spent (`share.more`)."""
        if not self.intake.waiting() or self.pacing.holding_events():
            return False
        if share.full() and self._context.patched(FLOOD_PATCH):
            share.more = True
            return False
        envelope = self.intake.take(share)
        if envelope is not None:
            self._handle(envelope)
        return True

    def has_work(self, outbound: int) -> bool:
        """Something for the run's loop: events to take, a run to dispatch, the end (with
        `outbound` sends under way), continue-as-new, or a wait for listeners to time."""
        pacing = self.pacing
        return (
            (self.intake.waiting() and not pacing.holding_events())
            or pacing.dispatchable()
            or self.finished(outbound)
            or pacing.continue_as_new_now(outbound)
            or pacing.grace_unarmed()
        )

    def refusal(self, envelope: EventEnvelope) -> Rejection | None:
        """Why an acknowledged publish of the event is refused, changing nothing (a validator
        asks): the chain has ended (its run is settling: nothing it took in would run) or is
        closing, or the intake would reject it; None for a duplicate (it is answered as one)."""
        header = envelope.event
        if self.record.state.status not in (ChainStatus.RUNNING, ChainStatus.PAUSED):
            return Rejection(FailureType.CHAIN_ENDED, f"event {header.id}: the chain has ended")
        if self.record.closing:
            return Rejection(FailureType.CHAIN_CLOSING, f"event {header.id}: the chain is closing")
        if self.intake.seen(header.id):
            return None
        return self.intake.screen(envelope)

    def busy(self, envelope: EventEnvelope) -> Rejection | None:
        """An acknowledged publish refused for now: the run takes no new events until it has
        continued as new (`ChainPacing.holding_events`); the publisher publishes again."""
        if not self.pacing.holding_events():
            return None
        why = "the chain is continuing as new; publish it again"
        return Rejection(FailureType.CHAIN_BUSY, f"event {envelope.event.id}: {why}")

    def take_acked(self, envelope: EventEnvelope, workflow_id: str) -> PublishAnswer:
        """An acknowledged publish's event, taken in at once (ahead of the events waiting in
        the queue, as the chain's own events are) and answered: accepted with its timeline
        number, a duplicate with the one it had, or refused (a rejection the validator did not
        foresee is recorded and parked, as the queue's are)."""
        admission = self._handle(envelope)
        event_id = envelope.event.id
        if isinstance(admission, Rejection):
            return PublishAnswer(
                verdict="refused",
                event_id=event_id,
                workflow_id=workflow_id,
                failure_type=admission.kind,
                reason=admission.reason,
            )
        verdict = "accepted" if admission == "recorded" else "duplicate"
        seq = self.intake.seq_of(event_id)
        return PublishAnswer(verdict=verdict, event_id=event_id, workflow_id=workflow_id, seq=seq)

    def _handle(self, envelope: EventEnvelope) -> Admission | Rejection:
        """One event taken in: rejected (parked), a duplicate (counted), or recorded, then
        forwarded, its alert applied and the runs it completes queued. A rewound copy's past
        is recorded and matched, but runs nothing and is forwarded to no one."""
        past = self.intake.taken_as_recorded(envelope)
        admission = self.intake.admit(envelope)
        if isinstance(admission, Rejection):
            self.intake.reject(admission, envelope=envelope)
        elif admission == "recorded":
            notices = self._forward(envelope, heard=not past)
            if self.matching.apply_alerts(envelope, resolutions_never_pause=notices):
                self.outbox.put(StatusChanged(self.status_attributes()))
            for fired in self.matching.match(envelope, self._context.now()):
                if not past:
                    self.runs.enqueue(
                        fired.subscription, envelope, fired.causes, inputs=fired.inputs
                    )
        return admission

    def rerun(self, request: RerunRequest) -> None:
        """A dead letter replayed: its subscription's run queued again (`ChainMatching.rerun`)."""
        fired = self.matching.rerun(request)
        if fired is not None:
            self.runs.enqueue(
                fired.subscription,
                request.event,
                fired.causes,
                inputs=fired.inputs,
                idempotency_key=fired.idempotency_key,
            )

    def receive_recorded(self, batch: RecordedEvents) -> None:
        """A rewound copy's past enters the queue in order, each event marked as recorded: its
        runs were the original's, and their results are among these events (or re-delivered).
        The batch that ends the hand-over marks the copy complete."""
        for envelope in batch.events:
            self.record.recorded.append(envelope.event.id)
            self.intake.receive(envelope)
        if batch.complete and self._context.patched(REWIND_COMPLETE_PATCH):
            self.record.state.rewind_complete = True

    def _forward(self, envelope: EventEnvelope, *, heard: bool = True) -> bool:
        """Listeners get the events the chain records as `chain_event` (events they listen to,
        unlike `event`, which is addressed to them), never the chain's lifecycle notices: those
        are about this chain's handling, not the listener's work. Returns whether this run
        handles lifecycle notices (runs recorded before forwarded them as `event`)."""
        notices = self._context.patched(LIFECYCLE_NOTICES_PATCH)
        if notices and envelope.event.type in LIFECYCLE_NOTICES:
            return notices
        if self.record.listeners and heard:
            signal = CHAIN_EVENT_SIGNAL if notices else EVENT_SIGNAL
            self.outbox.put(Forward(envelope, signal, tuple(self.record.listeners)))
        return notices

    def close_idle(self) -> bool:
        """The idle timeout ends a chain with nothing running."""
        if self.runs.holds() or self.record.in_flight:
            return False
        self.record.state.status = ChainStatus.IDLE_CLOSED
        return True

    def end(self) -> None:
        state = self.record.state
        if state.status in (ChainStatus.RUNNING, ChainStatus.PAUSED):
            state.status = ChainStatus.CLOSED if self.record.closing else ChainStatus.COMPLETED

    def finished(self, outbound: int) -> bool:
        """Done: closed idle, or nothing left to do after the terminal event or a `close` (a
        paused chain that was closed leaves its queued runs to be parked); `outbound` sends
        are still under way."""
        record = self.record
        if record.state.status == ChainStatus.IDLE_CLOSED:
            return True
        idle = (
            not self.runs.holds()
            and not record.in_flight
            and not self.intake.waiting()
            and not outbound
        )
        stuck = record.state.status == ChainStatus.PAUSED
        if record.closing:
            return idle and (not record.queue or stuck)
        ended = record.state.terminal_seen and idle and not record.queue
        if ended and record.state.rewind_of and not record.state.rewind_complete:
            return not self._context.patched(COPY_ENDS_AFTER_ITS_HAND_OVER_PATCH)  # hand-over first
        return self.pacing.ends(ended, record.listeners)

    def attach(self, workflow_id: str) -> None:
        if workflow_id not in self.record.listeners:
            self.record.listeners.append(workflow_id)

    def detach(self, workflow_id: str) -> None:
        if workflow_id in self.record.listeners:
            self.record.listeners.remove(workflow_id)

    def snapshot(self) -> ChainState:
        """The chain's record as its `state` query answers."""
        return self.record.state.model_copy(
            update={
                "running": self.runs.running_labels(),
                "waiting": self.matching.waiting(),
                "queued": len(self.record.queue),
                "listeners": list(self.record.listeners),
            }
        )

    def status_attributes(self) -> SearchValues:
        """What the chain's run is found by in the UI (its record's, as the start sets them)."""
        return self.record.state.search_attributes()

    def details(self) -> str:
        """The UI's text for the chain, set every turn: read from the record, not a `snapshot`."""
        state = self.record.state
        lines = [f"**Status:** {state.status.value} · **events seen:** {state.events_seen}"]
        if state.pause_reason:
            lines.append(f"**Paused by:** {state.pause_reason}")
        lines.append(f"**Running:** {', '.join(self.runs.running_labels()) or 'none'}")
        lines.append(f"**Waiting:** {'; '.join(self.matching.waiting()) or 'none'}")
        if self.record.queue:
            lines.append(f"**Queued runs:** {len(self.record.queue)}")
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
        record = self.record
        trimmed = {
            "state": self.snapshot(),
            "timeline": timeline_window(record.timeline, self.log.keep_after()),
            **self.intake.carried(),
        }
        return ChainInput(
            spec=self.spec,
            correlation_id=record.state.correlation_id,
            signals_per_run=self._signals_per_run,
            carried=ChainCarry(**(dict(record) | trimmed)),
        )


def standin_input(workflow_id: str) -> ChainInput:
    """What a chain whose input does not validate holds until `run` reports the error: no
    subscriptions, nothing to do."""
    return ChainInput.model_construct(
        spec=ChainSpec.model_construct(name="invalid", subscriptions=[], triggers=[]),
        correlation_id=correlation_id_of_chain(workflow_id),
    )
