"""The project's custom search attributes on a namespace: registered by every server the project
starts (and by `coord setup` on others), and required by a worker before it serves workflows.

A workflow upserts some of them only while it runs (`CoordAgents`, `CoordStatus`): on a namespace
without them the server would fail that workflow task again and again, so a worker refuses to
start there instead, with the one line that says what to run."""

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from coord.infra.logs import get_logger
from coord.models.wire import contract
from coord.models.wire.errors import CoordError

UNREADABLE = (RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.PERMISSION_DENIED)
"""The time-skipping test server has no operator service; a Temporal Cloud API key may not be
allowed to read it (Cloud registers search attributes through its own control plane)."""


class SetupNeeded(CoordError, RuntimeError):
    """The namespace lacks some of the project's search attributes."""

    def __init__(self, missing: list[str]) -> None:
        names = ", ".join(missing)
        super().__init__(
            f"the server does not know the search attribute{'s' if len(missing) > 1 else ''} "
            f"{names}; register the project's search attributes once with `coord setup`"
        )


async def missing_search_attributes(client: Client) -> dict[str, IndexedValueType.ValueType]:
    """The project's search attributes the namespace lacks, with their types. Raises RPCError
    when the server does not let them be read."""
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    return _lacking(set(existing.custom_attributes))


def _lacking(known: set[str]) -> dict[str, IndexedValueType.ValueType]:
    return {
        key.name: IndexedValueType.ValueType(key.indexed_value_type)
        for key in contract.SEARCH_ATTRIBUTES
        if key.name not in known
    }


async def register_search_attributes(client: Client) -> list[str]:
    """For servers started without `--search-attribute` (a plain `temporal server start-dev`,
    the time-skipping test server): adds the missing ones, returns their names."""
    try:
        missing = await missing_search_attributes(client)
    except RPCError as error:
        if error.status != RPCStatusCode.UNIMPLEMENTED:  # the time-skipping test server
            raise
        missing = _lacking(set())
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
        )
    return list(missing)


async def require_search_attributes(client: Client) -> None:
    """Raises SetupNeeded when the namespace lacks any; a server that does not let them be read
    is trusted (and told in the log)."""
    try:
        missing = await missing_search_attributes(client)
    except RPCError as error:
        if error.status not in UNREADABLE:
            raise
        get_logger("worker").warning(
            "search attributes not checked", namespace=client.namespace, error=error.message
        )
        return
    if missing:
        raise SetupNeeded(list(missing))
