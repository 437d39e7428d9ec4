"""Helpers shared by the workflows."""


def failure_message(error: BaseException) -> str:
    """The innermost message, which is the agent's own words rather than Temporal's wrapper."""
    while error.__cause__ is not None:
        error = error.__cause__
    return str(error)
