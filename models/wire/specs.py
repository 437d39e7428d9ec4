"""Turning YAML/JSON documents into validated models, with errors that name the field."""

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

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


def untagged(tags: Collection[str]) -> WrapValidator:
    """For a tagged union (an agent's `kind:`): its members' problems placed where the user
    wrote them (`agents.a.url`). Pydantic places them under the member's tag too
    (`agents.a.http.url`), a level the document does not have; a problem's first place is
    dropped when it is one of `tags`."""

    def placed(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as error:
            problems = [_without_tag(problem, tags) for problem in error.errors()]
            raise ValidationError.from_exception_data(error.title, problems) from None

    return WrapValidator(placed)


def _without_tag(problem: ErrorDetails, tags: Collection[str]) -> InitErrorDetails:
    """The problem as it was (its type, words and context kept), its tag out of its place."""
    location = problem["loc"]
    if location and location[0] in tags:
        location = location[1:]
    kind = PydanticCustomError(problem["type"], problem["msg"], problem.get("ctx"))
    return {"type": kind, "loc": location, "input": problem["input"]}


def _field_path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def validation_problems(error: ValidationError) -> list[str]:
    """`field: problem` each, or just the problem when it concerns the whole document (whose
    message then names its place itself)."""
    return [_placed(_field_path(loc), _message(msg)) for loc, msg in _located(error)]


def _located(error: ValidationError) -> list[tuple[tuple[int | str, ...], str]]:
    """Each problem's place and message. A tagged union's (an agent's `kind:`) is placed at
    its tag field and said as a missing field or a wrong choice are: pydantic places it at
    the object and words it in its own terms (`Unable to extract tag using discriminator`)."""
    return [_tag_problem(e) or (e["loc"], e["msg"]) for e in error.errors()]


TAG_ERRORS = ("union_tag_not_found", "union_tag_invalid")
"""Pydantic's errors of a tagged union's tag: missing, and not one of the union's."""


def _tag_problem(error: ErrorDetails) -> tuple[tuple[int | str, ...], str] | None:
    """A tag field's problem, placed at the field; None for any other problem (and for a
    union told apart by a function, which has no field to name)."""
    ctx = error.get("ctx", {})
    field = str(ctx.get("discriminator", ""))
    if error["type"] not in TAG_ERRORS or not (len(field) > 2 and field[0] == field[-1] == "'"):
        return None
    choices = f"one of {str(ctx.get('expected_tags', '')).replace(chr(39), '')}"
    if error["type"] == "union_tag_invalid":
        message = f"{ctx['tag']!r} is not {choices}"
    else:
        message = "Field required" + (f"; {choices}" if "expected_tags" in ctx else "")
    return (*error["loc"], field[1:-1]), message


def _message(message: str) -> str:
    return message.removeprefix("Value error, ")


def _placed(field: str, problem: str) -> str:
    return f"{field}: {problem}" if field else problem


def describe_validation_error(error: ValidationError) -> str:
    """`field: problem; ...`: every problem, on one line."""
    return "; ".join(validation_problems(error))


def parse_model(
    model: type[M],
    data: Any,
    source: str,
    options: Mapping[str, str] | None = None,
    *,
    context: Any = None,
) -> M:
    """`data` validated as `model` (with `context`); else a SpecError whose problems each name
    `source` and the field. `options`: the fields (by path, `routing.priority`) a command-line
    option gave, by that option, whose problem names the option instead (`--priority: ...`):
    the user typed it there, not in `source`. A document that is no mapping at all (an empty
    file, a list) is said to be that, not which model class it did not make."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as error:
        if _not_a_mapping(error):
            raise SpecError(f"{source}: {_expected_mapping(data)}") from None
        problems = [_problem(loc, msg, source, options or {}) for loc, msg in _located(error)]
        if options and any(not problem.startswith(f"{source}: ") for problem in problems):
            raise SpecError("; ".join(problems), problems) from None
        message = f"{source}: {describe_validation_error(error)}"
        raise SpecError(message, problems) from None


def _problem(
    location: tuple[int | str, ...], message: str, source: str, options: Mapping[str, str]
) -> str:
    """`source: field: problem`, or `--option: problem` for a field an option gave."""
    field = _field_path(location)
    for given, option in options.items():
        if field == given or field.startswith((f"{given}.", f"{given}[")):
            return f"{option}: {_placed(field.removeprefix(given).lstrip('.'), _message(message))}"
    return f"{source}: {_placed(field, _message(message))}"


def _not_a_mapping(error: ValidationError) -> bool:
    """The document itself is not a mapping, so no field of it could be read."""
    problems = error.errors()
    return len(problems) == 1 and not problems[0]["loc"] and problems[0]["type"] == "model_type"


def _expected_mapping(data: Any) -> str:
    if data is None or data == "":
        return "empty: expected a mapping of fields"
    kinds = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    kind = kinds.get(type(data), "a value of another kind")
    return f"expected a mapping of fields, not {kind}"


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


def load_spec(
    model: type[M],
    path: Path,
    overrides: Mapping[str, Any] | None = None,
    options: Mapping[str, str] | None = None,
) -> M:
    """`overrides` (command-line options, say) replace top-level fields before validation;
    `options` names the option that gives each field, so that its problem names the option."""
    document = read_document(path)
    if overrides and isinstance(document, dict):
        document = {**document, **overrides}
    given = {
        field: option for field, option in (options or {}).items() if field in (overrides or {})
    }
    return parse_model(model, document, str(path), given)


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
