"""Where a rewound copy comes from: every pattern's copy carries it, and shows it."""

from pydantic import BaseModel, ConfigDict, Field

from coord.models.wire.specs import MAX_NAME


class RewindOrigin(BaseModel):
    """Where a rewound copy comes from: its original (a correlation, or a saga) and the point it
    starts at (an event id, or a saga's step)."""

    model_config = ConfigDict(extra="forbid")

    original: str = Field(max_length=MAX_NAME)
    at: str = Field(max_length=MAX_NAME)

    def describe(self) -> str:
        return f"rewind of {self.original} at {self.at}"

    def search_value(self) -> str:
        """`CoordRewindOf`: every copy made from one point is found by it."""
        return f"{self.original}@{self.at}"


class CopyPast(BaseModel):
    """What every pattern's rewound copy is handed at its start: where it comes from (`of`); each
    pattern's own kind adds the part of its original's past the copy takes up instead of doing it
    again (a saga's steps, a plan's tasks, an aggregator's slots, a vote's ballots)."""

    model_config = ConfigDict(extra="forbid")

    of: RewindOrigin
