"""A saga's history budget: what keeps a valid saga within the server's history limits (50 MiB
and 51,200 events by default, past which the server terminates the run: nothing compensated,
nothing parked, no record).

Two checks, both keeping room to compensate every completed step:
- at the edge (`carried_problem`, part of the spec's validation): every run of the saga, each
  step and each compensation, carries the saga's `input` (its command event) and its agent's
  inline declaration; the spec is refused, naming the field, when those alone would take more
  than SPEC_CARRIED_BUDGET of history;
- in the run (`HistoryBudget`): what the spec cannot tell (results, handed to every later step;
  retries; detours) is caught before each step. Once the history, as the SDK reports it at the
  start of the workflow task (recorded in the task's started event, so replay sees the same),
  has passed FORWARD_BYTES or FORWARD_EVENTS, the saga goes no further: the step fails
  `history_budget` unrun and the saga unwinds as for any failed step. What is left (a fifth of
  each limit) is for the compensations, each of which carries less than the step it undoes
  did (its command and that step's result, where the step carried the results of all those
  before it)."""

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json

HISTORY_LIMIT_BYTES = 50 * 1024 * 1024
"""The server's history size limit (`limit.historySize.error`, its default)."""
HISTORY_LIMIT_EVENTS = 51_200
"""The server's history length limit (`limit.historyCount.error`, its default)."""
FORWARD_BYTES = HISTORY_LIMIT_BYTES * 4 // 5
"""The history size (40 MiB) past which a saga runs no further step."""
FORWARD_EVENTS = HISTORY_LIMIT_EVENTS * 4 // 5
"""The history length (40,960 events) past which a saga runs no further step."""
SPEC_CARRIED_BUDGET = 8 * 1024 * 1024
"""The most history (8 MiB) the spec's own bytes may take, carried by every run of the saga:
well under FORWARD_BYTES, so the results have room, and the compensations' share (at most
half) well under what is kept for them."""
TAKEN_BEFORE: dict[str, bool] = {"taken_before_the_history_budget": True}
"""The validation context of a spec a run took before this check existed (its replay, a dead
letter of its compensation): not held to SPEC_CARRIED_BUDGET, or it would now fail where it
ran (`carried_checked`)."""


def carried_checked(context: object) -> bool:
    """Whether a spec validated with `context` is held to SPEC_CARRIED_BUDGET."""
    return context != TAKEN_BEFORE


@dataclass(frozen=True)
class HistoryBudget:
    """The history a saga's run may reach before each step: FORWARD_BYTES and FORWARD_EVENTS,
    or a smaller size a test sets (`contract.SAGA_HISTORY_BUDGET_MEMO`, never written by
    coord's starters: `lowered`)."""

    size: int = FORWARD_BYTES
    length: int = FORWARD_EVENTS

    @classmethod
    def lowered(cls, size: object) -> "HistoryBudget":
        """The default, or a smaller positive size if one is given (anything else ignored: a
        start is not trusted, and a budget past the server's limit would be no budget)."""
        if type(size) is int and 0 < size < FORWARD_BYTES:
            return cls(size=size)
        return cls()

    def passed(self, size: int, length: int) -> bool:
        """Whether a history of `size` bytes and `length` events leaves no room for a step:
        two comparisons, asked before every step."""
        return size >= self.size or length >= self.length

    def reason(self, size: int, length: int) -> str:
        """Why the step was not run, for the saga's record."""
        return (
            f"not run: the saga's history ({size:,} bytes, {length:,} events) passed its budget "
            f"({self.size:,} bytes or {self.length:,} events), the rest is kept for compensating"
        )


def carried_problem(
    data: dict[str, Any], agents: Mapping[str, BaseModel], runs: list[str]
) -> str | None:
    """Why a saga's `runs` (the agent of each step and compensation) would carry more than
    SPEC_CARRIED_BUDGET of its history, naming the field that carries most (`input`, or an
    inline agent's declaration), or None. Each run's command holds the input (`data`), and its
    request the declaration of the agent it runs, if `agents` has one: serialized once each,
    when the spec is validated."""
    total_runs = len(runs)
    by_agent = Counter(runs)
    carried = {"input": len(to_json(data)) * total_runs}
    for agent, config in agents.items():
        carried[f"agents.{agent}"] = len(config.model_dump_json()) * by_agent[agent]
    total = sum(carried.values())
    if total <= SPEC_CARRIED_BUDGET:
        return None
    field = max(carried, key=lambda name: carried[name])
    return (
        f"{field}: carried by each of the saga's {total_runs:,} runs (its steps and their "
        f"compensations), the spec would take {total:,} bytes of its history, more than the "
        f"{SPEC_CARRIED_BUDGET:,} it may take (docs/trust.md#bounds)"
    )
