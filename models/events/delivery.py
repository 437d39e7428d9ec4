"""Where an event went when it was sent to several workflows: the targets reached, and why each
other one was skipped."""

from pydantic import BaseModel, Field


class Delivery(BaseModel):
    """Where an event went: the targets reached, and why each other one was skipped."""

    reached: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)

    def describe(self, reached: str | None = None) -> str:
        """The targets reached (or `reached`, a shorter name for them), then those skipped."""
        reached = ", ".join(self.reached) if reached is None else reached
        return f"{reached} (skipped: {'; '.join(self.skipped)})" if self.skipped else reached
