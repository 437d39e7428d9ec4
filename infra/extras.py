"""The optional parts of the distribution (its extras) and the one line a user gets when a
feature needs one that is not installed, instead of an ImportError's traceback."""

from collections.abc import Iterator
from contextlib import contextmanager

from coord.models.wire.errors import CoordError

PROJECT = "event-coordinator"
"""The distribution's name (`pip install event-coordinator`), which its metadata is read by."""
EXTRAS: dict[str, frozenset[str]] = {
    "llm": frozenset({"openai"}),
    "s3": frozenset({"aioboto3", "aiobotocore", "botocore", "boto3"}),
}
"""Each extra -> the top-level modules it brings (pyproject.toml's optional dependencies)."""


class MissingExtra(CoordError, ImportError):
    """A feature was asked for whose extra is not installed; the message names the extra."""


def install_hint(extra: str) -> str:
    return f"pip install '{PROJECT}[{extra}]'"


@contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Imports inside the block that fail for want of `extra`'s modules become MissingExtra:
    `{feature} needs the {extra} extra: pip install '...[extra]'`. Any other ImportError (a
    bug, a broken install) is raised as it is."""
    try:
        yield
    except ImportError as error:
        if (error.name or "").partition(".")[0] not in EXTRAS[extra]:
            raise
        raise MissingExtra(
            f"{feature} needs the {extra} extra, which is not installed: {install_hint(extra)}"
        ) from None
