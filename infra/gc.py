"""Garbage collection of stored state (`coord gc` and the worker's sweep): what has outlived its
retention and that nothing refers to any more is removed, everything else is kept and said why.

What refers to what, as the server and the store say it:
- a stored payload or result is held by each workflow marked as its owner (the workflow it was
  stored for) while that workflow exists on the server, running or closed within the namespace's
  retention (its history, result or memo may point to it), and for its retention after the mark
  was last written;
- a dead letter is parked until someone acts: one parked for longer than its retention is
  archived with a note (so it completes and its record stays readable); one replayed or archived
  longer ago than that is deleted from the server;
- a scratchpad is its plan's while the plan runs (`plan-<plan_id>` is running);
- a correlation's log is its chain's while the chain (`chain-<correlation_id>`) is on the server.

Every listing is bounded (`batch` things of each kind per run, page by page), and a run that
stops at the bound says where the next one goes on (`GcReport.next_cursor`)."""

import asyncio
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from coord.infra.event_log import SegmentStore, segment_store
from coord.infra.logs import get_logger
from coord.infra.payload_store import PayloadStoreSettings
from coord.infra.store_gc import StoreListing, store_listing
from coord.models.dlq.letter import ArchiveRequest
from coord.models.mesh.config import WorkerSettings
from coord.models.ops.retention import (
    Action,
    GcItem,
    GcReport,
    GcSettings,
    Kind,
    OwnerMark,
    RetentionSettings,
    Stored,
    Verdict,
    gc_from_env,
    log_verdict,
    owner_keys,
    retention_from_env,
    scratchpad_verdict,
    stored_kind,
    verdict,
)
from coord.models.plan.report import FINAL_REPORT_FILE, TASK_PLAN_FILE, WORKER_RESULTS_DIR
from coord.models.wire import contract
from coord.models.wire.durations import format_duration

log = get_logger("coord.gc")
ARCHIVE_ANSWER_TIME = timedelta(minutes=1)
"""How long archiving an expired dead letter waits for a worker to take the update up."""
SCRATCHPAD_FILES = (TASK_PLAN_FILE, FINAL_REPORT_FILE)


@dataclass(frozen=True)
class GcOptions:
    retention: RetentionSettings
    queue: str
    """The task queue whose dead letters are collected (`COORD_TASK_QUEUE`)."""
    batch: int = GcSettings().batch
    dry_run: bool = False
    scratchpad_root: Path | None = None
    store: PayloadStoreSettings | None = None


def options_for(
    worker: WorkerSettings, queue: str, *, dry_run: bool = False, batch: int | None = None
) -> tuple[GcOptions, GcSettings]:
    """The collection options of a worker's settings, each overridden by its environment
    variable (`COORD_RETENTION_<KIND>`, `COORD_GC_EVERY`, `COORD_GC_BATCH`), and the sweep's."""
    sweep = gc_from_env(worker.gc)
    root = Path(worker.scratchpad_root) if worker.scratchpad_root else None
    options = GcOptions(
        retention=retention_from_env(worker.retention),
        queue=queue,
        batch=batch or sweep.batch,
        dry_run=dry_run,
        scratchpad_root=root,
    )
    return options, sweep


def quoted(value: str) -> str:
    """A string literal of Temporal's visibility query language."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Collector:
    """One collection run over every kind; `dry_run` lists what would go and changes nothing."""

    def __init__(self, client: Client, options: GcOptions, now: datetime | None = None) -> None:
        self.client = client
        self.options = options
        self.now = now or datetime.now(UTC)
        self.report = GcReport()
        self._exists: dict[tuple[str, str], bool] = {}

    async def run(self, cursor: Mapping[str, str] | None = None) -> GcReport:
        cursor = cursor or {}
        store = store_listing(self.options.store or PayloadStoreSettings.load())
        await self._stored(store, cursor.get(Kind.PAYLOADS.value))
        await self._logs(cursor.get(Kind.LOGS.value))
        await self._dead_letters()
        root = self.options.scratchpad_root
        if root is not None:
            await self._scratchpads(root, cursor.get(Kind.SCRATCHPADS.value))
        return self.report

    def _add(self, kind: Kind, name: str, action: Action, reason: str) -> None:
        self.report.items.append(GcItem(kind=kind, name=name, action=action, reason=reason))
        if action not in (Action.KEPT, Action.WOULD_REMOVE, Action.WOULD_ARCHIVE):
            log.info("gc", kind=kind.value, name=name, action=action.value, reason=reason)

    async def workflow_exists(self, namespace: str, workflow_id: str) -> bool:
        """On the server in any state; a workflow of another namespace counts as existing (this
        run cannot see it, so it cannot tell it is gone)."""
        key = (namespace, workflow_id)
        if key not in self._exists:
            self._exists[key] = namespace != self.client.namespace or await self._described(
                workflow_id
            )
        return self._exists[key]

    async def _described(self, workflow_id: str) -> bool:
        try:
            await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    # --- the payload store ------------------------------------------------------------------

    async def _stored(self, store: StoreListing, after: str | None) -> None:
        page, next_name = await store.page(after, self.options.batch)
        if next_name is not None:
            self.report.next_cursor[Kind.PAYLOADS.value] = next_name
        youngest = min(self.options.retention.payloads, self.options.retention.results)
        old = [item for item in page if self.now - item.modified >= youngest]
        for key in owner_keys(old):
            await self.workflow_exists(*key)
        for item in page:
            await self._judge(store, item)

    async def _judge(self, store: StoreListing, item: Stored) -> None:
        kind = stored_kind(item)
        found = verdict(item, self.options.retention, self.now, self._exists)
        if not found.remove:
            self._add(kind, item.name, Action.KEPT, found.reason)
        elif self.options.dry_run:
            self._add(kind, item.name, Action.WOULD_REMOVE, found.reason)
        elif await store.remove(item, lambda marks: self._still_unowned(item, marks)):
            self._add(kind, item.name, Action.REMOVED, found.reason)
        else:
            self._add(kind, item.name, Action.KEPT, "stored again while it was being removed")

    def _still_unowned(self, item: Stored, marks: list[OwnerMark]) -> bool:
        """The verdict again on the marks read after the object was moved aside: an owner not
        seen before counts as existing, a fresh mark as holding it."""
        again = item.model_copy(update={"owners": marks})
        return verdict(again, self.options.retention, self.now, self._exists).remove

    # --- correlations' logs ------------------------------------------------------------------

    async def _logs(self, after: str | None) -> None:
        segments = segment_store(self.options.store)
        names = await segments.correlations(after, self.options.batch + 1)
        if len(names) > self.options.batch:
            names = names[: self.options.batch]
            self.report.next_cursor[Kind.LOGS.value] = names[-1]
        for correlation_id in names:
            await self._log(segments, correlation_id)

    async def _log(self, segments: SegmentStore, correlation_id: str) -> None:
        newest = await segments.newest(correlation_id)
        if newest is None:
            return
        chain = contract.chain_workflow_id(correlation_id)
        found = log_verdict(
            correlation_id,
            await self.workflow_exists(self.client.namespace, chain),
            newest,
            self.options.retention.logs,
            self.now,
        )
        if not found.remove:
            self._add(Kind.LOGS, correlation_id, Action.KEPT, found.reason)
        elif self.options.dry_run:
            self._add(Kind.LOGS, correlation_id, Action.WOULD_REMOVE, found.reason)
        else:
            await segments.remove(correlation_id)
            self._add(Kind.LOGS, correlation_id, Action.REMOVED, found.reason)

    # --- dead letters -----------------------------------------------------------------------

    def _dlq_query(self, clauses: str) -> str:
        pattern = contract.pattern_clause(contract.Pattern.DLQ)
        return f"{pattern} AND TaskQueue = {quoted(self.options.queue)} AND {clauses}"

    async def _dead_letters(self) -> None:
        retention = self.options.retention.dead_letters
        cutoff = _iso(self.now - retention)
        status = contract.COORD_STATUS.name
        parked = self._dlq_query(
            f"{status} = 'parked' AND ExecutionStatus = 'Running' AND StartTime < '{cutoff}'"
        )
        closed = self._dlq_query(
            f"{status} IN ('replayed', 'archived') AND ExecutionStatus = 'Completed'"
            f" AND CloseTime < '{cutoff}'"
        )
        note = f"expired: parked for more than {format_duration(retention)} (coord gc)"
        async for execution in self.client.list_workflows(parked, limit=self.options.batch):
            await self._archive(execution.id, note)
        async for execution in self.client.list_workflows(closed, limit=self.options.batch):
            await self._delete(execution.id, execution.run_id)

    async def _archive(self, entry_id: str, note: str) -> None:
        kind = Kind.DEAD_LETTERS
        if self.options.dry_run:
            self._add(kind, entry_id, Action.WOULD_ARCHIVE, note)
            return
        handle = self.client.get_workflow_handle(entry_id)
        try:
            await handle.execute_update(
                contract.ARCHIVE_UPDATE, ArchiveRequest(note=note), rpc_timeout=ARCHIVE_ANSWER_TIME
            )
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            self._add(kind, entry_id, Action.FAILED, "no worker took the archive up in time")
        except (WorkflowUpdateFailedError, RPCError) as error:
            self._add(kind, entry_id, Action.FAILED, contract.failure_message(error))
        else:
            self._add(kind, entry_id, Action.ARCHIVED, note)

    async def _delete(self, entry_id: str, run_id: str) -> None:
        kind = Kind.DEAD_LETTERS
        reason = (
            f"replayed or archived more than {format_duration(self.options.retention.dead_letters)}"
            " ago"
        )
        if self.options.dry_run:
            self._add(kind, entry_id, Action.WOULD_REMOVE, reason)
            return
        request = DeleteWorkflowExecutionRequest(
            namespace=self.client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=entry_id, run_id=run_id),
        )
        try:
            await self.client.workflow_service.delete_workflow_execution(request)
        except RPCError as error:
            self._add(kind, entry_id, Action.FAILED, error.message)
        else:
            self._add(kind, entry_id, Action.REMOVED, reason)

    # --- scratchpads ------------------------------------------------------------------------

    async def _scratchpads(self, root: Path, after: str | None) -> None:
        root = root.expanduser().resolve()
        names = list(_plan_dirs(root, after, self.options.batch + 1))
        if len(names) > self.options.batch:
            names = names[: self.options.batch]
            self.report.next_cursor[Kind.SCRATCHPADS.value] = names[-1]
        for name in names:
            await self._scratchpad(root, name)

    async def _scratchpad(self, root: Path, name: str) -> None:
        directory = root / name
        newest = await asyncio.to_thread(_newest, directory)
        if newest is None:
            return
        plan_id = directory.name
        found: Verdict = scratchpad_verdict(
            plan_id,
            newest,
            await self._plan_running(plan_id),
            self.options.retention.scratchpads,
            self.now,
        )
        if not found.remove:
            self._add(Kind.SCRATCHPADS, name, Action.KEPT, found.reason)
        elif self.options.dry_run:
            self._add(Kind.SCRATCHPADS, name, Action.WOULD_REMOVE, found.reason)
        else:
            left = await asyncio.to_thread(_remove_scratchpad, directory)
            reason = found.reason + (f"; left what the plan did not write: {left}" if left else "")
            self._add(Kind.SCRATCHPADS, name, Action.REMOVED, reason)

    async def _plan_running(self, plan_id: str) -> bool:
        handle = self.client.get_workflow_handle(contract.plan_workflow_id(plan_id))
        try:
            description = await handle.describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return description.status == WorkflowExecutionStatus.RUNNING


def _subdirectories(directory: Path) -> list[str]:
    """Real directories only: a symbolic link is never followed out of the root."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(entry.name for entry in entries if entry.is_dir(follow_symlinks=False))


def _plan_dirs(root: Path, after: str | None, limit: int) -> Iterator[str]:
    """`<directory>/<plan_id>` of the scratchpads under `root`, in order, after `after`."""
    count = 0
    for outer in _subdirectories(root):
        for plan_id in _subdirectories(root / outer):
            name = f"{outer}/{plan_id}"
            if (after and name <= after) or count == limit:
                continue
            count += 1
            yield name


def _layout_files(directory: Path) -> list[Path]:
    """The files a plan writes there (the scratchpad layout), regular files only."""
    files = [directory / name for name in SCRATCHPAD_FILES]
    results = directory / WORKER_RESULTS_DIR
    if results.is_dir() and not results.is_symlink():
        files += [results / name for name in os.listdir(results) if name.endswith(".json")]
    return [path for path in files if path.is_file() and not path.is_symlink()]


def _newest(directory: Path) -> datetime | None:
    """When the plan last wrote its scratchpad; None: not a scratchpad (nothing of the layout)."""
    files = _layout_files(directory)
    if not files:
        return None
    return max(datetime.fromtimestamp(path.lstat().st_mtime, UTC) for path in files)


def _remove_scratchpad(directory: Path) -> str:
    """The layout's files and then its directories, if nothing else is in them; what is left."""
    for path in _layout_files(directory):
        path.unlink(missing_ok=True)
    for emptied in (directory / WORKER_RESULTS_DIR, directory):
        try:
            emptied.rmdir()
        except OSError:
            continue
    return ", ".join(sorted(os.listdir(directory))) if directory.exists() else ""


async def sweep_forever(client: Client, options: GcOptions, every: timedelta) -> None:
    """The worker's periodic sweep: a collection run every `every`, each going on where the last
    stopped; a run that fails is logged and the next one tries again."""
    cursor: dict[str, str] = {}
    while True:
        await asyncio.sleep(every.total_seconds())
        try:
            report = await Collector(client, options).run(cursor)
        except Exception as error:  # the sweep outlives any one run's trouble
            log.warning("gc sweep failed", error=f"{type(error).__name__}: {error}")
            continue
        cursor = report.next_cursor
        log.info("gc sweep", **report.counts(), more=bool(cursor))
