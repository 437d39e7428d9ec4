"""The `DeadLetterQueue` entity workflow: what could not be handled waits here for a person.

Producers park entries with the `park` signal (through signal-with-start, so the queue exists
when needed). Operators list and show entries (queries), replay them, optionally with a fixed
payload, and archive them with a note (updates with validators, so a caller learns at once when
nothing matches). The queue continues-as-new before Temporal's history limits.
"""

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from models.agents import AgentRequest
    from models.chain import chain_workflow_id
    from models.dlq import (
        ArchiveRequest,
        DeadLetter,
        DlqCounts,
        DlqEntry,
        DlqSelection,
        Redelivery,
        ReplayOutcome,
        ReplayRequest,
    )
    from models.envelope import EventEnvelope
    from models.specs import SpecError, parse_model
    from workflows.common import failure_message

CLOSED_KEPT = 1000
"""Replayed and archived entries kept across continue-as-new; parked ones are always kept."""


class DlqCarry(BaseModel):
    entries: list[DlqEntry] = Field(default_factory=list)
    seq: int = 0


@workflow.defn(name="DeadLetterQueue")
class DeadLetterQueue:
    @workflow.init
    def __init__(self, carried: Any) -> None:
        try:
            carry = parse_model(DlqCarry, carried or {}, "dead-letter queue input")
        except SpecError:
            carry = DlqCarry()
        self._entries = carry.entries
        self._seq = carry.seq

    @workflow.run
    async def run(self, carried: Any) -> None:
        await workflow.wait_condition(lambda: workflow.info().is_continue_as_new_suggested())
        await workflow.wait_condition(workflow.all_handlers_finished)
        closed = [e for e in self._entries if e.status != "parked"][-CLOSED_KEPT:]
        kept = [e for e in self._entries if e.status == "parked" or e in closed]
        workflow.continue_as_new(DlqCarry(entries=kept, seq=self._seq))

    @workflow.signal
    def park(self, raw: Any) -> None:
        """Untyped on purpose: even a malformed dead letter is kept, as raw JSON."""
        try:
            letter = parse_model(DeadLetter, raw, "dead letter")
        except SpecError as error:
            now = workflow.now()
            letter = DeadLetter(
                raw=raw,
                failure_type="invalid_dead_letter",
                message=str(error),
                first_failed_at=now,
                last_failed_at=now,
            )
        self._seq += 1
        entry = DlqEntry(
            **letter.model_dump(), entry_id=f"dlq-{self._seq:06d}", parked_at=workflow.now()
        )
        self._entries.append(entry)
        asyncio.create_task(self._announce(entry))  # noqa: RUF006 - fire and forget, by design

    @workflow.query
    def entries(self, selection: DlqSelection) -> list[DlqEntry]:
        return [e for e in self._entries if e.matches(selection)]

    @workflow.query
    def counts(self) -> DlqCounts:
        counts = DlqCounts()
        for entry in self._entries:
            setattr(counts, entry.status, getattr(counts, entry.status) + 1)
            if entry.status == "parked":
                by_type = counts.by_failure_type
                by_type[entry.failure_type] = by_type.get(entry.failure_type, 0) + 1
        return counts

    @workflow.update
    async def replay(self, request: ReplayRequest) -> list[DlqEntry]:
        chosen = self._parked(request.selection)
        for entry in chosen:
            await self._replay(entry, request.payload)
        return chosen

    @replay.validator
    def _validate_replay(self, request: ReplayRequest) -> None:
        chosen = self._parked(request.selection)
        if not chosen:
            raise ValueError("no parked entry matches the selection")
        if request.payload is not None and len(chosen) > 1:
            raise ValueError("a corrected payload can replace one entry's payload, not several")
        replayable = [e for e in chosen if e.event is not None and e.target_workflow]
        if len(replayable) < len(chosen):
            raise ValueError("an entry without an event or a target cannot be replayed; archive it")

    @workflow.update
    def archive(self, request: ArchiveRequest) -> list[DlqEntry]:
        chosen = self._parked(request.selection)
        for entry in chosen:
            entry.status = "archived"
            entry.archive_note = request.note
        return chosen

    @archive.validator
    def _validate_archive(self, request: ArchiveRequest) -> None:
        if not self._parked(request.selection):
            raise ValueError("no parked entry matches the selection")

    def _parked(self, selection: DlqSelection) -> list[DlqEntry]:
        return [e for e in self._entries if e.status == "parked" and e.matches(selection)]

    async def _replay(self, entry: DlqEntry, payload: dict[str, Any] | None) -> None:
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
        redelivery = Redelivery(
            target_workflow=entry.target_workflow,
            target_agent=entry.target_agent if entry.replay == "rerun" else None,
            event=event,
        )
        try:
            if entry.replay == "run_agent" and entry.target_agent:
                await workflow.execute_activity(
                    "run_agent",
                    AgentRequest(
                        agent=entry.target_agent,
                        event=event,
                        config=entry.agent_config,
                        idempotency_key=entry.idempotency_key,
                    ),
                    start_to_close_timeout=timedelta(minutes=5),
                    retry_policy=RetryPolicy(maximum_attempts=3),
                    summary=f"replay {entry.entry_id}: {entry.target_agent}",
                )
            else:
                await workflow.execute_activity(
                    "redeliver",
                    redelivery,
                    start_to_close_timeout=timedelta(seconds=30),
                    summary=f"replay {entry.entry_id} → {entry.target_workflow}",
                )
            outcome = f"delivered as {event.event.id}"
            entry.status = "replayed"
        except ActivityError as error:
            outcome = f"not delivered: {failure_message(error)}"
        entry.replays.append(
            ReplayOutcome(at=workflow.now(), corrected=payload is not None, outcome=outcome)
        )

    async def _announce(self, entry: DlqEntry) -> None:
        """`EventDeadLettered` joins the correlation's chain, so operators' agents can react."""
        correlation_id = entry.event.event.correlation_id if entry.event else None
        if not correlation_id:
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
            },
            correlation_id=correlation_id,
            causation_id=entry.event.event.id if entry.event else None,
        )
        chain = workflow.get_external_workflow_handle(chain_workflow_id(correlation_id))
        try:
            await chain.signal("event", notice.model_dump(mode="json"))
        except ApplicationError:
            return
