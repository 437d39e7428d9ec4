"""Sizes of what workflows keep. One event may carry up to the server's 2 MB, so windows of kept
rows are bounded in bytes as well as in rows, and records that only describe a parked value keep
a preview of it (the value itself is in the dead-letter queue)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pydantic_core

T = TypeVar("T")

PREVIEW_BYTES = 1024
BYTES_PER_WORKFLOW_TASK = 512 * 1024
"""Payload bytes one workflow task sends at most in what it takes on or fans out (a chain's
events, a plan's agent runs, a vote's ballots, ...). The server refuses a workflow task whose
commands add up to more than 4 MB and terminates the run; a payload alone stays under the
payload store's threshold (128 KiB) or goes by reference, so several fit, with room left for
the rest of the task."""


DETAILS_CHARS = 16 * 1024
"""The most a run's current details (the UI's and `temporal workflow metadata`'s text) holds. A
record's details list its waiting slots, tasks or steps, as many as its spec names; past the
payload store's threshold (128 KiB) the server would keep a reference, which neither shows."""


def bounded_details(text: str, limit: int = DETAILS_CHARS) -> str:
    """`text` when it is at most `limit` characters; otherwise its first lines within the limit
    and one line saying how many were left out (the run's state query has them all)."""
    if len(text) <= limit:
        return text
    room = limit - 100  # the last line's
    lines = text.splitlines()
    kept: list[str] = []
    for line in lines:
        room -= len(line) + 1
        if room < 0:
            if not kept:  # one long first line: its start
                kept.append(line[: limit - 100])
            break
        kept.append(line)
    left = len(lines) - len(kept)
    return "\n".join([*kept, f"… {left} more lines not shown: the run's state has them all"])


def json_size(value: Any) -> int:
    return len(pydantic_core.to_json(value, fallback=str))


def preview(value: Any, limit: int = PREVIEW_BYTES) -> Any:
    """The value itself when its JSON is at most `limit` bytes; otherwise the start of that JSON
    and its size."""
    text = pydantic_core.to_json(value, fallback=str)
    if len(text) <= limit:
        return value
    return {"preview": text[:limit].decode(errors="ignore"), "bytes": len(text)}


def newest_within(
    rows: Sequence[T], max_rows: int, max_bytes: int, size: Callable[[T], int]
) -> list[T]:
    """The newest rows, at most `max_rows` of them and `max_bytes` in all (the newest row is
    always kept, whatever its size)."""
    kept: list[T] = []
    total = 0
    for row in reversed(rows[-max_rows:]):
        total += size(row)
        if kept and total > max_bytes:
            break
        kept.append(row)
    return kept[::-1]


@dataclass
class ByteBudget:
    """Bytes spent against a limit, for one workflow task. The first item always fits (alone,
    it is what the server takes alone); the next only within the limit."""

    limit: int = BYTES_PER_WORKFLOW_TASK
    spent: int = 0

    def full(self) -> bool:
        return self.spent >= self.limit

    def fits(self, size: int) -> bool:
        return self.spent == 0 or self.spent + size <= self.limit

    def spend(self, size: int) -> None:
        self.spent += size
