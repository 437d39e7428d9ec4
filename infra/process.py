"""Ending a process that used the Temporal SDK."""

import os
import sys
from collections.abc import Callable
from typing import NoReturn

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
