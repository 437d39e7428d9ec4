"""A chain's budget of runs per first cause (`max_runs_per_event`): each event's first cause
(the event its causes began with in the chain) is remembered, and the runs its events queue
counted. A filtered cycle that fans out (two subscriptions on `X` publishing `Y`, two on `Y`
publishing `X`) doubles its runs each hop, far below `max_causation_depth`: past the budget, an
event is rejected as a probable loop."""

from coord.models.chain.boundary import Rejection
from coord.models.chain.spec import ChainCarry, ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.wire.contract import FailureType


class RunBudget:
    """The chain's first causes and their runs, kept in its record (carried across
    continue-as-new); the intake asks it about each event, the run queue tells it each run."""

    def __init__(self, record: ChainCarry, spec: ChainSpec, window: int) -> None:
        self._record = record
        self._spec = spec
        self._window = window
        """The first causes counted and carried, the most recently counted (trimmed when twice
        as many), as the intake keeps the events whose first cause it remembers."""
        self.enabled = False
        """Set once the run starts: runs recorded before counted nothing (and the intake asks
        `refusal` and `remember` only when it is set)."""

    def first_cause(self, envelope: EventEnvelope, announced: bool) -> str:
        """Itself for an event without a cause, or a plan's or vote's announcement (`announced`:
        as many as the plan's tasks or the vote's voters, which their specs bound); else its
        cause's first cause, or the cause itself when the chain does not remember it."""
        cause = envelope.event.causation_id
        if cause is None or announced:
            return envelope.event.id
        return self._record.first_causes.get(cause, cause)

    def refusal(self, envelope: EventEnvelope, announced: bool, depth: int) -> Rejection | None:
        """The rejection of an event whose first cause has queued the budget, or None."""
        first = self.first_cause(envelope, announced)
        queued = self._record.runs_caused.get(first, 0)
        if queued < self._spec.max_runs_per_event:
            return None
        header = envelope.event
        return Rejection(
            FailureType.CAUSATION_LOOP,
            f"event {header.id} ({header.type}): the events {first} caused have queued "
            f"{queued} runs, the chain's max_runs_per_event, a probable loop",
            depth,
        )

    def remember(self, envelope: EventEnvelope, announced: bool) -> None:
        """The event is recorded: its first cause is kept (`forget` drops it with its depth)."""
        self._record.first_causes[envelope.event.id] = self.first_cause(envelope, announced)

    def forget(self, event_id: str) -> None:
        self._record.first_causes.pop(event_id, None)

    def run_queued(self, trigger: EventEnvelope) -> None:
        """A run queued on `trigger`, counted against its first cause."""
        if not self.enabled:
            return
        first = self._record.first_causes.get(trigger.event.id, trigger.event.id)
        counts = self._record.runs_caused
        counts[first] = counts.pop(first, 0) + 1
        if len(counts) > 2 * self._window:
            for stale in list(counts)[: -self._window]:
                del counts[stale]

    def carried(self) -> dict[str, dict[str, str] | dict[str, int]]:
        """What the next run carries: the newest of each (`window`)."""
        record, window = self._record, self._window
        return {
            "first_causes": dict(list(record.first_causes.items())[-window:]),
            "runs_caused": dict(list(record.runs_caused.items())[-window:]),
        }
