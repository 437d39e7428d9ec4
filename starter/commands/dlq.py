"""`coord dlq list|counts|show|replay|archive`: the dead-letter queue from the terminal."""

from collections.abc import Awaitable, Callable
from typing import Annotated

import typer
from temporalio.client import Client

from coord.models.dlq.letter import ArchiveRequest, BulkOutcome, DlqSelection, ReplayRequest
from coord.models.wire.specs import SpecError, parse_json_object, parse_model
from coord.starter import api, render
from coord.starter.commands.common import connect, echo_json, runs_async, show_record
from coord.starter.exits import ExitCode

app = typer.Typer(
    no_args_is_help=True, help="The dead-letter queue: investigate, fix, replay, archive."
)
EventType = Annotated[str | None, typer.Option("--type", help="Only events of this type")]
Topic = Annotated[str | None, typer.Option(help="Only events of this topic")]
FailureType = Annotated[str | None, typer.Option(help="Only this failure type")]
Correlation = Annotated[str | None, typer.Option(help="Only this correlation id")]
EntryIds = Annotated[list[str] | None, typer.Argument(metavar="[ID]...")]
Everything = Annotated[bool, typer.Option("--all", help="Every parked entry matching")]
BULK_FILTERS = ("type", "topic", "failure_type", "correlation_id")
"""The options of replay and archive that select entries with --all."""
JsonOutput = Annotated[bool, typer.Option("--json", help="The page as JSON")]


def selection(
    *,
    type: str | None,
    topic: str | None,
    failure_type: str | None,
    correlation_id: str | None,
    status: str | None = None,
) -> DlqSelection:
    return parse_model(
        DlqSelection,
        {
            "type": type,
            "topic": topic,
            "failure_type": failure_type,
            "correlation_id": correlation_id,
            "status": status,
        },
        "dead-letter filter",
    )


async def on_chosen_entries(
    ctx: typer.Context,
    act: Callable[[Client, list[str]], Awaitable[list[BulkOutcome]]],
    line: Callable[[BulkOutcome], str],
    undone: str | None = None,
) -> None:
    """What replay and archive share, reading their common options from the command line's
    parsed parameters (`ctx.params`): the entries named, or --all of those the filters select
    (never a silent bulk operation by default); `act` on them; one line per entry, each naming
    it, and exit code 5 when an entry named does not exist, else 1 when any was refused or left
    in the status `undone` (a replay that ran and parked its entry again: not delivered)."""
    client = await connect()
    entry_ids, everything = list(ctx.params["entry_ids"] or []), ctx.params["everything"]
    if bool(entry_ids) == everything:
        raise SpecError("give entry ids, or --all (with --type and the other filters)")
    filters = selection(**{name: ctx.params[name] for name in BULK_FILTERS})
    chosen = entry_ids or await api.dlq_selected(client, filters)
    outcomes = await act(client, chosen)
    for outcome in outcomes:
        typer.echo(line(outcome) if outcome.status else f"refused: {outcome.detail}")
    if any(outcome.missing for outcome in outcomes):
        raise typer.Exit(ExitCode.NOT_FOUND)
    if any(outcome.status in (None, undone) for outcome in outcomes):
        raise typer.Exit(ExitCode.REFUSED)


@app.command("list")
@runs_async
async def list_entries(
    type: EventType = None,
    topic: Topic = None,
    failure_type: FailureType = None,
    correlation_id: Correlation = None,
    status: Annotated[
        str | None, typer.Option(help="parked, replaying, replayed or archived")
    ] = "parked",
    page_size: Annotated[int, typer.Option(min=1, max=1000, help="Entries per page")] = 50,
    cursor: Annotated[
        str | None, typer.Option(help="Continue a listing (its filters come with it)")
    ] = None,
    json_output: JsonOutput = False,
) -> None:
    """List dead letters, newest first, a page at a time (the DLQ table)."""
    chosen = selection(
        type=type,
        topic=topic,
        failure_type=failure_type,
        correlation_id=correlation_id,
        status=status,
    )
    page = await api.dlq_page(await connect(), chosen, page_size=page_size, cursor=cursor)
    show_record(page, json_output, lambda listed: render.dlq_table(listed.entries))
    if page.next_cursor and not json_output:
        typer.echo(f"\nnext page: coord dlq list --cursor {page.next_cursor}")


@app.command("counts")
@runs_async
async def counts(
    json_output: Annotated[bool, typer.Option("--json", help="The counts as JSON")] = False,
) -> None:
    """Dead letters by failure type and status, with the action each calls for."""
    show_record(await api.dlq_counts(await connect()), json_output, render.dlq_counts_table)


@app.command("show")
@runs_async
async def show(entry_id: str) -> None:
    """Show one dead letter in full (JSON). One whose event could not be read from the payload
    store also says, on stderr, which stored object it waits for."""
    entry = await api.dlq_entry(await connect(), entry_id)
    echo_json(entry)
    if entry.stored_object and entry.status == "parked":
        typer.echo(
            f"note: {entry.entry_id} waits for stored object {entry.stored_object}: a replay "
            "reads it again from the worker's payload store, and delivers it once it is there",
            err=True,
        )


@app.command("replay")
@runs_async
async def replay(
    ctx: typer.Context,
    entry_ids: EntryIds = None,
    everything: Everything = False,
    payload: Annotated[
        str | None, typer.Option(help="Fix and replay: the corrected payload")
    ] = None,
    type: EventType = None,
    topic: Topic = None,
    failure_type: FailureType = None,
    correlation_id: Correlation = None,
) -> None:
    """Deliver dead letters again to their targets, optionally with a corrected payload."""
    fixed = parse_json_object(payload, "--payload") if payload is not None else None
    request = parse_model(ReplayRequest, {"payload": fixed}, "replay", {"payload": "--payload"})
    await on_chosen_entries(
        ctx,
        lambda client, chosen: api.dlq_replay_many(client, chosen, request.payload),
        lambda o: f"{o.entry_id}: {o.status}, {o.detail}",
        undone="parked",
    )


@app.command("archive")
@runs_async
async def archive(
    ctx: typer.Context,
    entry_ids: EntryIds = None,
    note: Annotated[str, typer.Option(help="Why it is not recoverable")] = "",
    everything: Everything = False,
    type: EventType = None,
    topic: Topic = None,
    failure_type: FailureType = None,
    correlation_id: Correlation = None,
) -> None:
    """Archive dead letters with a note."""
    request = parse_model(ArchiveRequest, {"note": note}, "archive", {"note": "--note"})
    await on_chosen_entries(
        ctx,
        lambda client, chosen: api.dlq_archive_many(client, chosen, request.note),
        lambda o: f"{o.entry_id}: archived ({o.detail})",
    )
