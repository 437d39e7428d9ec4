"""Ending a process that used the Temporal SDK."""

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from coord.infra.tracing import flush_tracing


def exit_without_teardown(main: Callable[[], object]) -> NoReturn:
    """Run `main` and exit with its code, skipping interpreter teardown: the SDK's Rust runtime
    threads can abort a finalizing interpreter (temporalio/sdk-python#300), turning a clean exit
    into a crash."""
    try:
        result = main()
        code = result if isinstance(result, int) else 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    flush_tracing()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(main: Coroutine[Any, Any, object]) -> NoReturn:
    """Run a script's coroutine (as `asyncio.run` does) and end the process with exit code 0,
    or the code of a SystemExit it raises, without the interpreter's teardown, which the SDK's
    runtime threads can crash (`exit_without_teardown`). Any other exception is raised as
    usual, with its traceback."""
    exit_without_teardown(lambda: asyncio.run(main))
