"""Human durations (`90s`, `2h`, `1d`, `1h30m`) as used by the specs."""

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
)

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(rf"(?:{_PART.pattern})+")


MIN_DURATION = timedelta(milliseconds=1)
MAX_DURATION = timedelta(days=366)
"""Every duration in a spec lies between these: Temporal refuses a zero or negative timeout
(the workflow task would fail scheduling it), and a deadline must stay a representable date."""
ACCEPTED_FORMS = "90s, 2h, 1d, 1h30m, 500ms, a number of seconds, or ISO 8601 such as PT1M30S"


def parse_duration(value: Any) -> Any:
    """Turn `1h30m`-style strings into timedeltas; leave everything else to pydantic
    (numbers of seconds, ISO 8601 `PT1S`, timedelta)."""
    if isinstance(value, str) and _WHOLE.fullmatch(value.strip()):
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(value.strip()))
        if seconds > MAX_DURATION.total_seconds():
            raise ValueError(f"must be at most {format_duration(MAX_DURATION)}")
        return timedelta(seconds=seconds)
    return value


def _within_bounds(value: timedelta) -> timedelta:
    if not MIN_DURATION <= value <= MAX_DURATION:
        raise ValueError(
            f"must be between {format_duration(MIN_DURATION)} and {format_duration(MAX_DURATION)}"
        )
    return value


def _naming_accepted_forms(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Pydantic's refusal ("invalid digit in duration") does not say what would do."""
    try:
        return handler(value)
    except ValidationError as error:
        if any(not e["type"].startswith("time_delta") for e in error.errors()):
            raise
        raise ValueError(f"{value!r} is not a duration; use {ACCEPTED_FORMS}") from None


DURATION_SCHEMA = {
    "anyOf": [{"type": "string", "minLength": 1}, {"type": "number", "exclusiveMinimum": 0}],
    "examples": ["90s", "2h", "1d", "1h30m", "500ms", 30, "PT1M30S"],
}
"""What a spec may write for a duration, in its JSON Schema: one of ACCEPTED_FORMS (the
model's own refusal names them: the schema only tells a string or a number of seconds)."""

Duration = Annotated[
    timedelta,
    WithJsonSchema(DURATION_SCHEMA, mode="validation"),
    WrapValidator(_naming_accepted_forms),
    BeforeValidator(parse_duration),
    AfterValidator(_within_bounds),
]


def format_duration(value: timedelta) -> str:
    """The inverse of parse_duration, for summaries: `2h`, `90s`, `1.5s`."""
    seconds = value.total_seconds()
    for unit in ("d", "h", "m", "s", "ms"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
