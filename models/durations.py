"""Human durations (`90s`, `2h`, `1d`, `1h30m`) as used by the seed's specs."""

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(rf"(?:{_PART.pattern})+")


def parse_duration(value: Any) -> Any:
    """Turn `1h30m`-style strings into timedeltas; leave everything else to pydantic
    (numbers of seconds, ISO 8601 `PT1S`, timedelta)."""
    if isinstance(value, str) and _WHOLE.fullmatch(value.strip()):
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(value.strip()))
        return timedelta(seconds=seconds)
    return value


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def format_duration(value: timedelta) -> str:
    """The inverse of parse_duration, for summaries: `2h`, `90s`, `1.5s`."""
    seconds = value.total_seconds()
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
