"""Which agent runs a recorded event starts: the subscriptions it fits (topic, type, CEL filter),
the joins it completes, and the alert policy it pauses or resumes the chain by. A dead letter
replayed (`rerun`) names its subscription instead."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from coord.models.chain.boundary import Rejection
from coord.models.chain.intake import ChainIntake
from coord.models.chain.runs import ChainRuns
from coord.models.chain.spec import (
    ChainCarry,
    ChainSpec,
    ChainStatus,
    RerunRequest,
    Subscription,
    replayed_inputs,
    run_idempotency_key,
)
from coord.models.events.envelope import EventEnvelope
from coord.models.events.filters import evaluate
from coord.models.wire.contract import FailureType


@dataclass(frozen=True)
class Fired:
    """A subscription an event completed the join of: its run's causes (the join's events, in
    order) and inputs (each event's payload by type)."""

    subscription: Subscription
    causes: list[str]
    inputs: dict[str, Any]


class ChainMatching:
    """Events to runs: subscriptions, filters, joins, alerts and reruns."""

    def __init__(
        self,
        record: ChainCarry,
        spec: ChainSpec,
        workflow_id: str,
        intake: ChainIntake,
        runs: ChainRuns,
    ) -> None:
        self._record = record
        self._spec = spec
        self._workflow_id = workflow_id
        self._intake = intake
        self._runs = runs

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

    def rerun(self, request: RerunRequest) -> None:
        """A dead letter replayed: the subscription's agent runs again on the (fixed) event,
        which counts its depth from the event it replays; an unknown subscription is rejected."""
        try:
            subscription = self._spec.subscription(request.subscription)
        except StopIteration:
            reason = f"rerun: unknown subscription {request.subscription!r}"
            self._intake.reject(
                Rejection(FailureType.INVALID_RERUN, reason), envelope=request.event
            )
            return
        self._record.state.received += 1
        replayed = request.event.event
        self._intake.remember(
            request.event, self._record.depths.get(replayed.causation_id or "", 0)
        )
        key = request.idempotency_key or run_idempotency_key(
            self._workflow_id, subscription.name, replayed.causation_id or replayed.id
        )
        inputs = replayed_inputs(request)
        self._runs.enqueue(
            subscription, request.event, [replayed.id], inputs=inputs, idempotency_key=key
        )

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
        outcome = evaluate(expression, envelope.model_dump(mode="json"))
        if outcome.error:
            self._record.state.filter_errors += 1
            self._record.state.last_filter_error = (
                f"event {envelope.event.id}: filter {expression!r}: {outcome.error}"
            )
        return outcome.matched
