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

from coord.infra.temporal import reconnecting
from coord.infra.tracing import correlation_parent
from coord.models.aggregator.spec import AggregatorSpec
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.events.log import MAX_PAGE_ROWS, PAGE_ROWS, LogCheck
from coord.models.events.timeline import TimelineEntry
from coord.models.events.views import TableView
from coord.models.wire.specs import SpecError, parse_json_object, parse_model, read_document
from coord.starter import api, render
from coord.starter.api.correlation import correlation_running
from coord.starter.api.log import checked_page
from coord.starter.commands.aggregator import load_aggregator_spec
from coord.starter.commands.common import AsJson, check_agents, connect, echo_json, runs_async
from coord.starter.exits import ExitCode

app = typer.Typer()


def load_publish_spec(path: Path, correlation_id: str | None) -> ChainSpec | AggregatorSpec:
    """`--spec` takes a chain spec, or an aggregator spec (it has an `aggregator_id`)."""
    document = read_document(path)
    if isinstance(document, dict) and "aggregator_id" in document:
        return load_aggregator_spec(path, correlation_id)
    spec = parse_model(ChainSpec, document, str(path))
    check_agents(path, spec)
    return spec


PUBLISH_OPTIONS = {
    "event.type": "--type",
    "event.source": "--source",
    "event.correlation_id": "--correlation-id",
    "event.id": "--id",
    "event.causation_id": "--caused-by",
    "routing.topic": "--topic",
    "routing.priority": "--priority",
}
"""Each envelope field `publish` fills, by the option that gives it: a problem names the option."""


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
    caused_by: Annotated[
        str | None, typer.Option(help="The id of the event that caused this one")
    ] = None,
    spec_file: Annotated[
        Path | None, typer.Option("--spec", help="Chain spec: start the chain if it does not exist")
    ] = None,
    all_chains: Annotated[
        bool, typer.Option(help="Deliver to every running chain (topic-wide alerts)")
    ] = False,
    to: Annotated[str | None, typer.Option("--to", help="Deliver to this workflow id only")] = None,
    ack: Annotated[
        bool,
        typer.Option(
            help="Wait for the chain's answer: accepted (with its seq), duplicate, or refused "
            "(exit 13)"
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Publish an event to its correlation's chain and aggregators, one workflow, or every chain.
    With --ack, to its correlation's chain only, which answers at once what became of it."""
    if not correlation_id and not all_chains and not to:
        raise SpecError("give --correlation-id, --to or --all-chains")
    if ack and (all_chains or to):
        raise SpecError("--ack publishes to the correlation's chain: not with --to or --all-chains")
    if all_chains and (to or correlation_id):
        raise SpecError(
            "--all-chains publishes to every chain, whatever its correlation: not with --to "
            "or --correlation-id"
        )
    if spec_file and (all_chains or to):
        raise SpecError("--spec starts the correlation's chain: not with --to or --all-chains")
    body = publish_payload(payload, payload_file)
    header = {"type": type, "source": source, "correlation_id": correlation_id}
    optional = {"id": event_id, "causation_id": caused_by}
    header |= {key: value for key, value in optional.items() if value is not None}
    routing = {"topic": topic, "priority": priority}
    given = PUBLISH_OPTIONS | {"payload": "--payload-file" if payload_file else "--payload"}
    envelope = parse_model(
        EventEnvelope, {"event": header, "payload": body, "routing": routing}, "event", given
    )
    spec = load_publish_spec(spec_file, correlation_id) if spec_file else None
    client = await connect()
    if ack:
        await publish_acked(client, envelope, spec, as_json)
        return
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


def publish_payload(payload: str | None, payload_file: Path | None) -> object:
    """`--payload` (a JSON object) or `--payload-file` (JSON or YAML), or none: `{}`."""
    if payload is not None and payload_file is not None:
        raise SpecError("--payload and --payload-file: give one or the other")
    if payload is not None:
        return parse_json_object(payload, "--payload")
    if payload_file is not None:
        return read_document(payload_file)
    return {}


async def publish_acked(
    client: Client, envelope: EventEnvelope, spec: ChainSpec | AggregatorSpec | None, as_json: bool
) -> None:
    """`publish --ack`: one line, the chain's answer; a refusal exits `EVENT_REFUSED`."""
    if isinstance(spec, AggregatorSpec):
        raise SpecError("--ack publishes to a chain: --spec must be a chain spec")
    answer = await api.publish_acked(client, envelope, spec=spec)
    typer.echo(answer.model_dump_json() if as_json else answer.describe())
    if answer.verdict == "refused":
        raise typer.Exit(ExitCode.EVENT_REFUSED)


@app.command()
@runs_async
async def events(
    correlation_id: str,
    tree: Annotated[bool, typer.Option(help="Show which event caused which")] = False,
    follow: Annotated[
        bool,
        typer.Option(
            help="Keep printing new events until the correlation's chain, sagas, aggregators, "
            "plans and votes have ended"
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per timeline row (JSON Lines)")
    ] = False,
    whole_log: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every event of the chain's log, read from the store page by page (no "
            "chain: the events its sagas, aggregators, plans and votes recorded)",
        ),
    ] = False,
    since: Annotated[
        int | None,
        typer.Option(help="The log's events after this sequence number (implies --all)", min=0),
    ] = None,
    replay_into: Annotated[
        str | None,
        typer.Option(help="Rebuild a read model by replaying the whole log: table or agents"),
    ] = None,
    page_size: Annotated[
        int, typer.Option(help="Rows read from the log at a time", min=1, max=MAX_PAGE_ROWS)
    ] = PAGE_ROWS,
) -> None:
    """Print the correlation table (or causation tree) of a chain and its sagas' events, then
    the tokens the correlation's language-model runs used (when any reported usage). With
    --all, --since or --replay-into, the chain's whole log (`docs/events.md`)."""
    client = await connect()
    with correlation_parent(correlation_id):  # its reads are spans of the correlation's trace
        if replay_into is not None:
            await show_replay(client, correlation_id, replay_into, as_json, page_size)
            return
        if whole_log or since is not None:
            try:
                await show_log(client, correlation_id, since, as_json, page_size)
            except api.NotFound:
                if since is not None:
                    raise
                await show_unlogged(client, correlation_id, as_json)
            return
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


async def show_log(
    client: Client, correlation_id: str, since: int | None, as_json: bool, page_size: int
) -> None:
    """The log page by page: JSON Lines, or a table per page (one header), then the span; a
    log found incomplete says so on stderr and exits LOG_INCOMPLETE, after every row it has."""
    shown, first = 0, None
    cursor = since
    check = LogCheck(from_start=not since)
    while True:
        page = await api.read_log_page(client, correlation_id, since=cursor, page_size=page_size)
        checked_page(check, page)
        if as_json:
            for row in page.rows:
                echo_json(row, one_line=True)
        elif page.rows:
            render.show(render.timeline_table(page.rows, show_header=first is None))
        if page.rows:
            first = page.rows[0].seq if first is None else first
            shown += len(page.rows)
            cursor = page.rows[-1].seq
        if page.next_since is None:
            break
    if not as_json:
        span = f", seq {first:,}-{cursor:,}" if first is not None else ""
        render.show(Text(f"{shown:,} events{span}"))
    report_check(check, correlation_id)


async def show_unlogged(client: Client, correlation_id: str, as_json: bool) -> None:
    """`--all` for a correlation without a chain: no chain, so no log, and every event there is
    is in its sagas', aggregators', plans' and votes' records, the rows `coord events C` prints
    (NotFound when it has none of those either); a note on stderr says where they come from."""
    timeline = await api.correlation_events(client, correlation_id)
    show_rows(timeline, render.timeline_table, as_json)
    if not as_json:
        render.show(Text(f"{len(timeline):,} events"))
    typer.echo(
        f"note: {correlation_id!r} has no chain, so no log: these are the events its sagas, "
        "aggregators, plans and votes recorded",
        err=True,
    )


def report_check(check: LogCheck, correlation_id: str) -> None:
    """A warning line on stderr when the log is incomplete (then exit LOG_INCOMPLETE), or when
    part of it cannot be checked (rows written before logs numbered them)."""
    if unknown := check.unknown():
        typer.echo(f"note: the log of {correlation_id!r}: {unknown}", err=True)
    if not check.whole:
        typer.secho(
            f"warning: the log of {correlation_id!r} is incomplete: it lacks {check.missing()}",
            fg=typer.colors.YELLOW,
            err=True,
        )
        raise typer.Exit(ExitCode.LOG_INCOMPLETE)


async def show_replay(
    client: Client, correlation_id: str, view: str, as_json: bool, page_size: int
) -> None:
    """The view rebuilt from the whole log: its JSON object, or shown as a table; a log found
    incomplete says so, as `--all` does."""
    check = LogCheck()
    try:
        rebuilt = await api.replay_into(
            client, correlation_id, view, page_size=page_size, check=check
        )
    except ValueError as error:
        raise SpecError(str(error)) from None
    if as_json:
        echo_json(rebuilt, one_line=True)
    elif isinstance(rebuilt, TableView):
        render.show(render.timeline_table(rebuilt.rows))
    else:
        render.show(render.agents_activity(rebuilt))
    report_check(check, correlation_id)


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
    """The correlation's timeline once a second, until nothing of it runs: its chain, sagas,
    aggregators, plans and votes have all ended (a plan awaiting approval is followed as its
    chain is). Each round asks whether anything runs before it reads, so the last read comes
    after the end and misses none of its events. A read cut by the server recycling the
    connection is asked again."""
    running = await reconnecting(lambda: still_running(client, correlation_id))
    while running:
        await asyncio.sleep(1)
        running = await reconnecting(lambda: still_running(client, correlation_id))
        yield await reconnecting(lambda: api.correlation_events(client, correlation_id))


async def still_running(client: Client, correlation_id: str) -> bool:
    """The chain, asked directly (a chain just started may not be listed yet), else any run of
    the correlation the server lists as running."""
    try:
        if await api.chain_running(client, correlation_id):
            return True
    except api.NotFound:
        pass
    return await correlation_running(client, correlation_id)
