"""Custom search attributes every coordination workflow carries, so runs can be found in the UI
(for example `CoordStatus = 'compensated'`). Every server the project starts registers them."""

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

with workflow.unsafe.imports_passed_through():
    from coord.models.dlq import DLQ_PATTERN, EntrySummary

CORRELATION_ID = SearchAttributeKey.for_keyword("CorrelationId")
COORD_PATTERN = SearchAttributeKey.for_keyword("CoordPattern")
COORD_STATUS = SearchAttributeKey.for_keyword("CoordStatus")
FAILURE_TYPE = SearchAttributeKey.for_keyword("CoordFailureType")
EVENT_TYPE = SearchAttributeKey.for_keyword("CoordEventType")
TOPIC = SearchAttributeKey.for_keyword("CoordTopic")
"""A dead letter's failure type and the type and topic of the event it holds, so the queue is
filtered and counted by visibility (`CoordPattern = 'dlq' AND CoordFailureType = 'timeout'`)."""

ALL = (CORRELATION_ID, COORD_PATTERN, COORD_STATUS, FAILURE_TYPE, EVENT_TYPE, TOPIC)


def coordination_attributes(
    *, correlation_id: str, pattern: str, status: str
) -> dict[SearchAttributeKey[str], str]:
    return {CORRELATION_ID: correlation_id, COORD_PATTERN: pattern, COORD_STATUS: status}


def dead_letter_attributes(summary: EntrySummary) -> dict[SearchAttributeKey[str], str]:
    """A dead-letter entry's filters; what it does not have (no event, say) is left unset."""
    values = {
        COORD_PATTERN: DLQ_PATTERN,
        COORD_STATUS: summary.status,
        FAILURE_TYPE: summary.failure_type,
    }
    optional = {
        CORRELATION_ID: summary.correlation_id,
        EVENT_TYPE: summary.event_type,
        TOPIC: summary.topic,
    }
    values.update({key: value for key, value in optional.items() if value})
    return values


def as_start_attributes(values: dict[SearchAttributeKey[str], str]) -> TypedSearchAttributes:
    return TypedSearchAttributes([SearchAttributePair(key, value) for key, value in values.items()])


def upsert(values: dict[SearchAttributeKey[str], str]) -> None:
    workflow.upsert_search_attributes([key.value_set(value) for key, value in values.items()])
