"""The dead-letter queue: list and count through visibility, show, replay with a fix, archive.

Every entry is its own `DeadLetterEntry` workflow, so listing is a visibility query paged by the
server, counting is visibility counts, and replaying or archiving is an update on one entry. Bulk
operations list the selection first (`dlq_selected`), then update each entry."""

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.workflow import UpdateMethodMultiParam

from coord.infra.temporal import task_queue
from coord.models.dlq.letter import (
    ENTRY_STATUSES,
    ArchiveRequest,
    BulkOutcome,
    DlqCounts,
    DlqEntry,
    DlqPage,
    DlqSelection,
    EntryStatus,
    EntrySummary,
    ReplayRequest,
    StatusCounts,
)
from coord.models.wire import contract
from coord.models.wire.contract import failure_message
from coord.models.wire.specs import SpecError, parse_model
from coord.starter.api.common import NotFound, Undeliverable, answered, api_call, described
from coord.workflows.dlq import DeadLetterEntry

UpdateRequest = TypeVar("UpdateRequest", ReplayRequest, ArchiveRequest)
DEFAULT_PAGE_SIZE = 50
LIST_PAGE_SIZE = 500
"""Entries per visibility page when every page is read; small enough that one page answers
quickly on a busy server."""
BULK_CONCURRENCY = 20
"""Updates a bulk replay or archive keeps in flight at once."""
ANSWER_TIME = timedelta(minutes=1)
"""How long a replay or archive waits for a worker to take the entry's update up. Once taken up
it is waited for to the end (a replay may run an agent for minutes); an entry that no worker takes
up in time (none runs, or it is busy with a backlog) is reported, and asking again is safe."""


PATTERN_CLAUSE = contract.pattern_clause(contract.Pattern.DLQ)


class Cursor(BaseModel):
    """What `--cursor` carries: the listing's query and the server's page token, so a cursor
    always continues the listing it came from."""

    query: str
    token: str


def dlq_query(selection: DlqSelection | None = None, *, queue: str | None = None) -> str:
    """The visibility query for the selected entries of one task queue's queue."""
    selection = selection or DlqSelection()
    wanted = {
        "TaskQueue": queue or task_queue(),
        contract.COORD_STATUS.name: selection.status,
        contract.EVENT_TYPE.name: selection.type,
        contract.TOPIC.name: selection.topic,
        contract.FAILURE_TYPE.name: selection.failure_type,
        contract.CORRELATION_ID.name: selection.correlation_id,
    }
    clauses = [f"{name} = {quoted(value)}" for name, value in wanted.items() if value]
    return " AND ".join([PATTERN_CLAUSE, *clauses])


def quoted(value: str) -> str:
    """A string literal of Temporal's visibility query language."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@api_call
async def dlq_page(
    client: Client,
    selection: DlqSelection | None = None,
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    cursor: str | None = None,
    queue: str | None = None,
) -> DlqPage:
    """One page, newest first, from visibility alone; `next_cursor` continues it."""
    query, token = decode_cursor(cursor) if cursor else (dlq_query(selection, queue=queue), None)
    listing = client.list_workflows(query, page_size=page_size, next_page_token=token)
    await listing.fetch_next_page()
    entries = [await summary_of(execution.memo) for execution in listing.current_page or []]
    next_token = listing.next_page_token
    return DlqPage(
        entries=entries, next_cursor=encode_cursor(query, next_token) if next_token else None
    )


async def summary_of(memo: Callable[[], Awaitable[Any]]) -> EntrySummary:
    return EntrySummary.model_validate((await memo())[contract.DEAD_LETTER_SUMMARY_MEMO])


@api_call
async def dlq_entries(
    client: Client, selection: DlqSelection | None = None, *, queue: str | None = None
) -> list[EntrySummary]:
    """Every selected entry, page after page."""
    query = dlq_query(selection, queue=queue)
    return [
        await summary_of(execution.memo)
        async for execution in client.list_workflows(query, page_size=LIST_PAGE_SIZE)
    ]


def encode_cursor(query: str, token: bytes) -> str:
    cursor = Cursor(query=query, token=base64.urlsafe_b64encode(token).decode())
    return base64.urlsafe_b64encode(cursor.model_dump_json().encode()).decode()


def decode_cursor(cursor: str) -> tuple[str, bytes]:
    """A cursor names its own query; one that is not a dead-letter listing is refused."""
    try:
        decoded = Cursor.model_validate_json(base64.urlsafe_b64decode(cursor.encode()))
        token = base64.urlsafe_b64decode(decoded.token.encode())
    except (ValidationError, binascii.Error, ValueError):
        decoded, token = None, b""
    if decoded is None or not decoded.query.startswith(PATTERN_CLAUSE):
        raise SpecError("--cursor: not a cursor printed by `coord dlq list`")
    return decoded.query, token


@api_call
async def dlq_entry(client: Client, entry_id: str) -> DlqEntry:
    """An entry's whole record: its result once closed, else its `entry` query (`answered`:
    NoWorker when no worker polls the entry's task queue or none answers)."""
    missing = _no_dead_letter(entry_id)
    handle = _entry_handle(client, entry_id)
    description = await described(handle, missing)
    if description.workflow_type != contract.DEAD_LETTER_WORKFLOW:
        raise missing
    if description.status == WorkflowExecutionStatus.COMPLETED:
        return await handle.result()
    if description.status != WorkflowExecutionStatus.RUNNING:
        status = description.status.name.lower() if description.status else "unknown"
        raise Undeliverable(f"dead letter {entry_id!r} was {status}; its record is in its history")
    return await answered(client, handle, DeadLetterEntry.entry)


@api_call
async def dlq_counts(
    client: Client, selection: DlqSelection | None = None, *, queue: str | None = None
) -> DlqCounts:
    """By failure type and status, with visibility counts. Visibility cannot group by a custom
    attribute, so the failure types present are found one at a time (an entry whose type is not
    yet known), then each type and status is counted: a few queries per type, whatever the
    number of entries."""
    base = dlq_query(selection, queue=queue)
    failure_type = contract.FAILURE_TYPE.name
    types: list[str] = []
    while True:
        known = f" AND {failure_type} NOT IN ({', '.join(map(quoted, types))})" if types else ""
        query = base + known
        found = [e async for e in client.list_workflows(query, limit=1, page_size=1)]
        if not found:
            break
        types.append((await summary_of(found[0].memo)).failure_type)

    async def count(kind: str, status: EntryStatus) -> int:
        query = f"{base} AND {failure_type} = {quoted(kind)}"
        query += f" AND {contract.COORD_STATUS.name} = {quoted(status)}"
        return (await client.count_workflows(query)).count

    pairs = [(kind, status) for kind in sorted(types) for status in ENTRY_STATUSES]
    numbers = await asyncio.gather(*(count(kind, status) for kind, status in pairs))
    counts = DlqCounts(by_failure_type={kind: StatusCounts() for kind in sorted(types)})
    for (kind, status), number in zip(pairs, numbers, strict=True):
        setattr(counts.by_failure_type[kind], status, number)
        setattr(counts.total, status, getattr(counts.total, status) + number)
    return counts


@api_call
async def dlq_replay(
    client: Client,
    entry_id: str,
    payload: dict[str, Any] | None = None,
    *,
    answer_time: timedelta = ANSWER_TIME,
) -> DlqEntry:
    """One entry delivered again (with the corrected payload, if given: SpecError when it is
    not one an event may carry)."""
    request = parse_model(ReplayRequest, {"payload": payload}, "replay")
    return await _ask(client, entry_id, DeadLetterEntry.replay, request, answer_time)


@api_call
async def dlq_archive(
    client: Client, entry_id: str, note: str, *, answer_time: timedelta = ANSWER_TIME
) -> DlqEntry:
    """Close one entry without delivering it, saying why (`note`)."""
    request = ArchiveRequest(note=note)
    return await _ask(client, entry_id, DeadLetterEntry.archive, request, answer_time)


async def _ask(
    client: Client,
    entry_id: str,
    update: UpdateMethodMultiParam[[DeadLetterEntry, UpdateRequest], DlqEntry],
    request: UpdateRequest,
    answer_time: timedelta,
) -> DlqEntry:
    """One update sent to one entry, given `answer_time` for a worker to accept it."""
    handle = _entry_handle(client, entry_id)
    started = handle.start_update(
        update, request, wait_for_stage=WorkflowUpdateStage.ACCEPTED, rpc_timeout=answer_time
    )
    return await _updated(client, entry_id, started)


@api_call
async def dlq_selected(
    client: Client, selection: DlqSelection, *, queue: str | None = None
) -> list[str]:
    """The parked entries of a selection, listed before a bulk operation changes them."""
    parked = selection.model_copy(update={"status": "parked"})
    entry_ids = [entry.entry_id for entry in await dlq_entries(client, parked, queue=queue)]
    if not entry_ids:
        raise Undeliverable("no parked entry matches the selection")
    return entry_ids


@api_call
async def dlq_replay_many(
    client: Client,
    entry_ids: Sequence[str],
    payload: dict[str, Any] | None = None,
    *,
    answer_time: timedelta = ANSWER_TIME,
) -> list[BulkOutcome]:
    """Replay each entry (with the corrected payload when there is one entry); one refusal
    does not stop the others, and each outcome says how its entry went."""
    if payload is not None and len(entry_ids) > 1:
        raise SpecError("--payload: a corrected payload replaces one entry's payload, not several")
    return await _each(
        entry_ids, lambda entry_id: dlq_replay(client, entry_id, payload, answer_time=answer_time)
    )


@api_call
async def dlq_archive_many(
    client: Client, entry_ids: Sequence[str], note: str, *, answer_time: timedelta = ANSWER_TIME
) -> list[BulkOutcome]:
    """Archive each entry with `note`; one refusal does not stop the others."""
    return await _each(
        entry_ids, lambda entry_id: dlq_archive(client, entry_id, note, answer_time=answer_time)
    )


async def _each(
    entry_ids: Sequence[str], operation: Callable[[str], Awaitable[DlqEntry]]
) -> list[BulkOutcome]:
    """Each entry updated on its own, a bounded number at a time; one entry's refusal does not
    stop the others."""
    slots = asyncio.Semaphore(BULK_CONCURRENCY)

    async def one(entry_id: str) -> BulkOutcome:
        async with slots:
            try:
                entry = await operation(entry_id)
            except (Undeliverable, NotFound) as refusal:
                missing = isinstance(refusal, NotFound)
                return BulkOutcome(
                    entry_id=entry_id, status=None, detail=str(refusal), missing=missing
                )
            return outcome_of(entry)

    return list(await asyncio.gather(*(one(entry_id) for entry_id in entry_ids)))


def outcome_of(entry: DlqEntry) -> BulkOutcome:
    if entry.status == "archived":
        detail = entry.archive_note or ""
    else:
        detail = entry.replays[-1].outcome if entry.replays else ""
    return BulkOutcome(entry_id=entry.entry_id, status=entry.status, detail=detail)


async def _updated(
    client: Client, entry_id: str, update: Awaitable[WorkflowUpdateHandle[DlqEntry]]
) -> DlqEntry:
    """The update once a worker took it up, to its end. A refused update (the entry is no longer
    parked, say) or one no worker took up in time becomes one clear error naming the entry (a
    bulk operation prints one line an entry); NotFound when there is no such entry."""
    try:
        return await (await update).result()
    except WorkflowUpdateFailedError as error:
        raise Undeliverable(f"{entry_id}: {failure_message(error)}") from None
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise Undeliverable(
            f"{entry_id}: no worker took it up in time (is one running on its task queue?); "
            "ask again: an entry acts once"
        ) from None
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
    raise await _why_closed(client, entry_id)


def _entry_handle(client: Client, entry_id: str) -> WorkflowHandle[DeadLetterEntry, DlqEntry]:
    """The entry's handle. An id of another kind (a chain's, a saga's: not `dlq-`) is refused
    at once: the server would answer for that workflow, whose record is not an entry's."""
    if not entry_id.startswith(contract.DEAD_LETTER_ID_PREFIX):
        raise _no_dead_letter(entry_id)
    return client.get_workflow_handle_for(DeadLetterEntry.run, entry_id)


def _no_dead_letter(entry_id: str) -> NotFound:
    """An entry is a workflow, so an id naming none is NotFound, as a saga's or plan's is."""
    return NotFound(f"no dead letter {entry_id!r}")


async def _why_closed(client: Client, entry_id: str) -> NotFound | Undeliverable:
    """An update that found no running entry: there is none, or it is replayed or archived."""
    try:
        description = await client.get_workflow_handle(entry_id).describe()
    except RPCError:
        return _no_dead_letter(entry_id)
    status = description.typed_search_attributes.get(contract.COORD_STATUS)
    return Undeliverable(f"{entry_id} is {status or 'closed'}, not parked")
