"""Turning YAML/JSON documents into validated models, with errors that name the field."""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ValidationError

from coord.models.wire.errors import CoordError

M = TypeVar("M", bound=BaseModel)

IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
"""What saga, step, chain and aggregator ids may look like (they become workflow ids). Never
`~`, which joins two of them into one id (`coord.models.wire.contract.scoped_id`)."""
IDENTIFIER_OR_NONE = r"^([A-Za-z0-9][A-Za-z0-9._:-]*)?$"
"""An identifier, or "" where a spec's field may name none (a saga's, plan's or vote's
correlation)."""
SCOPED_IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9._:-]*(~[A-Za-z0-9][A-Za-z0-9._:-]*)?$"
"""An identifier, or two joined by `~` (a plan task's vote: `<plan_id>~<task_id>`)."""


class SpecError(CoordError, ValueError):
    """A spec or payload that does not validate; the message is meant for the user as is, and
    `problems` are its problems one by one (`coord validate` prints a line for each)."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems) or [message]


MAX_COUNT = 2**31 - 2
"""Counts (retries, concurrency, depths) stay inside Temporal's 32-bit fields, with room for the
first attempt that `max_retries` does not count."""
MAX_ITEMS = 1000
"""Lists in a spec (steps, subscriptions, awaited events, triggers)."""
MAX_NAME = 255
"""Identifiers that become part of a workflow id (Temporal allows 1000 characters in all)."""
MAX_JSON_DEPTH = 32
"""Nesting of user data (payloads, a saga's input). Workflows carry it inside their own records
(a chain's timeline, a dead letter) and Temporal's JSON decoding stops at 200 levels, so user data
must leave room for that wrapping."""


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep `value` nests, counting no further than `limit + 1`; iterative, so a hostile
    document cannot exhaust the interpreter's stack."""
    deepest, level = 0, [value]
    while level and deepest <= limit:
        containers = [v for v in level if isinstance(v, dict | list)]
        if not containers:
            break
        deepest += 1
        level = [c for v in containers for c in (v.values() if isinstance(v, dict) else v)]
    return deepest


SCALARS = frozenset({str, int, float, bool, type(None)})
"""The types of JSON's leaves, exactly (a subclass may be a container)."""


def _shallow(value: dict[str, Any]) -> dict[str, Any]:
    """A flat object (the usual event payload) is told by the types of its values, with no
    walk: validated once per event, the walk's `isinstance` calls cost more in the workflow
    sandbox (which wraps that builtin) than the rest of the envelope's validation."""
    if SCALARS.issuperset(map(type, value.values())):
        return value
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_shallow)]
"""A JSON object of user data, nested at most MAX_JSON_DEPTH levels."""


def _field_path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def validation_problems(error: ValidationError) -> list[str]:
    """`field: problem` each, or just the problem when it concerns the whole document (whose
    message then names its place itself)."""
    problems = []
    for e in error.errors():
        message = e["msg"].removeprefix("Value error, ")
        problems.append(f"{_field_path(e['loc'])}: {message}" if e["loc"] else message)
    return problems


def describe_validation_error(error: ValidationError) -> str:
    """`field: problem; ...`: every problem, on one line."""
    return "; ".join(validation_problems(error))


def parse_model(model: type[M], data: Any, source: str, context: Any = None) -> M:
    """`data` as a `model` (validated with `context`), or a SpecError naming each field."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as error:
        problems = [f"{source}: {problem}" for problem in validation_problems(error)]
        raise SpecError(f"{source}: {describe_validation_error(error)}", problems) from None


MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""The largest spec, payload or agents file read (an event's payload past the payload store's
threshold travels by reference, so one may well exceed the server's 2 MB)."""
MAX_DOCUMENT_VALUES = 1_000_000
"""The most values a document may hold, a YAML alias's counted each time it is named: an alias
names its anchor's value again, so a few hundred bytes of YAML can name billions, which sending
would write out."""


def read_document(path: Path) -> Any:
    """JSON, read as JSON (fast, and it has no aliases); anything else as YAML, a superset of
    JSON. Bounded in bytes, nesting and, for YAML, expanded values."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as error:
        raise SpecError(f"{path}: cannot read: {error.strerror}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise SpecError(f"{path}: larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        text = data.decode()
    except UnicodeDecodeError as error:
        raise SpecError(f"{path}: not UTF-8 text (byte {error.start} is not)") from None
    try:
        try:
            document = json.loads(text)
        except ValueError:
            document = yaml.safe_load(text)
    except RecursionError:
        raise SpecError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{path}: not valid YAML/JSON: {error}") from None
    if _values_past(document, MAX_DOCUMENT_VALUES):
        raise SpecError(
            f"{path}: more than {MAX_DOCUMENT_VALUES} values (YAML aliases count each time)"
        )
    return document


def _values_past(document: Any, limit: int) -> bool:
    """Whether `document` holds more than `limit` values, counting an alias's value each time it
    is named, and stopping there."""
    waiting, counted = [document], 0
    while waiting:
        counted += 1
        if counted > limit:
            return True
        value = waiting.pop()
        if isinstance(value, dict):
            waiting.extend(value.values())
        elif isinstance(value, list):
            waiting.extend(value)
    return False


def load_spec(model: type[M], path: Path, overrides: Mapping[str, Any] | None = None) -> M:
    """`overrides` (command-line options, say) replace top-level fields before validation."""
    document = read_document(path)
    if overrides and isinstance(document, dict):
        document = {**document, **overrides}
    return parse_model(model, document, str(path))


def parse_json_object(text: str, source: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise SpecError(f"{source}: not valid JSON: {error}") from None
    except RecursionError:
        raise SpecError(f"{source}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    if not isinstance(value, dict):
        raise SpecError(f"{source}: expected a JSON object")
    return value
