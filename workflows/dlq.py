"""The `DeadLetterEntry` workflow: one parked dead letter, waiting for a person.

One small workflow per entry, so the queue has no ceiling and no hotspot: it grows with the
cluster, and it is listed and counted through visibility (its status, failure type, event type,
topic and correlation are search attributes; a listing row is its memo). Its id is derived from
what it parks, so parking the same failure twice is idempotent. Operators replay it (optionally
with a fixed payload) or archive it with an update on the entry itself; the updates follow the
SDK's safe-message-handler pattern (one lock, the entry marked `replaying` before anything is
awaited, every handler finished before the run ends or continues-as-new), so one entry's replay
has exactly one effect however many replays and archives race for it. A replayed or archived
entry's run completes with its record; a parked one stays open.
"""

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.dlq.letter import (
        CLOSED_STATUSES,
        AgentLookup,
        ArchiveRequest,
        DeadLetter,
        DeclaredAgent,
        DlqEntry,
        EntryStatus,
        Redelivery,
        ReplayOutcome,
        ReplayRequest,
    )
    from coord.models.events.envelope import LIFECYCLE_NOTICES, EventEnvelope
    from coord.models.mesh.agents import AgentRequest
    from coord.models.mesh.retry import RetryConfig
    from coord.models.wire.contract import (
        DEAD_LETTER_SUMMARY_MEMO,
        DEAD_LETTER_WORKFLOW,
        ENTRY_QUERY,
        EVENT_SIGNAL,
        FailureType,
        failure,
        failure_message,
    )
    from coord.workflows._runtime import calls, metrics
    from coord.workflows._runtime.agent_runs import RunSettings, start_agent_run
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.common import (
        NO_INPUT,
        InvalidInput,
        PlainInput,
        decode_input,
        signal_chain,
        upsert_search_attributes,
    )


REPLAY_SCHEDULE_TO_START = timedelta(seconds=10)
REPLAY_RETRY = RetryConfig(max_retries=2, max_delay=timedelta(seconds=100), no_retry_on=[])
"""A replayed agent run: three attempts, failures typed non-retryable by the agent stop it."""
"""How long a replay's agent run waits for a worker serving the agent: a person waits on the
replay for its outcome, so an agent no worker serves is reported soon (`agent_unavailable`)."""


class CarriedEntry(BaseModel):
    """A continued run's input: the entry's record so far, rather than a new letter."""

    model_config = ConfigDict(extra="forbid")

    carried: DlqEntry


@workflow.defn(name=DEAD_LETTER_WORKFLOW, sandboxed=False)
class DeadLetterEntry(metaclass=SurplusStartArguments):
    """Not sandboxed: a run is started for every parked entry, tens of thousands at a time, and
    the sandbox's per-run module re-import doubled the CPU of an entry's first task (17 ms
    against 8 ms measured). The code touches only the workflow API and its own models."""

    @workflow.init
    def __init__(self, raw: PlainInput = NO_INPUT) -> None:
        self._carried = self._carried_entry(raw)
        self._entry = self._carried or self._parked(raw)
        self._lock = asyncio.Lock()

    @workflow.run
    async def run(self, raw: PlainInput = NO_INPUT) -> DlqEntry:
        """Raw on purpose: even a dead letter that does not decode or validate is kept, as its
        JSON or its text."""
        self._publish()
        if self._carried is None:
            metrics.dead_letter_parked(self._entry)
            await self._announce()
        await workflow.wait_condition(
            lambda: self._closed() or workflow.info().is_continue_as_new_suggested()
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        if not self._closed():
            workflow.continue_as_new(CarriedEntry(carried=self._entry))
        return self._entry

    @workflow.query(name=ENTRY_QUERY)
    def entry(self) -> DlqEntry:
        return self._entry

    @workflow.update  # named `replay` (REPLAY_UPDATE) by the method: see tests/test_contract.py
    async def replay(self, request: ReplayRequest) -> DlqEntry:
        async with self._lock:
            self._require_parked()
            self._set_status("replaying")
            delivered = await self._redeliver(request.payload)
            metrics.dead_letter_replayed(self._entry, delivered)
            self._set_status("replayed" if delivered else "parked")
        return self._entry

    @replay.validator
    def _validate_replay(self, request: ReplayRequest) -> None:
        self._check_parked()
        if self._entry.event is None or not self._entry.target_workflow:
            raise ValueError("an entry without an event or a target cannot be replayed; archive it")

    @workflow.update  # named `archive` (ARCHIVE_UPDATE) by the method
    async def archive(self, request: ArchiveRequest) -> DlqEntry:
        async with self._lock:
            self._require_parked()
            self._entry.archive_note = request.note
            self._set_status("archived")
        return self._entry

    @archive.validator
    def _validate_archive(self, request: ArchiveRequest) -> None:
        self._check_parked()

    def _check_parked(self) -> None:
        """Refuses, before the update is even recorded, what is no longer parked."""
        if self._entry.status != "parked":
            raise ValueError(f"{self._entry.entry_id} is {self._entry.status}, not parked")

    def _require_parked(self) -> None:
        """Under the lock: an update accepted while another held it finds the entry changed."""
        if self._entry.status != "parked":
            raise failure(
                FailureType.NOT_PARKED,
                f"{self._entry.entry_id} is {self._entry.status}, not parked",
            )

    def _closed(self) -> bool:
        return self._entry.status in CLOSED_STATUSES

    @staticmethod
    def _carried_entry(raw: PlainInput) -> DlqEntry | None:
        try:
            return decode_input(CarriedEntry, raw, "carried dead-letter entry").carried
        except InvalidInput:
            return None

    @staticmethod
    def _parked(raw: PlainInput) -> DlqEntry:
        info = workflow.info()
        try:
            letter = decode_input(DeadLetter, raw, "dead letter")
        except InvalidInput as error:
            now = workflow.now()
            letter = DeadLetter(
                raw=error.raw,
                failure_type=FailureType.INVALID_DEAD_LETTER,
                message=str(error),
                first_failed_at=now,
                last_failed_at=now,
            )
        return DlqEntry(**letter.model_dump(), entry_id=info.workflow_id, parked_at=info.start_time)

    def _set_status(self, status: EntryStatus) -> None:
        self._entry.status = status
        self._publish()

    def _publish(self) -> None:
        """Search attributes for filters and counts, the memo for listing rows, and the
        current details for the UI: all from the record, after every change."""
        summary = self._entry.summary()
        upsert_search_attributes(summary.search_attributes())
        workflow.upsert_memo({DEAD_LETTER_SUMMARY_MEMO: summary.model_dump(mode="json")})
        workflow.set_current_details(self._details())

    def _details(self) -> str:
        entry = self._entry
        target = (entry.target_workflow or "-") + (
            f" / {entry.target_agent}" if entry.target_agent else ""
        )
        lines = [
            f"**Status:** {entry.status} · **failure:** {entry.failure_type}",
            f"**Event:** {entry.event.event.type} ({entry.event.event.id})"
            if entry.event
            else "**Event:** (invalid, kept raw)",
            f"**Target:** {target} · **attempts:** {entry.attempts}",
            f"**Message:** {entry.message}",
        ]
        lines += [f"**Replay {r.at:%H:%M:%S}:** {r.outcome}" for r in entry.replays]
        if entry.archive_note:
            lines.append(f"**Archived:** {entry.archive_note}")
        return "\n\n".join(lines)

    async def _redeliver(self, payload: dict[str, Any] | None) -> bool:
        entry = self._entry
        assert entry.event is not None and entry.target_workflow is not None
        event = EventEnvelope.new(
            entry.event.event.type,
            entry.event.event.source,
            payload=entry.event.payload if payload is None else payload,
            correlation_id=entry.event.event.correlation_id,
            causation_id=entry.event.event.id,
            topic=entry.event.routing.topic,
            priority=entry.event.routing.priority,
        )
        try:
            if entry.replay == "run_agent" and entry.target_agent:
                await self._run_agent(entry.target_workflow, entry.target_agent, event)
            else:
                await calls.execute(
                    refs.REDELIVER,
                    Redelivery(
                        target_workflow=entry.target_workflow,
                        target_agent=entry.target_agent if entry.replay == "rerun" else None,
                        event=event,
                        idempotency_key=entry.idempotency_key,
                        inputs=entry.inputs,
                    ),
                    start_to_close_timeout=timedelta(seconds=30),
                    summary=f"replay → {entry.target_workflow}",
                )
            outcome, delivered = f"delivered as {event.event.id}", True
        except ActivityError as error:
            outcome, delivered = f"not delivered: {self._failed(error)}", False
        entry.replays.append(
            ReplayOutcome(at=workflow.now(), corrected=payload is not None, outcome=outcome)
        )
        return delivered

    def _failed(self, error: ActivityError) -> str:
        """Why a replay was not delivered; a replay that ran an agent names it."""
        agent = self._entry.target_agent if self._entry.replay == "run_agent" else None
        return f"{agent}: {failure_message(error)}" if agent else failure_message(error)

    async def _run_agent(self, target_workflow: str, agent: str, event: EventEnvelope) -> None:
        """The agent as its saga declared it (read from the saga's own start), else as the
        worker's registry knows it: never a declaration carried by the entry."""
        declared: DeclaredAgent = await calls.execute(
            refs.DECLARED_AGENT,
            AgentLookup(target_workflow=target_workflow, agent=agent),
            start_to_close_timeout=timedelta(seconds=30),
            summary=f"declaration of {agent} in {target_workflow}",
        )
        request = AgentRequest(
            agent=agent,
            event=event,
            config=declared.config,
            idempotency_key=self._entry.idempotency_key,
            inputs=self._entry.inputs,
        )
        settings = RunSettings(
            summary=f"replay: {agent}",
            retry=REPLAY_RETRY,
            start_to_close=timedelta(minutes=5),
            schedule_to_start=REPLAY_SCHEDULE_TO_START,
        )
        await start_agent_run(request, settings)

    async def _announce(self) -> None:
        """`EventDeadLettered` joins the correlation's chain, so operators' agents can react.
        Awaited before the run can end or continue-as-new; never made for a lifecycle notice
        (a notice about a notice could loop). It names the parked event as its cause and
        carries that event's causation depth when the parker knew it."""
        entry = self._entry
        event = entry.event
        if event is None or not event.event.correlation_id:
            return
        if event.event.type in LIFECYCLE_NOTICES:
            return
        notice = EventEnvelope.new(
            "EventDeadLettered",
            "/dead-letter-queue",
            payload={
                "entry_id": entry.entry_id,
                "failure_type": entry.failure_type,
                "message": entry.message,
                "target_workflow": entry.target_workflow,
                "target_agent": entry.target_agent,
                "parked_event_id": event.event.id,
                "causation_depth": entry.causation_depth,
            },
            correlation_id=event.event.correlation_id,
            causation_id=event.event.id,
        )
        raw = notice.model_dump(mode="json")
        await signal_chain(event.event.correlation_id, EVENT_SIGNAL, raw)
