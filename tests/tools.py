"""Tools the tests' `llm` agents may be offered (`worker.tools`): one that records each call, so
a test can tell that a refused call never ran."""

from collections.abc import Mapping
from typing import Any

CALLS: list[Mapping[str, Any]] = []


def run_command(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    """What a model must never reach without the whitelist naming it."""
    CALLS.append(dict(arguments))
    return {"ran": arguments.get("command")}
