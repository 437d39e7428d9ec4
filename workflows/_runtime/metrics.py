"""What the workflows tell the worker's metrics (the catalogue, coord.models.ops.metrics): one
function per fact, called by the workflow where the fact happens.

Through the workflow's metric meter: it records nothing while a workflow replays (a fact is
counted once, when it first happens, whichever worker replays the run later) and it issues no
command, so a call added here or there changes no workflow's history. On a worker without a
metrics endpoint the meter is the SDK's no-op one."""

import asyncio
from collections import Counter
from collections.abc import Iterable
from itertools import takewhile

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.chain.spec import ChainCarry, ChainSpec
    from coord.models.dlq.letter import DlqEntry
    from coord.models.events.envelope import EventEnvelope
    from coord.models.ops import metrics as catalogue
    from coord.models.ops.metrics import NONE, MetricSpec
    from coord.models.plan.spec import PlanState

SAGA_ENDS = frozenset({"completed", "compensated", "compensation_failed", "failed"})
VOTE_ENDS = frozenset({"decided", "rejected", "no_quorum", "cancelled"})


def _record(spec: MetricSpec, value: float = 1, /, **labels: str) -> None:
    spec.record(workflow.metric_meter(), value, labels)


def _event_labels(envelope: EventEnvelope) -> dict[str, str]:
    return {"topic": envelope.routing.topic or NONE, "type": envelope.event.type}


class PublishedTally:
    """The events taken in by the workflow they were published to (one a chain forwards to its
    listeners, not `addressed` to them, was counted by the chain), recorded once per workflow
    task from `start` on: one `add` per topic and type, not one per event, for a workflow taking
    floods of signals. A metric issues no command, so when it is recorded changes no history."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()

    def add(self, envelope: EventEnvelope, *, addressed: bool = True) -> None:
        if addressed:
            self._counts[envelope.routing.topic or NONE, envelope.event.type] += 1

    def start(self) -> None:
        """Records from now on, in a task of the run's (so from the run, not `__init__`)."""
        self._recording = asyncio.create_task(self._recorded_per_task())

    async def _recorded_per_task(self) -> None:
        """Wakes once the task's signals are handled (conditions are checked when nothing
        else is ready), so each workflow task records its events once."""
        while True:
            await workflow.wait_condition(lambda: bool(self._counts))
            for (topic, kind), count in self._counts.items():
                _record(catalogue.EVENTS_PUBLISHED, count, topic=topic, type=kind)
            self._counts.clear()


def event_consumed(envelope: EventEnvelope) -> None:
    """An event a pattern's workflow took in, and how long after its time."""
    _record(catalogue.EVENTS_CONSUMED, **_event_labels(envelope))
    waited = workflow.now() - envelope.event.timestamp
    _record(catalogue.EVENT_LATENCY, waited.total_seconds(), topic=envelope.routing.topic or NONE)


def events_consumed(envelopes: Iterable[EventEnvelope]) -> None:
    for envelope in envelopes:
        event_consumed(envelope)


class ChainFacts:
    """What a chain's model did since the workflow last looked, read from its record: the
    events it recorded (published, consumed, their latency, and those its agents published,
    by their source) and the runs it queued. Both are numbered in one sequence that only grows
    and is carried across continue-as-new (`ChainCarry.seq`); the workflow looks once a turn,
    after taking events in and before dispatching runs, so every one is seen once."""

    def __init__(self, spec: ChainSpec, seq: int) -> None:
        self._counted = seq
        self._agents = {f"/{agent}" for _, agent in spec.agents_named() if agent}

    def seen(self, record: ChainCarry) -> None:
        """Counters get one `add` per label set a turn (not one per event: a turn takes up to a
        task's share of a flood); the latency histogram one value per event."""
        if record.seq <= self._counted:
            return
        recorded = takewhile(lambda entry: entry.seq > self._counted, reversed(record.timeline))
        events: Counter[tuple[str, str]] = Counter()
        by_agents: Counter[str] = Counter()
        now = workflow.now()
        for entry in recorded:
            topic = entry.topic or NONE
            events[topic, entry.event] += 1
            _record(catalogue.EVENT_LATENCY, (now - entry.time).total_seconds(), topic=topic)
            if entry.agent in self._agents:
                by_agents[entry.agent.removeprefix("/")] += 1
        for (topic, kind), count in events.items():
            _record(catalogue.EVENTS_PUBLISHED, count, topic=topic, type=kind)
            _record(catalogue.EVENTS_CONSUMED, count, topic=topic, type=kind)
        for agent, count in by_agents.items():
            _record(catalogue.AGENT_EVENTS_PUBLISHED, count, agent=agent)
        queued = Counter(q.run.agent for q in record.queue if q.seq > self._counted)
        for agent, count in queued.items():
            _record(catalogue.CHAIN_RUNS_QUEUED, count, agent=agent)
        self._counted = record.seq


def chain_runs_dispatched(agents: Iterable[str]) -> None:
    """The runs a turn dispatched, one `add` per agent."""
    for agent, count in Counter(agents).items():
        _record(catalogue.CHAIN_RUNS_DISPATCHED, count, agent=agent)


def _status(spec: MetricSpec, ends: frozenset[str], status: str) -> None:
    """A status changed; an ending one (in `ends`) is counted by `spec`."""
    if status in ends:
        _record(spec, outcome=status)


def saga_status(status: str) -> None:
    _status(catalogue.SAGAS, SAGA_ENDS, status)


def saga_compensation(agent: str) -> None:
    _record(catalogue.SAGA_COMPENSATIONS, agent=agent)


def aggregator_ended(status: str) -> None:
    _record(catalogue.AGGREGATORS, outcome=status)


def vote_status(status: str) -> None:
    _status(catalogue.VOTES, VOTE_ENDS, status)


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
