"""Sizes of what workflows keep. One event may carry up to the server's 2 MB, so windows of kept
rows are bounded in bytes as well as in rows, and records that only describe a parked value keep
a preview of it (the value itself is in the dead-letter queue)."""

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pydantic_core

T = TypeVar("T")

PREVIEW_BYTES = 1024


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
