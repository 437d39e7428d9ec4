"""Read models rebuilt by replaying a correlation's log (the query side of the log): each view
is a pure fold, `step(view, row) -> view`, over the log's rows in sequence order, so the same
view comes out whether it is kept up to date row by row as events arrive or rebuilt from the
whole log later, page by page.

- `table`: the correlation table (`coord events C` shows it): one row per event.
- `agents`: per-agent activity. An agent's run publishes its events caused by the run's
  trigger, so a run is one (agent, causation id) pair; it failed when one of its events is the
  chain's failure event (a payload with an `error`), else it succeeded."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from coord.models.events.timeline import TimelineEntry


class TableView(BaseModel):
    """The correlation table: every row, in the log's order."""

    rows: list[TimelineEntry] = Field(default_factory=list)


class AgentActivity(BaseModel):
    """What one agent (an event source) did in the correlation."""

    agent: str
    events: int = 0
    runs: int = 0
    successes: int = 0
    failures: int = 0
    last_event: str = ""
    last_seq: int = 0
    run_causes: set[str] = Field(default_factory=set, exclude=True)
    """The causation ids of its runs (to count each run once); not shown."""
    failed_runs: set[str] = Field(default_factory=set, exclude=True)


class AgentsView(BaseModel):
    """Per-agent activity, by agent name (sorted when shown)."""

    agents: dict[str, AgentActivity] = Field(default_factory=dict)


def table_step(view: TableView, row: TimelineEntry) -> TableView:
    view.rows.append(row)
    return view


def failed_row(row: TimelineEntry) -> bool:
    """A run's failure event: the chain publishes `{"error": ...}` as its payload."""
    return "error" in row.payload


def agents_step(view: AgentsView, row: TimelineEntry) -> AgentsView:
    """One row counted for its source: its event, its run (new cause: a new run), and the
    run's outcome (a failure event turns a success into a failure, once)."""
    activity = view.agents.setdefault(row.agent, AgentActivity(agent=row.agent))
    activity.events += 1
    activity.last_event, activity.last_seq = row.event, row.seq
    cause = row.causation_id or row.event_id
    if cause not in activity.run_causes:
        activity.run_causes.add(cause)
        activity.runs += 1
        activity.successes += 1
    if failed_row(row) and cause not in activity.failed_runs:
        activity.failed_runs.add(cause)
        activity.successes -= 1
        activity.failures += 1
    return view


@dataclass(frozen=True)
class View:
    """A view's name, how it starts and its step; `fold` runs it over rows."""

    name: str
    description: str
    start: Callable[[], Any]
    step: Callable[[Any, TimelineEntry], Any]


VIEWS: dict[str, View] = {
    "table": View(
        name="table",
        description="the correlation table: one row per event",
        start=TableView,
        step=table_step,
    ),
    "agents": View(
        name="agents",
        description="per-agent activity: events, runs, successes, failures, last event",
        start=AgentsView,
        step=agents_step,
    ),
}


def view_named(name: str) -> View:
    """The view called `name`; a ValueError naming the views there are otherwise."""
    if name not in VIEWS:
        raise ValueError(f"--replay-into: no view {name!r} (views: {', '.join(sorted(VIEWS))})")
    return VIEWS[name]


def fold(view: View, rows: Iterable[TimelineEntry], state: Any = None) -> Any:
    """The view over `rows`, from `state` (a view built over earlier rows) or from empty."""
    state = view.start() if state is None else state
    for row in rows:
        state = view.step(state, row)
    return state
