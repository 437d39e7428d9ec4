"""Rewind many: which chains a batch takes, and what became of each.

A batch picks the chains started in a window (a visibility query on the pattern and the start
time), never a copy (a copy of a copy would rewind a rewind), and rewinds each onto its own
copy named by a suffix. The copy's name is fixed by the original's, so a second run of the same
batch finds the copies the first made: it skips those whose hand-over completed, and finishes or
remakes one it left halfway, so an interrupted batch is finished by running it again."""

from collections import Counter
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, Field

from coord.models.rewind.plan import RewindRefused
from coord.models.wire import contract
from coord.models.wire.durations import parse_duration

MAX_BATCH = 10_000
"""A batch rewinds at most this many chains: a wider window is refused, to be narrowed."""
MAX_CONCURRENCY = 64


class BatchRefused(RewindRefused):
    """The batch as asked cannot run (a window too wide, options that do not fit)."""


def checked_window(since: datetime, until: datetime) -> tuple[datetime, datetime]:
    if until <= since:
        raise BatchRefused(f"--until: {until.isoformat()} is not after --since")
    return since, until


def window_query(since: datetime, until: datetime, queue: str) -> str:
    """The visibility query of the chains started in [since, until) on the coordinator's queue
    `queue`: a server shared by several coordinators rewinds only this one's chains."""
    checked_window(since, until)
    if "'" in queue:
        raise BatchRefused(f"{contract.TASK_QUEUE_ENV}: {queue!r} holds a quote")
    pattern = contract.pattern_clause(contract.Pattern.CHAIN)
    started = f"StartTime >= '{since.isoformat()}' AND StartTime < '{until.isoformat()}'"
    return f"{pattern} AND TaskQueue = '{queue}' AND {started}"


def copy_name(original: str, suffix: str) -> str:
    if not suffix.strip():
        raise BatchRefused("--suffix: give a non-empty suffix, the copies' names end with it")
    return f"{original}{suffix}"


class LineStatus(StrEnum):
    REWOUND = "rewound"
    SKIPPED = "skipped"
    """Its copy already exists (an earlier run of the batch made it)."""
    FILTERED = "filtered"
    """Its first event does not match `--where`."""
    REFUSED = "refused"
    """It could not be rewound (an incomplete log, no event of the asked type, ...)."""


class Resumed(StrEnum):
    """How a rewound line took up a copy an earlier run of the batch left unfinished (its
    hand-over interrupted: `ChainState.rewind_complete` unset)."""

    FINISHED = "finished"
    """The copy still ran: it was sent the part of its hand-over it lacked."""
    REMADE = "remade"
    """The copy had ended: it was made again, its log removed first."""


class BatchLine(BaseModel):
    """What the batch did with one correlation."""

    original: str
    copy_id: str
    status: LineStatus
    resumed: Resumed | None = None
    point: str | None = None
    """The event the copy starts from."""
    recorded: int = 0
    reason: str | None = None


class BatchReport(BaseModel):
    lines: list[BatchLine] = Field(default_factory=list)

    def counts(self) -> dict[LineStatus, int]:
        """How many correlations of each status, every status named (zero included)."""
        found = Counter(line.status for line in self.lines)
        return {status: found[status] for status in LineStatus}


def describe(line: BatchLine) -> str:
    """The line `coord rewind --all` prints for one correlation."""
    if line.status is LineStatus.REWOUND:
        rewound = (
            f"{line.original} -> {line.copy_id}: rewound at {line.point} "
            f"({line.recorded} events taken as recorded)"
        )
        return rewound + (RESUMED_NOTES[line.resumed] if line.resumed else "")
    if line.status is LineStatus.SKIPPED:
        return f"{line.original} -> {line.copy_id}: skipped, the copy already exists"
    return f"{line.original}: {line.status.value}: {line.reason}"


RESUMED_NOTES = {
    Resumed.FINISHED: ", finishing the copy an earlier run left unfinished",
    Resumed.REMADE: ", made again: an earlier run left the copy unfinished and it had ended",
}


def count_line(counts: dict[LineStatus, int]) -> str:
    return ", ".join(f"{n} {status.value}" for status, n in counts.items())


def instant(value: str, now: datetime, option: str) -> datetime:
    """`--since`/`--until`: an ISO 8601 time (UTC when it names no zone) or a duration ago
    (`2h`: two hours before now)."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        ago = parse_duration(value)
        if not isinstance(ago, timedelta):
            raise BatchRefused(
                f"{option}: {value!r} is neither an ISO 8601 time nor a duration ago (2h)"
            ) from None
        return now - ago
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
