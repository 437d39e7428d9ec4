"""What an agent run of a chain publishes and parks at each stage of its life: `on_start` when
it starts; on success its subscription's success events (with the result's data, or a vote's
record) and the agent's own publications, but those of a type it may not publish, which are
rejected and parked; on failure its failure event, and a parking to run it again by a `rerun`;
never run (queued when the chain ended), a parking to run it from the dead-letter queue.

Agent output is data: a prompt-injected model cannot make the chain publish what its
subscription does not declare."""

from collections.abc import Mapping
from typing import Any, Literal

from coord.models.chain.boundary import Outbox, ParkDetails, Parking, Rejection, RunContext
from coord.models.chain.intake import ChainIntake
from coord.models.chain.run import RunOutcome
from coord.models.chain.spec import AgentRun, ChainCarry, ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentResult
from coord.models.mesh.attempts import AttemptTime
from coord.models.mesh.lifecycle import RunFailure
from coord.models.vote.spec import VoteState
from coord.models.wire.contract import RUN_OUTCOME_SIGNAL, FailureType
from coord.models.wire.versions import PUBLISH_RULE_PATCH


class RunOutcomes:
    """The events and parkings of a run's start, result, failure or end unrun."""

    def __init__(
        self,
        record: ChainCarry,
        spec: ChainSpec,
        intake: ChainIntake,
        outbox: Outbox,
        context: RunContext,
    ) -> None:
        self._record = record
        self._spec = spec
        self._intake = intake
        self._outbox = outbox
        self._context = context

    def started(self, run: AgentRun) -> None:
        publishes = self._spec.subscription(run.subscription).publishes
        if publishes.on_start:
            self._publish(publishes.on_start, run, {"agent": run.agent})

    def succeeded(self, run: AgentRun, result: AgentResult) -> None:
        """The subscription's success events carry the result's data; the agent's own
        publications follow, but those of a type it may not publish (`refused_types`), which
        are rejected and parked (`publish_not_allowed`; runs recorded before the rule refuse
        nothing). The run's tokens are counted in the chain's record."""
        refused = self.refused_types(run, result)
        if refused and not self._context.patched(PUBLISH_RULE_PATCH):
            refused = set()
        self._record.state.tokens.add(result)
        for event_type in self._spec.subscription(run.subscription).publishes.on_success:
            self._publish(event_type, run, result.data)
        for request in result.publish:
            if request.type not in refused:
                self._publish(request.type, run, request.payload)
                continue
            envelope = self._published(request.type, run, request.payload)
            self._intake.reject(self._not_allowed(run, result, envelope), envelope=envelope)

    def refused_types(self, run: AgentRun, result: AgentResult) -> set[str]:
        """The types among the agent's own publications that it may not publish: neither its
        subscription's `publishes` nor its declaration (`result.may_publish`) names them."""
        publishes = self._spec.subscription(run.subscription).publishes
        allowed = publishes.allowed(result.may_publish)
        if allowed is None:
            return set()
        return {request.type for request in result.publish} - allowed

    def voted(self, run: AgentRun, vote: VoteState) -> None:
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

    def failed(self, run: AgentRun, failure: RunFailure) -> None:
        """A run that failed for good is published as its failure event and parked, to be run
        again by a `rerun`, dated by its attempts as its worker reported them."""
        publishes = self._spec.subscription(run.subscription).publishes
        if publishes.on_failure:
            self._publish(publishes.on_failure, run, {"error": failure.message})
        self._record.state.dead_lettered += 1
        letter = self._run_parking(
            run,
            failure.type,
            f"{run.agent} failed on {run.trigger.event.type}: {failure.message}",
            target_agent=run.subscription,
            attempt_count=failure.attempts,
            failed_attempts=failure.times,
            replay="rerun",
        )
        self._outbox.put(letter)

    def unknown(self, outcome: RunOutcome) -> None:
        """An outcome no run in flight awaits (sent twice, or by someone else): rejected and
        parked."""
        reason = f"{RUN_OUTCOME_SIGNAL}: no run {outcome.seq} is in flight"
        rejection = Rejection(FailureType.INVALID_RUN_OUTCOME, reason)
        self._intake.reject(rejection, raw=outcome.model_dump(mode="json"))

    def never_ran(self, run: AgentRun) -> Parking:
        """A run the chain ended (paused) without starting: a run of a named agent runs it
        again; a vote's or a capability's run (no agent of its own yet) is a `rerun` of its
        subscription."""
        agent = self._spec.subscription(run.subscription).agent
        return self._run_parking(
            run,
            FailureType.CHAIN_ENDED,
            f"{run.agent} on {run.trigger.event.type} never ran: the chain ended "
            f"{self._record.state.status.value} while it was queued",
            target_agent=agent or run.subscription,
            replay="run_agent" if agent else "rerun",
        )

    def _publish(self, event_type: str, run: AgentRun, payload: dict[str, Any]) -> None:
        """An event the run publishes enters the chain's queue, caused by the run's trigger."""
        self._intake.publish(self._published(event_type, run, payload), run.causes)

    def _published(self, event_type: str, run: AgentRun, payload: dict[str, Any]) -> EventEnvelope:
        trigger = run.trigger
        return EventEnvelope.new(
            event_type,
            f"/{run.agent}",
            payload=payload,
            correlation_id=self._record.state.correlation_id,
            causation_id=trigger.event.id,
            topic=self._spec.subscription(run.subscription).topic or trigger.routing.topic,
            priority=trigger.routing.priority,
        )

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
            self._intake.depth(envelope),
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
        failed_attempts: Mapping[int, AttemptTime] | None = None,
    ) -> Parking:
        """A run parked with its trigger, key and inputs, and the causation depth its replay
        counts from."""
        details = ParkDetails(
            event=run.trigger,
            target_agent=target_agent,
            attempt_count=attempt_count,
            failed_attempts=failed_attempts or {},
            replay=replay,
            idempotency_key=run.idempotency_key,
            inputs=run.inputs,
            causation_depth=self._record.depths.get(run.trigger.event.id),
        )
        return Parking(failure_type, message, details)
