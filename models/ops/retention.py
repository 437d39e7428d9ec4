"""Retention of what the product stores outside workflow histories, and what `coord gc` and the
worker's sweep decide about each stored thing: kept (and why) or removed (and why).

Five kinds of stored things outlive the workflows that made them unless something removes them:
payloads stored by reference (large events, inputs and query results), results stored by
reference (an agent's result over its `result_limit`), parked dead letters (one open workflow
each), plans' scratchpads and correlations' logs (their chains' segments). Each has a retention:
how old it must be before it may go. Age alone never removes anything: a stored payload also needs
every workflow that stored it to be gone from the server, a scratchpad its plan to have ended,
and a log its chain to be gone (`verdict`, `scratchpad_verdict`, `log_verdict`)."""

import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coord.models.wire.durations import Duration, format_duration
from coord.models.wire.specs import SpecError, describe_validation_error

MAX_BATCH = 100_000
M = TypeVar("M", bound=BaseModel)


class Kind(StrEnum):
    """What a retention applies to; the names of `worker.retention`'s fields."""

    PAYLOADS = "payloads"
    RESULTS = "results"
    DEAD_LETTERS = "dead_letters"
    SCRATCHPADS = "scratchpads"
    LOGS = "logs"


class RetentionSettings(BaseModel):
    """`worker: {retention: {...}}` in an agents file; `COORD_RETENTION_<KIND>` overrides one."""

    model_config = ConfigDict(extra="forbid")

    payloads: Duration = timedelta(days=7)
    """Stored payloads (large events, inputs, query results). Anything a workflow that still
    exists on the server stored is kept whatever its age; the age covers a payload a client
    stored before the server recorded its workflow (a start or signal in flight)."""
    results: Duration = timedelta(days=7)
    """Results stored by reference (a plan task's result over `result_limit`); the same rule, its
    owner being the workflow whose agent run stored it."""
    dead_letters: Duration = timedelta(days=30)
    """A dead letter parked this long is archived (with a note saying so); one replayed or
    archived this long ago is deleted from the server, if its namespace keeps it that long."""
    scratchpads: Duration = timedelta(days=30)
    """A plan's scratchpad untouched this long, whose plan is no longer running, is removed."""
    logs: Duration = timedelta(days=1)
    """A correlation's log (its chain's segments in the payload store) goes with its chain: once
    the chain's runs are gone from the server (the namespace's retention removed them) and
    nothing was written to the log for this long."""

    def of(self, kind: Kind) -> timedelta:
        retention: timedelta = getattr(self, kind.value)
        return retention


class GcSettings(BaseModel):
    """`worker: {gc: {...}}`: the worker's periodic sweep, off unless `every` is set."""

    model_config = ConfigDict(extra="forbid")

    every: Duration | None = None
    """How often the worker sweeps (`6h`, say); none: never (`coord gc` still works)."""
    batch: int = Field(default=1000, ge=1, le=MAX_BATCH)
    """The most stored things of each kind one run examines; the next run goes on from there."""


ENV_PREFIX = "COORD_RETENTION_"
GC_EVERY_ENV = "COORD_GC_EVERY"
GC_BATCH_ENV = "COORD_GC_BATCH"


def retention_from_env(
    settings: RetentionSettings, environ: Mapping[str, str] | None = None
) -> RetentionSettings:
    """`settings` with each `COORD_RETENTION_<KIND>` set in the environment in place of the file's
    value; a bad value is refused naming the variable."""
    environ = os.environ if environ is None else environ
    overrides = {
        kind.value: environ[name]
        for kind in Kind
        if (name := ENV_PREFIX + kind.value.upper()) in environ
    }
    merged = {**settings.model_dump(), **overrides}
    return _validated(RetentionSettings, merged, {k: ENV_PREFIX + k.upper() for k in overrides})


def gc_from_env(settings: GcSettings, environ: Mapping[str, str] | None = None) -> GcSettings:
    """`settings` with `COORD_GC_EVERY` and `COORD_GC_BATCH` in place of the file's values."""
    environ = os.environ if environ is None else environ
    names = {"every": GC_EVERY_ENV, "batch": GC_BATCH_ENV}
    overrides = {field: environ[name] for field, name in names.items() if name in environ}
    merged = {**settings.model_dump(), **overrides}
    return _validated(GcSettings, merged, {field: names[field] for field in overrides})


def _validated(model: type[M], data: object, sources: Mapping[str, str]) -> M:
    """Validated, a refusal naming the environment variable when one supplied the field, else
    the agents file's `worker.<section>.<field>`."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        field = str(error.errors()[0]["loc"][0]) if error.errors()[0]["loc"] else ""
        if field in sources:
            message = describe_validation_error(error).split(": ", 1)[-1]
            raise SpecError(f"{sources[field]}: {message}") from None
        raise SpecError(f"worker: {describe_validation_error(error)}") from None


class OwnerMark(BaseModel):
    """Who stored a payload: a workflow of a namespace, and when it last stored it. Written beside
    the payload by the store itself, since a payload cannot say which histories point to it."""

    model_config = ConfigDict(extra="forbid")

    workflow_id: str
    namespace: str
    kind: Literal["payloads", "results"] = "payloads"
    marked_at: datetime | None = None
    """When this owner last stored it (the mark's own modification time, filled in on reading)."""


class Stored(BaseModel):
    """One object of the payload store, as a collection run sees it."""

    name: str
    """Its place in the store (a path relative to the root, or a bucket key)."""
    modified: datetime
    owners: list[OwnerMark] = Field(default_factory=list)


class Action(StrEnum):
    KEPT = "kept"
    REMOVED = "removed"
    WOULD_REMOVE = "would remove"
    ARCHIVED = "archived"
    WOULD_ARCHIVE = "would archive"
    FAILED = "failed"


class Verdict(BaseModel):
    remove: bool
    reason: str


class GcItem(BaseModel):
    """One line of `coord gc`'s report: what, its kind, what was done and why."""

    kind: Kind
    name: str
    action: Action
    reason: str


class GcReport(BaseModel):
    items: list[GcItem] = Field(default_factory=list)
    next_cursor: dict[str, str] = Field(default_factory=dict)
    """Where each kind's listing stopped when a run reached its batch; empty when it saw all."""

    def counts(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for item in self.items:
            counted[item.action.value] = counted.get(item.action.value, 0) + 1
        return counted

    @property
    def failed(self) -> bool:
        return any(item.action == Action.FAILED for item in self.items)


def _age(value: timedelta) -> str:
    """An age to the second, for reasons."""
    return format_duration(timedelta(seconds=round(value.total_seconds())))


def owner_alive(owner: OwnerMark, exists: bool, retention: timedelta, now: datetime) -> str | None:
    """Why `owner` still holds its payload (None: it does not): its workflow is still on the
    server (running, or closed within the namespace's retention), or it stored the payload less
    than `retention` ago (its workflow may not have reached the server yet)."""
    if exists:
        return f"referenced by {owner.workflow_id} (still on the server)"
    if owner.marked_at is not None and now - owner.marked_at < retention:
        return f"stored for {owner.workflow_id} {_age(now - owner.marked_at)} ago"
    return None


def verdict(
    stored: Stored,
    retentions: RetentionSettings,
    now: datetime,
    exists: Mapping[tuple[str, str], bool],
) -> Verdict:
    """Whether a stored object may go: it is older than its retention and every owner is gone.
    An object with no recorded owner (stored before owners were recorded, or with no workflow
    to name) is kept: nothing says that no history points to it."""
    if not stored.owners:
        return Verdict(remove=False, reason="owner unknown (stored before owners were recorded)")
    retention = max(retentions.of(Kind(owner.kind)) for owner in stored.owners)
    age = now - stored.modified
    if age < retention:
        return Verdict(remove=False, reason=f"younger than {format_duration(retention)}")
    for owner in stored.owners:
        key = (owner.namespace, owner.workflow_id)
        why = owner_alive(owner, exists.get(key, True), retentions.of(Kind(owner.kind)), now)
        if why:
            return Verdict(remove=False, reason=why)
    gone = ", ".join(sorted({owner.workflow_id for owner in stored.owners}))
    return Verdict(remove=True, reason=f"{_age(age)} old; its workflows are gone ({gone})")


def stored_kind(stored: Stored) -> Kind:
    """Results when every owner stored it as a result, else payloads."""
    if stored.owners and all(owner.kind == Kind.RESULTS.value for owner in stored.owners):
        return Kind.RESULTS
    return Kind.PAYLOADS


def scratchpad_verdict(
    plan_id: str, newest: datetime, plan_running: bool, retention: timedelta, now: datetime
) -> Verdict:
    """A scratchpad goes once its plan is not running and nothing in it changed for
    `retention`: a running plan still writes it, an ended one's report is read by people."""
    if plan_running:
        return Verdict(remove=False, reason=f"plan {plan_id} is running")
    age = now - newest
    if age < retention:
        return Verdict(remove=False, reason=f"written {_age(age)} ago")
    return Verdict(remove=True, reason=f"plan {plan_id} not running; untouched for {_age(age)}")


def log_verdict(
    correlation_id: str, chain_exists: bool, newest: datetime, retention: timedelta, now: datetime
) -> Verdict:
    """A correlation's log is its chain's: kept while the chain is on the server (running, or
    closed within the namespace's retention), removed once it is gone and the log untouched for
    `retention`."""
    if chain_exists:
        return Verdict(remove=False, reason=f"the chain of {correlation_id} is on the server")
    age = now - newest
    if age < retention:
        return Verdict(remove=False, reason=f"written {_age(age)} ago")
    return Verdict(
        remove=True, reason=f"the chain of {correlation_id} is gone; untouched for {_age(age)}"
    )


def owner_keys(stored: Iterable[Stored]) -> set[tuple[str, str]]:
    """Each distinct (namespace, workflow id) the objects name, so each is asked about once."""
    return {(owner.namespace, owner.workflow_id) for item in stored for owner in item.owners}
