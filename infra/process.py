"""Ending a process that used the Temporal SDK."""

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from coord.infra.tracing import flush_tracing


def exit_without_teardown(main: Callable[[], object]) -> NoReturn:
    """Run `main` and exit with the code it returns (anything but an int: 0), skipping
    interpreter teardown: the SDK's Rust runtime threads can abort a finalizing interpreter
    (temporalio/sdk-python#300), turning a clean exit into a crash. A SystemExit exits as the
    interpreter would end on it (`exit_code`)."""
    try:
        result = main()
        code = result if isinstance(result, int) else 0
    except SystemExit as exit:
        code = exit_code(exit)
    flush_tracing()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def exit_code(exit: SystemExit) -> int:
    """The interpreter's rule: None is 0, an int is itself, anything else is printed and 1."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


def run(main: Coroutine[Any, Any, object]) -> NoReturn:
    """Run a script's coroutine (as `asyncio.run` does) and end the process with exit code 0,
    whatever it returns, or as a SystemExit it raises would end it, without the interpreter's
    teardown, which the SDK's runtime threads can crash (`exit_without_teardown`). Any other
    exception is raised as usual, with its traceback."""

    def whole() -> None:
        """What the script's coroutine returns is no exit code: `asyncio.run` ignores it too."""
        asyncio.run(main)

    exit_without_teardown(whole)
