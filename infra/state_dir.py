"""Where one machine's clients, workers and embedded server keep their state by default.

The user's data directory, as `platformdirs` finds it (`$XDG_DATA_HOME/event-coordinator`, else
`~/.local/share/event-coordinator` on Linux; the platform's own elsewhere), never one relative
to the working directory: a client run from another directory than its worker must find the
payloads the worker stores and the other way round, and `coord server` started anywhere must
find the state it left.
"""

from pathlib import Path

from platformdirs import user_data_path

APP_DIR = "event-coordinator"
DESCRIBED = f"~/.local/share/{APP_DIR}"
"""The default as the docs and `--help` state it (Linux, without `$XDG_DATA_HOME`)."""


def state_dir() -> Path:
    """The per-user state directory, read from the environment on each call (tests move it)."""
    return user_data_path(APP_DIR, appauthor=False)


def payloads_dir() -> Path:
    """The default directory payload store, shared by every client and worker of the user."""
    return state_dir() / "payloads"


def server_db_file() -> Path:
    """The embedded server's default SQLite file."""
    return state_dir() / "coord.db"
