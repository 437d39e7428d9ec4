"""Parking a dead letter: starting its entry's workflow from any client, the `park_dead_letter`
activity's (for workflows) and the Python API's (for events whose target has ended) alike."""

import contextlib
from datetime import UTC, datetime

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from coord.models.dlq.letter import DeadLetter, DlqEntry, dead_letter_id
from coord.models.wire.contract import (
    DEAD_LETTER_SUMMARY_MEMO,
    DEAD_LETTER_WORKFLOW,
    as_start_attributes,
)


async def park_dead_letter(
    client: Client, letter: DeadLetter, task_queue: str, *, parking: str | None = None
) -> str:
    """Starts the entry's own workflow, with an id derived from what is parked (and, for a
    workflow's park of a rejection with no readable event, from which park it is: `parking`, see
    `dead_letter_id`): parking the same failure again (a retried activity, a publisher trying
    twice) finds the entry already there, open or closed, and returns its id, while two alike
    unreadable rejections a workflow parks are two entries. Filters and the listing row are set
    at start, so the entry is listed even before a worker has run it."""
    entry_id = dead_letter_id(letter, parking)
    summary = DlqEntry(
        **letter.model_dump(), entry_id=entry_id, parked_at=datetime.now(UTC)
    ).summary()
    event = f"{letter.event.event.type} " if letter.event else ""
    with contextlib.suppress(WorkflowAlreadyStartedError):
        await client.start_workflow(
            DEAD_LETTER_WORKFLOW,
            letter.model_dump(mode="json"),
            id=entry_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=as_start_attributes(summary.search_attributes()),
            memo={DEAD_LETTER_SUMMARY_MEMO: summary.model_dump(mode="json")},
            static_summary=f"Dead letter: {event}{letter.failure_type} → {letter.target_workflow}",
        )
    return entry_id
