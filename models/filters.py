"""Subscription filters: CEL expressions over the envelope (`payload.severity == "high" &&
routing.topic == "project.alerts"`), evaluated by the `common-expression-language` package. The
seed's short forms (`severity=high`, `type=APIDesignCompleted`) are sugar for equality."""

import json
import re
from functools import lru_cache
from typing import Any

import cel

_SHORT_FORM = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=\s*([^=].*?)\s*$")
_HEADER_FIELDS = {"id", "type", "source", "version", "correlation_id", "causation_id"}
_ROUTING_FIELDS = {"topic", "partition_key", "priority"}


def _field(name: str) -> str:
    """`type` means the event's type, `topic` the routing topic; anything else is the payload's."""
    if "." in name:
        return name
    if name in _HEADER_FIELDS:
        return f"event.{name}"
    if name in _ROUTING_FIELDS:
        return f"routing.{name}"
    return f"payload.{name}"


def to_cel(expression: str) -> str:
    """The seed's `key=value` (comma-separated for several) becomes CEL; CEL stays CEL."""
    parts = [p for p in expression.split(",") if p.strip()]
    matches = [_SHORT_FORM.match(p) for p in parts]
    if not parts or not all(matches):
        return expression
    terms = []
    for match in matches:
        assert match is not None
        key, value = match.groups()
        path, literal = _field(key), json.dumps(value.strip('"'))
        terms.append(f"has({path}) && {path} == {literal}")
    return " && ".join(f"({t})" for t in terms)


@lru_cache(maxsize=256)
def compile_filter(expression: str) -> Any:
    """Raises ValueError with CEL's own message when the expression does not parse."""
    return cel.compile(to_cel(expression))


def matches(expression: str, envelope: dict[str, Any]) -> bool:
    """A filter that cannot be evaluated on this event (a missing field) does not match it."""
    try:
        return compile_filter(expression).execute(envelope) is True
    except (KeyError, ValueError, TypeError, RuntimeError):
        return False
