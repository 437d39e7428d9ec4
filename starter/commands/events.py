"""`coord publish` sends an event where it belongs; `coord events` reads a correlation's."""

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import RenderableType
from rich.live import Live
from rich.text import Text
from temporalio.client import Client

from coord.models.aggregator.spec import AggregatorSpec
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.events.timeline import TimelineEntry
from coord.models.wire.specs import SpecError, parse_json_object, parse_model, read_document
from coord.starter import api, render
from coord.starter.commands.aggregator import load_aggregator_spec
from coord.starter.commands.common import AsJson, check_agents, connect, echo_json, runs_async

app = typer.Typer()


def load_publish_spec(path: Path, correlation_id: str | None) -> ChainSpec | AggregatorSpec:
    """`--spec` takes a chain spec, or an aggregator spec (it has an `aggregator_id`)."""
    document = read_document(path)
    if isinstance(document, dict) and "aggregator_id" in document:
        return load_aggregator_spec(path, correlation_id)
    spec = parse_model(ChainSpec, document, str(path))
    check_agents(path, spec)
    return spec


@app.command()
@runs_async
async def publish(
    type: Annotated[str, typer.Option("--type", help="Event type")],
    source: Annotated[str, typer.Option(help="Who publishes it, e.g. /product-strategist")],
    correlation_id: Annotated[
        str | None, typer.Option(help="The chain it belongs to (or use --all-chains)")
    ] = None,
    topic: Annotated[str | None, typer.Option(help="Routing topic")] = None,
    payload: Annotated[str | None, typer.Option(help="Payload as a JSON object")] = None,
    payload_file: Annotated[Path | None, typer.Option(help="Payload from a JSON/YAML file")] = None,
    priority: Annotated[str, typer.Option(help="low, normal, high or critical")] = "normal",
    event_id: Annotated[
        str | None, typer.Option("--id", help="Event id (retries reuse it)")
    ] = None,
    spec_file: Annotated[
        Path | None, typer.Option("--spec", help="Chain spec: start the chain if it does not exist")
    ] = None,
    all_chains: Annotated[
        bool, typer.Option(help="Deliver to every running chain (topic-wide alerts)")
    ] = False,
    to: Annotated[str | None, typer.Option("--to", help="Deliver to this workflow id only")] = None,
    as_json: AsJson = False,
) -> None:
    """Publish an event to its correlation's chain and aggregators, one workflow, or every chain."""
    if not correlation_id and not all_chains and not to:
        raise SpecError("give --correlation-id, --to or --all-chains")
    if payload is not None and payload_file is not None:
        raise SpecError("--payload and --payload-file: give one or the other")
    body: object = {}
    if payload is not None:
        body = parse_json_object(payload, "--payload")
    elif payload_file is not None:
        body = read_document(payload_file)
    header = {"type": type, "source": source, "correlation_id": correlation_id}
    if event_id is not None:
        header["id"] = event_id
    envelope = parse_model(
        EventEnvelope,
        {"event": header, "payload": body, "routing": {"topic": topic, "priority": priority}},
        "event",
    )
    spec = load_publish_spec(spec_file, correlation_id) if spec_file else None
    client = await connect()
    if all_chains:
        delivery = await api.broadcast(client, envelope)
        target = delivery.describe(f"{len(delivery.reached)} running chains")
    else:
        delivery = await api.deliver(client, envelope, spec=spec, to=to)
        target = delivery.describe()
    if as_json:
        published = {"event_id": envelope.event.id, "type": envelope.event.type}
        typer.echo(json.dumps({**published, **delivery.model_dump()}))
    else:
        typer.echo(f"published {envelope.event.id} ({envelope.event.type}) to {target}")


@app.command()
@runs_async
async def events(
    correlation_id: str,
    tree: Annotated[bool, typer.Option(help="Show which event caused which")] = False,
    follow: Annotated[
        bool, typer.Option(help="Keep printing new events until the chain ends")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per timeline row (JSON Lines)")
    ] = False,
) -> None:
    """Print the correlation table (or causation tree) of a chain and its sagas' events, then
    the tokens the correlation's language-model runs used (when any reported usage)."""
    client = await connect()
    timeline = await api.correlation_events(client, correlation_id)
    view = render.causation_tree if tree else render.timeline_table
    if follow and not as_json and render.console().is_terminal:
        await follow_live(client, correlation_id, timeline, view)
    else:
        show_rows(timeline, view, as_json)
        if follow:
            await follow_rows(client, correlation_id, timeline, as_json)
    if not as_json:
        await show_tokens(client, correlation_id)


def show_rows(
    timeline: list[TimelineEntry],
    view: Callable[[list[TimelineEntry]], RenderableType],
    as_json: bool,
) -> None:
    if as_json:
        for entry in timeline:
            echo_json(entry, one_line=True)
    else:
        render.show(view(timeline))


async def show_tokens(client: Client, correlation_id: str) -> None:
    """`Tokens: 1,234 (1,000 in, 234 out) in 3 runs of gpt-4o`, under the table."""
    usage = await api.correlation_tokens(client, correlation_id)
    if usage.runs:
        render.show(Text(f"Tokens: {usage.describe()}"))


async def follow_live(
    client: Client,
    correlation_id: str,
    timeline: list[TimelineEntry],
    view: Callable[[list[TimelineEntry]], RenderableType],
) -> None:
    """On a terminal: the table (or tree) redrawn in place as events arrive."""
    with Live(
        view(timeline), console=render.console(), auto_refresh=False, vertical_overflow="visible"
    ) as live:
        async for later in later_timelines(client, correlation_id):
            live.update(view(later), refresh=True)


async def follow_rows(
    client: Client, correlation_id: str, timeline: list[TimelineEntry], as_json: bool
) -> None:
    """Piped: each new event as one more row (or JSON line) under what was printed."""
    shown = {entry.event_id for entry in timeline}
    async for later in later_timelines(client, correlation_id):
        for entry in later:
            if entry.event_id not in shown:
                if as_json:
                    echo_json(entry, one_line=True)
                else:
                    render.show(render.timeline_table([entry], show_header=False))
                shown.add(entry.event_id)


async def later_timelines(
    client: Client, correlation_id: str
) -> AsyncIterator[list[TimelineEntry]]:
    """The correlation's timeline once a second, until its chain ends."""
    while await chain_still_running(client, correlation_id):
        await asyncio.sleep(1)
        yield await api.correlation_events(client, correlation_id)


async def chain_still_running(client: Client, correlation_id: str) -> bool:
    """False once the chain has ended, or when there is none (sagas' events alone)."""
    try:
        return await api.chain_running(client, correlation_id)
    except api.NotFound:
        return False
