"""JSON Schemas of the spec files, from their pydantic models: what editors check a spec against
while it is written (`coord schema`, `schemas/*.json`, docs/specs.md).

The models document their fields in attribute docstrings (the string under a field), which
pydantic leaves out of a schema unless each model opts in; here every field without a
`description` of its own gets its docstring, so the schema says what the code says."""

import ast
import inspect
import itertools
import textwrap
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

DRAFT = "https://json-schema.org/draft/2020-12/schema"
"""The dialect pydantic generates, named in every schema's `$schema`."""


def attribute_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field -> the string literal right under it in the class body, for `model` and the models
    it derives from (its own win); none when its source cannot be read."""
    found: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if issubclass(klass, BaseModel) and klass is not BaseModel:
            found |= _own_docstrings(klass)
    return found


def _own_docstrings(klass: type[BaseModel]) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return {}
    body = next(node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)).body
    docs = {}
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


class DocumentedSchema(GenerateJsonSchema):
    """Pydantic's generator (draft 2020-12), with each field's docstring as its description."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        docs = attribute_docstrings(schema["cls"])
        for name, field in json_schema.get("properties", {}).items():
            if name in docs and "description" not in field:
                field["description"] = docs[name]
        return json_schema


def json_schema(model: type[BaseModel], title: str) -> dict[str, Any]:
    """The schema a spec file of `model` validates against (its input form: what may be
    written, defaults filled in by the model), titled `title`."""
    generated = model.model_json_schema(schema_generator=DocumentedSchema, mode="validation")
    return {"$schema": DRAFT, **generated, "title": title}
