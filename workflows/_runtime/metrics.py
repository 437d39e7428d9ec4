"""What the workflows tell the worker's metrics (the catalogue, coord.models.ops.metrics): one
function per fact, called by the workflow where the fact happens.

Through the workflow's metric meter: it records nothing while a workflow replays (a fact is
counted once, when it first happens, whichever worker replays the run later) and it issues no
command, so a call added here or there changes no workflow's history. On a worker without a
metrics endpoint the meter is the SDK's no-op one."""

from collections.abc import Collection, Iterable, Sequence

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.chain.spec import QueuedRun
    from coord.models.dlq.letter import DlqEntry
    from coord.models.events.envelope import EventEnvelope
    from coord.models.mesh.agents import AgentResult
    from coord.models.ops import metrics as catalogue
    from coord.models.ops.metrics import NONE, MetricSpec
    from coord.models.plan.spec import PlanState

SAGA_ENDS = frozenset({"completed", "compensated", "compensation_failed", "failed"})
VOTE_ENDS = frozenset({"decided", "rejected", "no_quorum", "cancelled"})


def _record(spec: MetricSpec, value: float = 1, /, **labels: str) -> None:
    spec.record(workflow.metric_meter(), value, labels)


def _event_labels(envelope: EventEnvelope) -> dict[str, str]:
    return {"topic": envelope.routing.topic or NONE, "type": envelope.event.type}


def event_published(envelope: EventEnvelope, *, addressed: bool = True) -> None:
    """An event taken in by the workflow it was published to; one a chain forwards to its
    listeners (not `addressed` to them) was counted by the chain."""
    if addressed:
        _record(catalogue.EVENTS_PUBLISHED, **_event_labels(envelope))


def event_consumed(envelope: EventEnvelope) -> None:
    """An event a pattern's workflow took in, and how long after its time."""
    _record(catalogue.EVENTS_CONSUMED, **_event_labels(envelope))
    waited = workflow.now() - envelope.event.timestamp
    _record(catalogue.EVENT_LATENCY, waited.total_seconds(), topic=envelope.routing.topic or NONE)


def events_consumed(envelopes: Iterable[EventEnvelope]) -> None:
    for envelope in envelopes:
        event_consumed(envelope)


def agent_events_published(
    agent: str, on_success: Sequence[str], result: AgentResult, refused: Collection[str]
) -> None:
    """The events a chain published for a run's result: its subscription's `on_success` ones
    and the result's own publications of a type not `refused`."""
    allowed = sum(1 for request in result.publish if request.type not in refused)
    _record(catalogue.AGENT_EVENTS_PUBLISHED, len(on_success) + allowed, agent=agent)


class ChainRuns:
    """A chain's runs queued and dispatched. The runs queued since it last looked are those
    numbered past the last it counted (a run's number, `QueuedRun.seq`, only grows and is
    carried across continue-as-new), counted before any is dispatched."""

    def __init__(self, seq: int) -> None:
        self._counted = seq

    def queued(self, queue: Iterable[QueuedRun], seq: int) -> None:
        """The runs `queue` holds numbered past the last counted, up to `seq` (the last)."""
        if seq <= self._counted:
            return
        for entry in queue:
            if entry.seq > self._counted:
                _record(catalogue.CHAIN_RUNS_QUEUED, agent=entry.run.agent)
        self._counted = seq

    def dispatched(self, agent: str) -> None:
        _record(catalogue.CHAIN_RUNS_DISPATCHED, agent=agent)


def saga_status(status: str) -> None:
    """A saga's status changed; an ending one is counted."""
    if status in SAGA_ENDS:
        _record(catalogue.SAGAS, outcome=status)


def saga_compensation(agent: str) -> None:
    _record(catalogue.SAGA_COMPENSATIONS, agent=agent)


def aggregator_ended(status: str) -> None:
    _record(catalogue.AGGREGATORS, outcome=status)


def vote_status(status: str) -> None:
    """A vote's status changed; an ending one is counted."""
    if status in VOTE_ENDS:
        _record(catalogue.VOTES, outcome=status)


def plan_ended(state: PlanState) -> None:
    """The plan's outcome, and each of its tasks' final state."""
    _record(catalogue.PLANS, outcome=state.status)
    for task_state, count in state.counts().items():
        _record(catalogue.PLAN_TASKS, count, state=task_state)


def dead_letter_parked(entry: DlqEntry) -> None:
    """A dead letter parked, and the event it carries: refused, or dead-lettered after an
    agent's run (`catalogue.parked_event`)."""
    _record(catalogue.DLQ_PARKED, failure_type=entry.failure_type)
    counter = catalogue.parked_event(
        entry.failure_type, has_event=entry.event is not None, target_agent=entry.target_agent
    )
    if counter is None:
        return
    labels = _event_labels(entry.event) if entry.event else {"topic": NONE, "type": "invalid"}
    _record(counter, **labels)


def dead_letter_replayed(entry: DlqEntry) -> None:
    """A replay ended: delivered (the entry is `replayed`), or not (parked again)."""
    outcome = "delivered" if entry.status == "replayed" else "not_delivered"
    _record(catalogue.DLQ_REPLAYED, failure_type=entry.failure_type, outcome=outcome)
