"""Where one machine's clients, workers and embedded server keep their state by default.

A per-user data directory (`$XDG_DATA_HOME/event-coordinator`, else
`~/.local/share/event-coordinator`), never one relative to the working directory: a client run
from another directory than its worker must find the payloads the worker stores and the other
way round, and `coord server` started anywhere must find the state it left.
"""

import os
from pathlib import Path

APP_DIR = "event-coordinator"
DESCRIBED = f"~/.local/share/{APP_DIR}"
"""The default as the docs and `--help` state it (without `$XDG_DATA_HOME`)."""


def state_dir() -> Path:
    """The per-user state directory, read from the environment on each call (tests move it)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path("~/.local/share").expanduser())
    return Path(base).expanduser() / APP_DIR


def payloads_dir() -> Path:
    """The default directory payload store, shared by every client and worker of the user."""
    return state_dir() / "payloads"


def server_db_file() -> Path:
    """The embedded server's default SQLite file."""
    return state_dir() / "coord.db"
