"""What a rewound copy takes as it stood, what it is sent again, and what it makes anew.

A correlation's log, read in its logical order (the chain's sequence numbers), splits at the
rewind point, the event the copy starts from:
- every row before the point is **recorded**: the copy takes it as it stands and runs no agent
  for it (its state just before the point is the fold of these rows), unless the point caused
  it: events a saga sends its chain together may arrive, and be numbered, out of causal order;
- a row at or after the point is **re-delivered** when its cause lies before the point or
  outside the log: it came from outside (a publisher, a timer, a person) or from an agent run
  that began before the point, whose recorded result the copy reuses; the point itself is always
  re-delivered. They reach the copy in their original order and relative timing;
- the other rows are **regenerated**: they were caused by an event at or after the point, so
  the copy, handling that event for real with its own agents and specs, makes its own.

The log must be whole up to the point (it still starts at the correlation's first event): a copy
built on a partial past would run from a state the original never had, so the rewind is refused
naming the missing part."""

from collections.abc import Sequence
from datetime import timedelta

from pydantic import BaseModel, Field

from coord.models.events.log import LogCheck
from coord.models.events.timeline import TimelineEntry
from coord.models.wire.errors import CoordError


class RewindRefused(CoordError, ValueError):
    """The rewind cannot be made as asked; the message says which part is missing or wrong."""


class Redelivery(BaseModel):
    """A row sent again to the copy, `after` the point as it was in the original."""

    after: timedelta
    row: TimelineEntry


class PatternCopy(BaseModel):
    """A pattern of the original copied into the rewound correlation."""

    pattern: str
    original: str
    """Its workflow id in the original correlation."""
    copy_id: str
    """Its copy's workflow id."""
    taken: int
    """What the copy took from its past: an aggregator's slots, a vote's ballots, a saga's
    steps, a plan's tasks."""


class RewindPlan(BaseModel):
    original: str
    copy_id: str
    point: str
    """The event id the copy starts from."""
    point_seq: int
    recorded: list[TimelineEntry] = Field(default_factory=list)
    redelivered: list[Redelivery] = Field(default_factory=list)
    regenerated: list[str] = Field(default_factory=list)
    """The event ids the copy makes anew (listed so a diff can say what to expect)."""
    copies: list[PatternCopy] = Field(default_factory=list)
    """The patterns at work at the point, copied with their state just before it."""

    def made_by_copies(self, events: set[str]) -> None:
        """The events from the point on of the patterns copied beside the chain (their ids in
        `events`, the point too when it is one of theirs) are their copies' to make again:
        regenerated, never re-delivered."""
        kept = []
        for item in self.redelivered:
            if item.row.event_id in events:
                self.regenerated.append(item.row.event_id)
            else:
                kept.append(item)
        self.redelivered = kept

    def schedule(self, speed: float | None) -> list[tuple[float, TimelineEntry]]:
        """When to send each re-delivered row, in seconds after the copy starts: the original
        gaps divided by `speed`, or all at once (`None` or 0), in their original order."""
        if not speed:
            return [(0.0, item.row) for item in self.redelivered]
        return [(item.after.total_seconds() / speed, item.row) for item in self.redelivered]


def plan_rewind(
    rows: Sequence[TimelineEntry], *, original: str, copy_id: str, point: str
) -> RewindPlan:
    """The rewind of `original`'s log to the event `point` (its id, or the first event of that
    type), onto the correlation `copy_id`."""
    if copy_id == original:
        raise RewindRefused(f"--as: the copy needs its own correlation id, not {original!r}")
    ordered = sorted(rows, key=lambda row: row.seq)
    at = next((row for row in ordered if row.event_id == point), None)
    at = at or next((row for row in ordered if row.event == point), None)
    if at is None:
        raise RewindRefused(
            f"--to: {point!r} is neither an event id nor an event type in the log of {original!r}"
        )
    require_whole_past(ordered, original, at.seq)
    plan = RewindPlan(original=original, copy_id=copy_id, point=at.event_id, point_seq=at.seq)
    seq_of = {row.event_id: row.seq for row in ordered}
    caused = caused_by(ordered, at.event_id)
    for row in ordered:
        if row.event_id in caused:
            plan.regenerated.append(row.event_id)
        elif row.seq < at.seq:
            plan.recorded.append(row)
        elif seq_of.get(row.causation_id or "", 0) < at.seq or row is at:
            plan.redelivered.append(Redelivery(after=max(row.time - at.time, timedelta()), row=row))
        else:
            plan.regenerated.append(row.event_id)
    return plan


def caused_by(rows: Sequence[TimelineEntry], point: str) -> set[str]:
    """The events `point` caused, directly or through others (by `causation_id` or among a
    join's `causes`), whatever their numbers."""
    children: dict[str, list[str]] = {}
    for row in rows:
        for cause in {row.causation_id, *row.causes} - {None, row.event_id}:
            assert cause is not None
            children.setdefault(cause, []).append(row.event_id)
    caused: set[str] = set()
    waiting = list(children.get(point, []))
    while waiting:
        event = waiting.pop()
        if event not in caused and event != point:
            caused.add(event)
            waiting.extend(children.get(event, []))
    return caused


def require_whole_past(ordered: Sequence[TimelineEntry], original: str, point_seq: int) -> None:
    """Refuses a log that lost its beginning. A chain numbers its events and its runs from one
    sequence, so numbers between two rows are runs, not lost events; what a chain forgets is
    always its oldest rows (its window keeps the newest), so a log is whole up to the point
    when it still starts at the first event, number 1."""
    first = ordered[0].seq
    if first != 1:
        raise RewindRefused(
            f"the log of {original!r} lacks its first events (numbers 1-{first - 1}, before the "
            f"rewind point at {point_seq}): they are no longer kept"
        )


def require_whole_log(check: LogCheck, original: str) -> None:
    """Refuses a log with a gap anywhere (a segment lost or unreadable, rows missing between
    segments, its last rows): before the point, the copy would start from a state the original
    never had; after it, the copy would miss some of what it must be sent again."""
    if not check.whole:
        raise RewindRefused(
            f"the log of {original!r} is incomplete: it lacks {check.missing()}; a rewind needs "
            "the whole log"
        )
