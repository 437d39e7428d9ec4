"""Where the example specs are: the checkout's examples/, which the package ships as
coord/examples/ (the demo runs them; `coord examples` finds or copies them)."""

from pathlib import Path

__all__ = ["EXAMPLES"]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
"""The example specs' folder, in a checkout and in an installed package alike."""
