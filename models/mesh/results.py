"""What an agent's run hands back beside its result: progress summaries, and references to
results too large for history (kept in the payload store)."""

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

MAX_PROGRESS = 120
RESULT_REF_KEY = "result_ref"


class ResultReference(BaseModel):
    """A result too large for history: its object in the payload store, named by SHA-256, and
    the size of its data (JSON bytes). Agents that depend on it receive the data itself; the
    workflow, its history and its record hold only this."""

    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)

    def as_input(self) -> dict[str, Any]:
        """How a request's `inputs` carry it: `{"result_ref": {"sha256": ..., "bytes": ...}}`."""
        return {RESULT_REF_KEY: self.model_dump()}

    @classmethod
    def in_input(cls, value: Any) -> "ResultReference | None":
        """The reference an input value is, if it is one."""
        if not (isinstance(value, dict) and value.keys() == {RESULT_REF_KEY}):
            return None
        try:
            return cls.model_validate(value[RESULT_REF_KEY])
        except ValidationError:
            return None
