"""A chain's agent runs, by their queue number: queued (a heap by priority, then arrival),
running in the chain's own run, handed to a `ChainRun` of their own (in flight, carried across
continue-as-new until their outcome comes back by signal), ended. What each stage publishes or
parks is `RunOutcomes`'; what a run is sent with (its agent's request, its vote) is here.

`ChainRuns` answers the run lifecycle every pattern's model answers (`RunLifecycle`), keyed by
the run's queue number; a result is an agent's, or a vote's record. A chain keeps no times of
its runs: the lifecycle's `now` goes unused here."""

import hashlib
import heapq
from datetime import datetime
from typing import Any

from coord.models.chain.boundary import Parking
from coord.models.chain.budget import RunBudget
from coord.models.chain.outcomes import RunOutcomes
from coord.models.chain.run import RunOutcome
from coord.models.chain.spec import (
    AgentRun,
    ChainCarry,
    ChainSpec,
    ChainStatus,
    QueuedRun,
    RunAssignment,
    Subscription,
    run_idempotency_key,
)
from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.mesh.agents import AgentRequest, AgentResult
from coord.models.mesh.assignment import Assignment
from coord.models.mesh.lifecycle import RunFailure
from coord.models.mesh.runs import RunDetour, kept
from coord.models.vote.spec import VoteSpec, VoteState
from coord.models.wire.specs import MAX_NAME

PRIORITY_RANK = {Priority.CRITICAL: 0, Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}
ASSIGNMENT_WINDOW = 20


class ChainRuns:
    """The run queue, its dispatch and hand-over, and each run's lifecycle."""

    def __init__(
        self,
        record: ChainCarry,
        spec: ChainSpec,
        workflow_id: str,
        outcomes: RunOutcomes,
        budget: RunBudget,
    ) -> None:
        self._record = record
        self._spec = spec
        self._workflow_id = workflow_id
        self._outcomes = outcomes
        self._budget = budget
        heapq.heapify(record.queue)
        self._running: dict[int, AgentRun] = {}
        """Runs started in this run, not handed over: never carried (the run continues as new
        when none is left)."""
        self._unconfirmed: set[int] = set()
        """Runs handed over whose `ChainRun` has not been confirmed started: continue-as-new
        waits for those too, so a start that fails is still this run's to handle."""
        self._landed: dict[int, AgentRun] = {}
        """Runs in flight whose outcome has just come back, until it is taken."""

    def enqueue(
        self,
        subscription: Subscription,
        trigger: EventEnvelope,
        causes: list[str],
        *,
        inputs: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        """A run of the subscription's agent on `trigger` joins the queue, counted against the
        trigger's first cause (`RunBudget`); its key is the chain's, the subscription's and the
        trigger's unless given (a rerun keeps the failed run's)."""
        self._record.seq += 1
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
        heapq.heappush(self._record.queue, QueuedRun(rank=rank, seq=self._record.seq, run=run))
        self._budget.run_queued(trigger)

    def can_dispatch(self) -> bool:
        """A run is queued, a slot is free (runs in flight hold theirs) and no alert holds the
        chain."""
        return (
            bool(self._record.queue)
            and len(self._running) + len(self._record.in_flight) < self._spec.max_concurrency
            and self._record.state.status != ChainStatus.PAUSED
        )

    def start_next(self) -> tuple[int, AgentRun]:
        """The queued run of the highest priority (then the earliest) moves to the running."""
        queued = heapq.heappop(self._record.queue)
        self._running[queued.seq] = queued.run
        return queued.seq, queued.run

    def finish(self, seq: int) -> None:
        """The run is done here: ended, or handed over."""
        self._running.pop(seq, None)

    def hand_over(self, seq: int) -> None:
        """The run goes to a `ChainRun` of its own: in flight (carried across continue-as-new)
        from now, its outcome awaited by signal; unconfirmed until its start is."""
        self._record.in_flight[seq] = self._running.pop(seq)
        self._unconfirmed.add(seq)

    def confirmed(self, seq: int) -> None:
        self._unconfirmed.discard(seq)

    def landed(self, outcome: RunOutcome) -> AgentRun | None:
        """The run in flight an outcome names, no longer in flight (`take_outcome` takes it
        next); None for none (an outcome that came already, or that no run of this chain
        sent), which is rejected and parked."""
        run = self._record.in_flight.pop(outcome.seq, None)
        if run is None:
            self._outcomes.unknown(outcome)
        else:
            self._landed[outcome.seq] = run
        return run

    def take_outcome(self, outcome: RunOutcome, now: datetime) -> None:
        """A landed run's outcome, taken as a run's here would be."""
        if outcome.result is not None:
            self.run_succeeded(outcome.seq, now, outcome.result)
        elif outcome.vote is not None:
            self.run_succeeded(outcome.seq, now, outcome.vote)
        else:
            failed = outcome.failure
            assert failed is not None  # RunOutcome holds exactly one
            failure = RunFailure(
                type=failed.failure_type, message=failed.message, attempts=failed.attempts
            )
            self.run_failed(outcome.seq, now, failure)

    def queued(self) -> bool:
        return bool(self._record.queue)

    def holds(self) -> bool:
        """Runs this run holds: continue-as-new waits for them (not for runs in flight)."""
        return bool(self._running or self._unconfirmed)

    def running(self) -> list[AgentRun]:
        """The runs started and not ended: here, then in flight."""
        return [*self._running.values(), *self._record.in_flight.values()]

    def running_labels(self) -> list[str]:
        """The running runs as people read them: `agent ← trigger type`."""
        return [f"{run.agent} ← {run.trigger.event.type}" for run in self.running()]

    def run_started(self, key: int, now: datetime) -> None:
        self._outcomes.started(self._running[key])

    def run_succeeded(self, key: int, now: datetime, result: AgentResult | VoteState) -> None:
        """An agent's result, or a vote's record (decided, rejected or without quorum)."""
        run = self._run(key)
        if isinstance(result, VoteState):
            self._outcomes.voted(run, result)
        else:
            self._outcomes.succeeded(run, result)

    def run_failed(self, key: int, now: datetime, failure: RunFailure) -> None:
        """Published as the failure event; its parking goes to the outbox."""
        self._outcomes.failed(self._run(key), failure)

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
            tokens=self._record.state.tokens.allowance(self._spec.budget),
            rewind_of=self._record.state.rewind_of,
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
        correlation_id = self._record.state.correlation_id
        vote_id = f"{correlation_id[: MAX_NAME - len(digest) - 1]}-{digest}"
        return VoteSpec.of(
            vote_id,
            subscription.vote,
            run.trigger.payload,
            correlation_id=correlation_id,
            agents=self._spec.agents,
            causation_id=run.trigger.event.id,
        )

    def run_assigned(self, run: AgentRun, assignment: Assignment) -> None:
        """A run of a subscription naming capabilities goes to the agent picked for it."""
        run.agent = assignment.agent
        picked = RunAssignment(
            subscription=run.subscription, event_id=run.trigger.event.id, assignment=assignment
        )
        state = self._record.state
        state.assignments.append(picked)
        del state.assignments[:-ASSIGNMENT_WINDOW]

    def run_detoured(self, run: AgentRun, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run that waited for its agent or went elsewhere (kept in `detours`); one that went
        to another agent runs, and publishes, as that agent."""
        label = f"{run.subscription} ← {run.trigger.event.id}"
        state = self._record.state
        state.detours = kept(state.detours, detour.model_copy(update={"run": label}))
        if assignment is not None:
            self.run_assigned(run, assignment)
        elif detour.to_agent is not None:
            run.agent = detour.to_agent

    def take_queued(self) -> list[Parking]:
        """The runs a chain that ended (paused) never started, in queue order, to be parked so
        an operator can run them from the dead-letter queue."""
        queued = [entry.run for entry in sorted(self._record.queue)]
        self._record.queue.clear()
        self._record.state.dead_lettered += len(queued)
        return [self._outcomes.never_ran(run) for run in queued]

    def _run(self, key: int) -> AgentRun:
        """The run an outcome names: running here, or landed from its `ChainRun`."""
        run = self._running.get(key)
        return run if run is not None else self._landed.pop(key)
