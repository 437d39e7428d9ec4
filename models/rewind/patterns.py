"""What a rewound copy of a correlation's aggregators and votes takes from their originals.

A pattern of the correlation that was at work at the rewind point (started before it, not yet
ended) is copied into the new correlation starting from its state just before the point:
- an aggregator from the slots its join held: the log's rows before the point that it heard,
  offered to a fresh join of its spec in their order (so `keep: latest` and quorums hold as
  they did), and the time its deadline had left;
- a vote from the ballots its voters had cast: those whose `BallotCast` the log holds before
  the point, never asked of their agents again, and the time its deadline had left;
- a saga to its step at the point: the steps that had completed before it (their events among
  the rows before the point) are reused, the next runs again;
- a plan to its tasks at the point (`coord.models.plan.rewind.plan_past`).

A pattern that ended before the point is part of the copy's past (its events are among the
rows the copy takes as recorded) and is not copied; one started after the point is not copied
either: the copy's chain starts what it would start (its votes), and nothing else is started
on the copy's behalf."""

from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel

from coord.models.aggregator.spec import AggregatorRewind, AggregatorSpec, AggregatorState
from coord.models.events.envelope import LIFECYCLE_NOTICES
from coord.models.events.rewind import RewindOrigin
from coord.models.events.timeline import TimelineEntry
from coord.models.saga.spec import RecordedStep, SagaRewind, SagaSpec, SagaState
from coord.models.vote.spec import VoteRewind, VoteSpec, VoteState
from coord.models.wire.specs import MAX_NAME


class PatternRun(BaseModel):
    """A run of one of the correlation's patterns, as visibility lists it."""

    workflow_id: str
    started_at: datetime
    closed_at: datetime | None = None
    parent: str | None = None
    """The workflow that started it (a chain's or a plan's vote): that one's rewind covers it."""

    def spanning(self, other: "PatternRun") -> "PatternRun":
        """Two runs of one workflow (continued as new) as one: from the first start to the
        last close (None while either runs)."""
        closed = None
        if self.closed_at is not None and other.closed_at is not None:
            closed = max(self.closed_at, other.closed_at)
        started = min(self.started_at, other.started_at)
        return self.model_copy(update={"started_at": started, "closed_at": closed})

    def at_work(self, point: TimelineEntry) -> bool:
        """Started on its own before the point, and not ended before it."""
        ended_before = self.closed_at is not None and self.closed_at < point.time
        return self.parent is None and self.started_at < point.time and not ended_before


def time_left(deadline: datetime | None, point: TimelineEntry) -> timedelta | None:
    """What a deadline had left at the point (None: the copy waits as long as a new one)."""
    return None if deadline is None else max(deadline - point.time, timedelta())


def aggregator_past(
    spec: AggregatorSpec,
    record: AggregatorState,
    before: Sequence[TimelineEntry],
    *,
    run: PatternRun,
    point: TimelineEntry,
    origin: RewindOrigin,
) -> AggregatorRewind | None:
    """The slots `spec`'s aggregator held just before `point`, from the rows `before` it that
    it heard: every one with `lookback`, else those recorded once it ran, and those its record
    names as filling a slot. None when it had ended by then: its event is in the past."""
    if record.emitted is not None and record.emitted.event.id in {r.event_id for r in before}:
        return None
    named = {slot.event_id for slot in record.slots if slot.event_id}
    join = spec.new_join()
    for row in before:
        heard = spec.lookback or row.time >= run.started_at or row.event_id in named
        if heard and row.event not in LIFECYCLE_NOTICES:
            join.offer(row.to_envelope(), row.time)
    if join.satisfied:
        return None
    return AggregatorRewind(
        of=origin, slots=join.received, time_left=time_left(record.deadline, point)
    )


def vote_past(
    spec: VoteSpec,
    record: VoteState,
    before: Sequence[TimelineEntry],
    *,
    point: TimelineEntry,
    origin: RewindOrigin,
) -> VoteRewind | None:
    """The ballots `spec`'s vote counted just before `point`: those whose `BallotCast` the rows
    `before` it hold. None when it had decided by then: its outcome is in the past."""
    source = f"/vote/{spec.vote_id}"
    own = [row for row in before if row.agent == source]
    if any(row.event == "DecisionMade" for row in own):
        return None
    cast = {str(row.payload.get("voter")) for row in own if row.event == "BallotCast"}
    opened = next((row.event_id for row in own if row.event == "VoteOpened"), None)
    return VoteRewind(
        of=origin,
        ballots=[ballot for ballot in record.ballots if ballot.voter in cast and ballot.counted],
        opened=opened,
        time_left=time_left(record.deadline, point),
    )


def saga_past(
    spec: SagaSpec, record: SagaState, before: Sequence[TimelineEntry], *, origin: RewindOrigin
) -> SagaRewind | None:
    """The saga's first steps that had completed before the point, as the copy reuses them.
    None when every step had: the saga's outcome is in the past."""
    ids = {row.event_id for row in before}
    events = {row.event_id: row for row in record.events}
    steps: list[RecordedStep] = []
    for done in sorted(record.completed_steps, key=lambda d: d.step):
        event = events.get(done.event_id)
        if done.step != len(steps) + 1 or done.event_id not in ids or event is None:
            break
        steps.append(RecordedStep(name=done.name, result=event.payload, event=event))
    return None if len(steps) >= len(spec.steps) else SagaRewind(of=origin, steps=steps)


def copy_name(name: str, original: str, copy_id: str) -> str:
    """A copied pattern's own id (a vote's, a saga's): the original's with the correlation id
    in it replaced by the copy's, or the copy's appended; what `coord diff` pairs them by."""
    named = name.replace(original, copy_id) if original in name else f"{name}-{copy_id}"
    return named[:MAX_NAME]
