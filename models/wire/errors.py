"""The one base of the errors the Event Coordinator raises on purpose.

Every error the project defines derives from `CoordError` (besides the built-in class it always
had, `ValueError` for a spec, `RuntimeError` for a conflict, so existing `except` clauses keep
working): a script catches `coord.CoordError` to handle them all, and its message is one line
meant for the user as is (the CLI prints it after `error: `)."""


class CoordError(Exception):
    """An error the Event Coordinator raises on purpose; the message says what to do."""
