"""The `DeadLetterEntry` workflow: one parked dead letter, waiting for a person.

One small workflow per entry, so the queue has no ceiling and no hotspot: it grows with the
cluster, and it is listed and counted through visibility (its status, failure type, event type,
topic and correlation are search attributes; a listing row is its memo). Its id is derived from
what it parks (and, for a rejection with no readable event, from which park it is), so a retried
park is idempotent while two alike rejections are two entries (`dead_letter_id`). Operators
replay it (optionally with a fixed payload) or archive it with an update on the entry itself; the
updates follow the SDK's safe-message-handler pattern (one lock, the entry marked `replaying`
before anything is awaited, every handler finished before the run ends or continues-as-new), so
one entry's replay has exactly one effect however many replays and archives race for it. A
replayed or archived entry's run completes with its record; a parked one stays open.

A thin shell over `coord.models.dlq.model.DeadLetterEntryModel`, which holds the entry's record
and its rules (what may be replayed, how, and what a replay's outcome does to the entry); this
keeps the updates and their lock, the replay's activity or agent run, the notice's signal, the
search attributes, memo and current details, and continue-as-new.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.dlq.letter import (
        AgentLookup,
        ArchiveRequest,
        DeadLetter,
        DeclaredAgent,
        DlqEntry,
        ReplayRequest,
    )
    from coord.models.dlq.model import CarriedEntry, DeadLetterEntryModel
    from coord.models.events.envelope import EventEnvelope
    from coord.models.mesh.retry import RetryConfig
    from coord.models.wire.contract import (
        DEAD_LETTER_SUMMARY_MEMO,
        DEAD_LETTER_WORKFLOW,
        ENTRY_QUERY,
        EVENT_SIGNAL,
        HANDLER_TEXT,
        FailureType,
        failure,
        failure_message,
        failure_type_of,
    )
    from coord.models.wire.versions import PARKS_UNKNOWN_SIGNALS_PATCH
    from coord.workflows._runtime import calls, metrics
    from coord.workflows._runtime.agent_runs import RunSettings, start_agent_run
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.common import (
        NO_INPUT,
        InvalidInput,
        PlainInput,
        decode_input,
        show_details,
        signal_chain,
        upsert_search_attributes,
    )
    from coord.workflows._runtime.unknown_signals import ParksUnknownSignals


M = TypeVar("M", bound=BaseModel)

REPLAY_SCHEDULE_TO_START = timedelta(seconds=10)
"""How long a replay's agent run waits for a worker serving the agent: a person waits on the
replay for its outcome, so an agent no worker serves is reported soon (`agent_unavailable`)."""
STORED_EVENT_RETRY = RetryPolicy(maximum_attempts=3)
"""Reading a stored event again: a person waits on the replay, so a store that does not answer
(a bucket unreachable) refuses it after three attempts; one that answers without the object
refuses it at once (`payload_unavailable`, not retried)."""
REPLAY_RETRY = RetryConfig(max_retries=2, max_delay=timedelta(seconds=100), no_retry_on=[])
"""A replayed agent run: three attempts, failures typed non-retryable by the agent stop it."""


@workflow.defn(name=DEAD_LETTER_WORKFLOW, sandboxed=False)
class DeadLetterEntry(
    ParksUnknownSignals,
    kind="a dead-letter entry",
    patch=PARKS_UNKNOWN_SIGNALS_PATCH,
    asked=True,
    metaclass=SurplusStartArguments,
):
    """Not sandboxed: a run is started for every parked entry, tens of thousands at a time, and
    the sandbox's per-run module re-import doubled the CPU of an entry's first task (17 ms
    against 8 ms measured). The code touches only the workflow API and its own models."""

    @workflow.init
    def __init__(self, raw: PlainInput = NO_INPUT) -> None:
        self._carried = self._carried_entry(raw)
        self._model = DeadLetterEntryModel(self._carried or self._parked(raw))
        self._lock = asyncio.Lock()

    @workflow.run
    async def run(self, raw: PlainInput = NO_INPUT) -> DlqEntry:
        """Raw on purpose: even a dead letter that does not decode or validate is kept, as its
        JSON or its text."""
        self._publish()
        if self._carried is None:
            metrics.dead_letter_parked(self._model.entry)
            await self._announce()
        await workflow.wait_condition(
            lambda: self._model.closed or workflow.info().is_continue_as_new_suggested()
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        if not self._model.closed:
            workflow.continue_as_new(self._model.carry())
        return self._model.entry

    @workflow.query(name=ENTRY_QUERY, description=HANDLER_TEXT[ENTRY_QUERY])
    def entry(self) -> DlqEntry:
        return self._model.entry

    @workflow.update  # named `replay` (REPLAY_UPDATE) by the method: see tests/test_contract.py
    async def replay(self, raw: PlainInput = NO_INPUT) -> DlqEntry:
        """Raw on purpose (`ReplayRequest`), as every update's: a malformed request is refused
        by the validator in one line naming the field."""
        request = _request(ReplayRequest, raw)
        async with self._changing():
            self._model.replay_started()
            self._publish()
            stored = await self._stored_event()
            await self._redeliver(request.payload, stored)
            metrics.dead_letter_replayed(self._model.entry)
        return self._model.entry

    @replay.validator
    def _validate_replay(self, raw: PlainInput = NO_INPUT) -> None:
        """Refuses, before the update is even recorded, what cannot be replayed now."""
        _request(ReplayRequest, raw)
        _refuse(self._model.not_parked())
        _refuse(self._model.replay_refusal(), FailureType.INVALID_DEAD_LETTER)

    @workflow.update  # named `archive` (ARCHIVE_UPDATE) by the method
    async def archive(self, raw: PlainInput = NO_INPUT) -> DlqEntry:
        """Raw on purpose (`ArchiveRequest`), as `replay`."""
        request = _request(ArchiveRequest, raw)
        async with self._changing():
            self._model.archive(request.note)
        return self._model.entry

    @archive.validator
    def _validate_archive(self, raw: PlainInput = NO_INPUT) -> None:
        _request(ArchiveRequest, raw)
        _refuse(self._model.not_parked())

    @contextlib.asynccontextmanager
    async def _changing(self) -> AsyncIterator[None]:
        """An update's change to a parked entry: under the lock, where an update accepted while
        another held it finds the entry changed (`not_parked`), and published once made."""
        async with self._lock:
            if refusal := self._model.not_parked():
                raise failure(FailureType.NOT_PARKED, refusal)
            yield
            self._publish()

    @staticmethod
    def _carried_entry(raw: PlainInput) -> DlqEntry | None:
        try:
            return decode_input(CarriedEntry, raw, "carried dead-letter entry").carried
        except InvalidInput:
            return None

    @staticmethod
    def _parked(raw: PlainInput) -> DlqEntry:
        try:
            letter = decode_input(DeadLetter, raw, "dead letter")
        except InvalidInput as error:
            letter = DeadLetterEntryModel.unreadable(error.raw, str(error), workflow.now())
        info = workflow.info()
        parked_at = info.start_time
        return DeadLetterEntryModel.parked(
            letter, entry_id=info.workflow_id, parked_at=parked_at
        ).entry

    def _publish(self) -> None:
        """Search attributes for filters and counts, the memo for listing rows, and the
        current details for the UI: all from the record, after every change."""
        summary = self._model.entry.summary()
        upsert_search_attributes(summary.search_attributes())
        workflow.upsert_memo({DEAD_LETTER_SUMMARY_MEMO: summary.model_dump(mode="json")})
        show_details(self._model.details())

    async def _stored_event(self) -> EventEnvelope | None:
        """The event the entry waits for, read again from the worker's payload store (by an
        activity: a workflow does no I/O); None for an entry holding its event. While it still
        cannot be read, the replay is refused, naming the object and the store, and the entry
        is parked as it was. No patch: the validator refused every replay of such an entry
        before, so no recorded history holds one."""
        digest = self._model.entry.stored_object
        if digest is None:
            return None
        try:
            return await calls.execute(
                refs.STORED_EVENT,
                digest,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=STORED_EVENT_RETRY,
                summary=f"stored object {digest}",
            )
        except ActivityError as failed:
            self._model.replay_refused()
            self._publish()
            cause = failed.cause
            why = cause.message if isinstance(cause, ApplicationError) else failure_message(failed)
            raise failure(failure_type_of(failed), why, non_retryable=True) from None

    async def _redeliver(
        self, payload: dict[str, Any] | None, stored: EventEnvelope | None
    ) -> None:
        event = self._model.replayed_event(payload, stored)
        try:
            if self._model.runs_agent:
                await self._run_agent(event)
            else:
                await calls.execute(
                    refs.REDELIVER,
                    self._model.redelivery(event),
                    start_to_close_timeout=timedelta(seconds=30),
                    summary=f"replay → {self._model.target_workflow}",
                )
            error = None
        except ActivityError as failed:
            error = failure_message(failed)
        corrected = payload is not None
        self._model.replay_ended(
            workflow.now(), corrected=corrected, error=error, event_id=event.event.id
        )

    async def _run_agent(self, event: EventEnvelope) -> None:
        """The agent as its saga declared it (read from the saga's own start), else as the
        worker's registry knows it: never a declaration carried by the entry."""
        agent, target = self._model.target_agent, self._model.target_workflow
        declared: DeclaredAgent = await calls.execute(
            refs.DECLARED_AGENT,
            AgentLookup(target_workflow=target, agent=agent),
            start_to_close_timeout=timedelta(seconds=30),
            summary=f"declaration of {agent} in {target}",
        )
        settings = RunSettings(
            summary=f"replay: {agent}",
            retry=REPLAY_RETRY,
            start_to_close=timedelta(minutes=5),
            schedule_to_start=REPLAY_SCHEDULE_TO_START,
        )
        await start_agent_run(self._model.agent_request(event, declared.config), settings)

    async def _announce(self) -> None:
        """`EventDeadLettered` joins the correlation's chain, so operators' agents can react;
        awaited before the run can end or continue-as-new."""
        notice = self._model.notice()
        if notice is not None and notice.event.correlation_id:
            raw = notice.model_dump(mode="json")
            await signal_chain(notice.event.correlation_id, EVENT_SIGNAL, raw)


def _request(model: type[M], raw: PlainInput) -> M:
    """An update's request, or an `invalid_input` refusal naming the field that does not
    validate."""
    try:
        return decode_input(model, raw, "request")
    except InvalidInput as error:
        raise failure(FailureType.INVALID_INPUT, str(error), non_retryable=True) from None


def _refuse(refusal: str | None, kind: FailureType = FailureType.NOT_PARKED) -> None:
    """An update validator's answer: a refusal rejects the update before it is recorded."""
    if refusal:
        raise failure(kind, refusal, non_retryable=True)
