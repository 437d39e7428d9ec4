"""The one base of the errors the Event Coordinator raises on purpose.

Every error the project defines derives from `CoordError` (besides the built-in class it always
had, `ValueError` for a spec, `RuntimeError` for a conflict, so existing `except` clauses keep
working): a script catches `coord.CoordError` to handle them all, and its message is one line
meant for the user as is (the CLI prints it after `error: `)."""


class CoordError(Exception):
    """An error the Event Coordinator raises on purpose; the message says what to do."""


class ServerRefused(CoordError, RuntimeError):
    """The Temporal server refused a call for a reason no other error names (its status and
    words follow the call's name); the server's own error is the `__cause__`."""


class RunFailed(CoordError, RuntimeError):
    """A run ended failed without a record to return (a spec the run itself refused); the
    message is the innermost failure's words, the workflow's failure the `__cause__`."""
