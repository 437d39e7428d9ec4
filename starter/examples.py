"""Where the example specs are: the checkout's examples/, which the package ships as
coord/examples/ (the demo runs them; `coord examples` finds or copies them), and what a copy of
them holds."""

import os
from pathlib import Path, PurePosixPath

__all__ = ["COPIED_SCHEMAS", "EXAMPLES", "SCHEMAS", "SCHEMA_LINE", "as_copied", "shipped"]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
"""The example specs' folder, in a checkout and in an installed package alike."""
SCHEMAS = EXAMPLES.parent / "schemas"
"""The spec kinds' JSON Schemas, beside the examples (schemas/, coord/schemas/)."""
SCHEMA_LINE = "# yaml-language-server: $schema="
"""An example's first line: the schema an editor checks it with, as a path from its folder."""
COPIED_SCHEMAS = "schemas"
"""Where a copy of the examples keeps the schemas they name: in the copy's own folder, since
their line's `../schemas/` would point outside it."""


def shipped() -> list[Path]:
    """The example files, relative to EXAMPLES, in order."""
    return sorted(
        path.relative_to(EXAMPLES)
        for path in EXAMPLES.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )


def as_copied(file: Path) -> tuple[bytes, str | None]:
    """The example `file` (relative to EXAMPLES) as a copy holds it, and the file name of the
    schema it names, if any: its schema line then names that schema in the copy's
    COPIED_SCHEMAS folder, where it is copied too, so an editor finds it from the copy."""
    data = (EXAMPLES / file).read_bytes()
    first, newline, rest = data.partition(b"\n")
    line = first.decode(errors="replace")
    if not line.startswith(SCHEMA_LINE):
        return data, None
    named = ((EXAMPLES / file).parent / line.removeprefix(SCHEMA_LINE)).resolve()
    if named.parent != SCHEMAS.resolve():
        return data, None
    path = PurePosixPath(os.path.relpath(Path(COPIED_SCHEMAS, named.name), file.parent))
    return f"{SCHEMA_LINE}{path}".encode() + newline + rest, named.name
