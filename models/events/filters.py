"""Subscription filters: CEL expressions over the envelope (`payload.severity == "high" &&
routing.topic == "project.alerts"`), evaluated by the `common-expression-language` package. The
short forms (`severity=high`, `type=APIDesignCompleted`) are sugar for equality.

Filters run inside workflow code, where the native evaluator holds the interpreter: their cost is
bounded by checking them when the spec loads (length, list macros) and by evaluating them over a
bounded view of the event (lists and strings cut short)."""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

_SHORT_FORM = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=\s*([^=].*?)\s*$")
_HEADER_FIELDS = {"id", "type", "source", "version", "correlation_id", "causation_id"}
_ROUTING_FIELDS = {"topic", "partition_key", "priority"}
_MACRO = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(")

MAX_FILTER_LENGTH = 2000
MAX_FILTER_MACROS = 2
VIEW_LIST_ITEMS = 50
VIEW_STRING_CHARS = 1000
"""A filter sees the first 50 items of each list and the first 1,000 characters of each string,
and uses at most two list macros (`all`, `exists`, `exists_one`, `map`, `filter`), so the worst
filter touches about 50 * 50 values."""


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
    """The `key=value` (comma-separated for several) becomes CEL; CEL stays CEL."""
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


ENVELOPE_PARTS = ("event", "payload", "routing")


@dataclass(frozen=True)
class CompiledFilter:
    """A filter compiled once (per expression, `compile_filter`'s cache) with the envelope's
    parts it reads: it is evaluated over those alone. Handing CEL the parts it never reads costs
    most of an evaluation (each is converted to CEL's values first) and changes no outcome: a
    name the expression does not read is never looked up."""

    program: Any
    reads: tuple[str, ...]

    def context(self, envelope: Mapping[str, Any]) -> dict[str, Any]:
        """The bounded view of the parts of `envelope` the filter reads."""
        return {part: bounded_view(envelope[part]) for part in self.reads if part in envelope}


@lru_cache(maxsize=256)
def compile_filter(expression: str) -> CompiledFilter:
    """Raises ValueError with CEL's own message when the expression does not parse, or naming
    the limit it exceeds."""
    if len(expression) > MAX_FILTER_LENGTH:
        raise ValueError(f"filter longer than {MAX_FILTER_LENGTH} characters")
    source = to_cel(expression)
    if len(_MACRO.findall(source)) > MAX_FILTER_MACROS:
        raise ValueError(f"filter uses more than {MAX_FILTER_MACROS} list macros")
    import cel  # here, not at import: its package loads a REPL's libraries (every CLI start)

    try:
        program = cel.compile(source)
    except Exception as error:  # the native parser's own error types, whatever they are
        raise ValueError(str(error)) from None
    names = set(program.variables())
    return CompiledFilter(program, tuple(part for part in ENVELOPE_PARTS if part in names))


def bounded_view(value: Any) -> Any:
    """What a filter evaluates: `value` with its lists and strings cut to the view's limits."""
    if isinstance(value, dict):
        return {key: bounded_view(item) for key, item in value.items()}
    if isinstance(value, list):
        return [bounded_view(item) for item in value[:VIEW_LIST_ITEMS]]
    if isinstance(value, str):
        return value[:VIEW_STRING_CHARS]
    return value


@dataclass(frozen=True)
class FilterOutcome:
    matched: bool
    error: str | None = None
    """Why the filter could not be evaluated on the event (which then does not match)."""


def evaluate(expression: str, envelope: Mapping[str, Any]) -> FilterOutcome:
    """Any error (a missing field, an index out of range, a division by zero, an overflow) means
    "no match", reported rather than raised: workflow code must never fail on a filter."""
    try:
        compiled = compile_filter(expression)
        result = compiled.program.execute(compiled.context(envelope))
    except Exception as error:  # the evaluator raises many types, all meaning "cannot evaluate"
        return FilterOutcome(matched=False, error=f"{type(error).__name__}: {error}")
    return FilterOutcome(matched=result is True)
