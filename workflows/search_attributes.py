"""Custom search attributes every coordination workflow carries, so runs can be found in the UI
(for example `CoordStatus = 'compensated'`). Every server the project starts registers them."""

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

CORRELATION_ID = SearchAttributeKey.for_keyword("CorrelationId")
COORD_PATTERN = SearchAttributeKey.for_keyword("CoordPattern")
COORD_STATUS = SearchAttributeKey.for_keyword("CoordStatus")

ALL = (CORRELATION_ID, COORD_PATTERN, COORD_STATUS)


def coordination_attributes(
    *, correlation_id: str, pattern: str, status: str
) -> dict[SearchAttributeKey[str], str]:
    return {CORRELATION_ID: correlation_id, COORD_PATTERN: pattern, COORD_STATUS: status}


def as_start_attributes(values: dict[SearchAttributeKey[str], str]) -> TypedSearchAttributes:
    return TypedSearchAttributes([SearchAttributePair(key, value) for key, value in values.items()])


def upsert(values: dict[SearchAttributeKey[str], str]) -> None:
    workflow.upsert_search_attributes([key.value_set(value) for key, value in values.items()])
