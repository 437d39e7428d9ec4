"""`coord`: the command line of the Event Coordinator."""

import asyncio
import functools
import json
import signal
from collections.abc import Callable, Coroutine
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from temporalio.client import Client
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from coord.infra.devserver import (
    PROJECT,
    embedded_server,
    local_temporal,
    register_search_attributes,
)
from coord.infra.logs import configure_logging, get_logger
from coord.infra.process import exit_without_teardown
from coord.infra.temporal import ConnectionSettings, task_queue, workflow_link
from coord.models.aggregator import AggregatorSpec
from coord.models.chain import ChainSpec
from coord.models.dlq import ArchiveRequest, BulkOutcome, DlqSelection
from coord.models.envelope import EventEnvelope
from coord.models.saga import SagaSpec
from coord.models.specs import SpecError, load_spec, parse_json_object, parse_model, read_document
from coord.starter import api, render
from coord.starter.demo import run_demo
from coord.starter.exits import ExitCode, failure_exit, one_line
from coord.starter.progress import saga_outcome_with_progress
from coord.worker import build_worker, default_registry, run_worker

app = typer.Typer(
    no_args_is_help=True, help="Event Coordinator: durable event coordination on Temporal."
)
saga_app = typer.Typer(no_args_is_help=True, help="Start, inspect and cancel sagas.")
app.add_typer(saga_app, name="saga")
chain_app = typer.Typer(no_args_is_help=True, help="Start, inspect and close reactive chains.")
app.add_typer(chain_app, name="chain")
aggregate_app = typer.Typer(no_args_is_help=True, help="Start and inspect aggregators.")
app.add_typer(aggregate_app, name="aggregate")
dlq_app = typer.Typer(
    no_args_is_help=True, help="The dead-letter queue: investigate, fix, replay, archive."
)
app.add_typer(dlq_app, name="dlq")

EventType = Annotated[str | None, typer.Option("--type", help="Only events of this type")]
Topic = Annotated[str | None, typer.Option(help="Only events of this topic")]
FailureType = Annotated[str | None, typer.Option(help="Only this failure type")]
Correlation = Annotated[str | None, typer.Option(help="Only this correlation id")]

R = TypeVar("R")
DemoAgents = Annotated[
    bool,
    typer.Option(
        "--demo-agents", help="Also serve the seed's demo agents (also $COORD_DEMO_AGENTS=1)"
    ),
]
DEFAULT_LOG_LEVELS = {"server": "INFO", "worker": "INFO", "dev": "INFO", "demo": "ERROR"}
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for tools")]
log = get_logger("coord.cli")


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"coord {metadata.version(PROJECT)}")
        raise typer.Exit()


@app.callback()
def configure(
    ctx: typer.Context,
    log_level: Annotated[
        str | None,
        typer.Option(
            help="Log level (default: INFO for server/worker/dev, ERROR for demo, else WARNING)"
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=show_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    default = DEFAULT_LOG_LEVELS.get(ctx.invoked_subcommand or "", "WARNING")
    configure_logging(log_level or default)


class Terminated(Exception):
    """The command was stopped by SIGTERM."""


async def _terminable(command: Coroutine[Any, Any, R]) -> R:
    """SIGTERM cancels the command's task, as Ctrl-C does, so its `async with` blocks stop the
    worker and the embedded server in order. (Raising from a signal handler instead made asyncio
    cancel every task at once, the worker's own included, whose shutdown then never ended.)"""
    task = asyncio.ensure_future(command)
    terminated = asyncio.Event()

    def terminate() -> None:
        terminated.set()
        task.cancel()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminate)
    try:
        return await task
    except asyncio.CancelledError:
        if terminated.is_set():
            raise Terminated from None
        raise


def runs_async(fn: Callable[..., Coroutine[Any, Any, R]]) -> Callable[..., R]:
    """Run the command's coroutine; whatever stops it becomes one line on stderr and the exit
    code the README documents (starter/exits.py), never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        try:
            return asyncio.run(_terminable(fn(*args, **kwargs)))
        except KeyboardInterrupt:
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        except Terminated:
            raise typer.Exit(ExitCode.TERMINATED) from None
        except typer.Exit:
            raise
        except Exception as error:
            code, message = failure_exit(error) or unexpected(error)
            typer.secho(f"error: {one_line(message)}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code) from None

    return wrapper


def unexpected(error: Exception) -> tuple[ExitCode, str]:
    """A bug: the line names it, the traceback goes to the log at DEBUG."""
    log.debug("unexpected error", exc_info=error)
    return ExitCode.INTERNAL, (
        f"unexpected {type(error).__name__}: {error} "
        "(a bug; `coord --log-level DEBUG ...` logs the traceback)"
    )


@app.command()
@runs_async
async def server(
    port: int = 7233,
    ui_port: int = 8233,
    db_file: Annotated[Path, typer.Option(help="SQLite file holding the server's state")] = Path(
        ".temporal/coord.db"
    ),
) -> None:
    """Run the embedded Temporal dev server (SQLite, UI, search attributes) until Ctrl-C."""
    async with embedded_server(port=port, ui_port=ui_port, db_file=db_file):
        typer.echo(f"Temporal dev server on localhost:{port}, UI on http://localhost:{ui_port}")
        await asyncio.Event().wait()


@app.command()
@runs_async
async def setup() -> None:
    """Register the project's search attributes on the configured server (once per namespace;
    `coord server` and the compose stack do it themselves, a plain `temporal server start-dev`
    does not)."""
    settings = ConnectionSettings.load()
    added = await register_search_attributes(await settings.connect())
    registered = ", ".join(added) if added else "none missing"
    typer.echo(f"search attributes on {settings.address} ({settings.namespace}): {registered}")


@app.command()
@runs_async
async def worker(
    agents: Annotated[
        Path | None,
        typer.Option(help="An agents YAML file: `agents:` and `worker:` (also $COORD_AGENTS)"),
    ] = None,
    demo_agents: DemoAgents = False,
) -> None:
    """Run a worker against the configured server (TEMPORAL_ADDRESS, or localhost:7233)."""
    await run_worker(agents, demo_agents=demo_agents)


@app.command()
@runs_async
async def dev(demo_agents: DemoAgents = False) -> None:
    """Run server and worker together for local work."""
    registry = default_registry(demo_agents=demo_agents)
    async with local_temporal() as (client, where), build_worker(client, registry=registry):
        typer.echo(f"worker running against {where}; Ctrl-C to stop")
        await asyncio.Event().wait()


@app.command()
@runs_async
async def demo(
    exit_when_done: Annotated[
        bool, typer.Option("--exit", help="Exit when the sagas are done instead of serving the UI")
    ] = False,
) -> None:
    """Run the seed's Feature Deployment saga to success, then failing at DeployToProduction."""
    await run_demo(keep_serving=not exit_when_done)


@saga_app.command("start")
@runs_async
async def saga_start(
    file: Path,
    input: Annotated[
        str | None, typer.Option(help="JSON object merged into the spec's input")
    ] = None,
    saga_id: Annotated[
        str | None, typer.Option("--id", help="Saga id (overrides the spec's)")
    ] = None,
    wait: Annotated[
        bool, typer.Option(help="Wait for the saga to end and print its state")
    ] = False,
    no_worker_timeout: Annotated[
        float,
        typer.Option(help="With --wait: give up after this many seconds with no worker polling"),
    ] = 30,
) -> None:
    """Start a saga from a YAML or JSON spec."""
    document = read_document(file)
    if isinstance(document, dict):
        if input is not None:
            extra = parse_json_object(input, "--input")
            document["input"] = {**(document.get("input") or {}), **extra}
        if saga_id is not None:
            document["saga_id"] = saga_id
    spec = parse_model(SagaSpec, document, str(file))
    check_agents(file, spec)
    settings = ConnectionSettings.load()
    client = await settings.connect()
    try:
        handle = await api.start_saga(client, spec)
    except WorkflowAlreadyStartedError:
        raise api.Conflict(
            f"saga {spec.saga_id!r} is already running: read it with "
            f"`coord saga state {spec.saga_id}`, or give another --id"
        ) from None
    typer.echo(f"started {handle.id}: {workflow_link(handle.id, settings.namespace)}")
    if wait:
        state = await saga_outcome_with_progress(
            client,
            handle,
            task_queue(),
            lambda line: typer.echo(line, err=True),
            no_worker_timeout=no_worker_timeout,
        )
        typer.echo(state.model_dump_json(indent=2))
        if state.status != "completed":
            raise typer.Exit(ExitCode.SAGA_NOT_COMPLETED)


@saga_app.command("state")
@runs_async
async def saga_state(saga_id: str, as_json: AsJson = False) -> None:
    """Print a saga's coordinator record (JSON; --json prints it on one line)."""
    client = await ConnectionSettings.load().connect()
    state = await api.saga_state(client, saga_id)
    typer.echo(state.model_dump_json(indent=None if as_json else 2))


@saga_app.command("cancel")
@runs_async
async def saga_cancel(saga_id: str) -> None:
    """Cancel a saga; its compensation stack is unwound."""
    client = await ConnectionSettings.load().connect()
    await api.cancel_saga(client, saga_id)
    typer.echo(f"cancellation requested for saga {saga_id}; its compensations will run")


@chain_app.command("start")
@runs_async
async def chain_start(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC")],
    correlation_id: Annotated[str, typer.Option(help="The correlation id the chain serves")],
) -> None:
    """Start the chain of a correlation id from a YAML or JSON spec."""
    spec = load_spec(ChainSpec, spec_file)
    check_agents(spec_file, spec)
    settings = ConnectionSettings.load()
    handle = await api.start_chain(await settings.connect(), spec, correlation_id)
    typer.echo(f"started {handle.id}: {workflow_link(handle.id, settings.namespace)}")


@chain_app.command("state")
@runs_async
async def chain_state(correlation_id: str, as_json: AsJson = False) -> None:
    """Print a chain's record (JSON; --json prints it on one line): events seen, running agents,
    waiting joins, rejections."""
    client = await ConnectionSettings.load().connect()
    state = await api.chain_state(client, correlation_id)
    typer.echo(state.model_dump_json(indent=None if as_json else 2))


@chain_app.command("close")
@runs_async
async def chain_close(correlation_id: str) -> None:
    """Close a chain: it accepts no more events and ends once its started work is done."""
    client = await ConnectionSettings.load().connect()
    await api.close_chain(client, correlation_id)
    typer.echo(f"closing chain-{correlation_id}")


def load_aggregator_spec(path: Path, correlation_id: str | None) -> AggregatorSpec:
    overrides = {"correlation_id": correlation_id} if correlation_id else None
    return load_spec(AggregatorSpec, path, overrides)


@aggregate_app.command("start")
@runs_async
async def aggregate_start(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC")],
    correlation_id: Annotated[
        str | None, typer.Option(help="Count only this correlation's events")
    ] = None,
) -> None:
    """Start an aggregator from a YAML or JSON spec."""
    spec = load_aggregator_spec(spec_file, correlation_id)
    settings = ConnectionSettings.load()
    handle = await api.start_aggregator(await settings.connect(), spec)
    typer.echo(f"started {handle.id}: {workflow_link(handle.id, settings.namespace)}")


@aggregate_app.command("state")
@runs_async
async def aggregate_state(
    aggregator: Annotated[str, typer.Argument(metavar="ID", help="Workflow id or aggregator id")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the record as JSON")] = False,
) -> None:
    """Print an aggregator's status table (the seed's)."""
    client = await ConnectionSettings.load().connect()
    state = await api.aggregator_state(client, aggregator)
    typer.echo(state.model_dump_json(indent=2) if as_json else render.aggregator_table(state))


@aggregate_app.command("cancel")
@runs_async
async def aggregate_cancel(
    aggregator: Annotated[str, typer.Argument(metavar="ID", help="Workflow id or aggregator id")],
) -> None:
    """Cancel an aggregator; it emits nothing."""
    client = await ConnectionSettings.load().connect()
    await api.cancel_aggregator(client, aggregator)
    typer.echo(f"cancellation requested for {api.aggregator_handle(client, aggregator).id}")


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
    client = await ConnectionSettings.load().connect()
    if all_chains:
        delivery = await api.broadcast(client, envelope)
        target = f"{len(delivery.reached)} running chains"
        target += f" (skipped: {'; '.join(delivery.skipped)})" if delivery.skipped else ""
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
    """Print the correlation table (or causation tree) of a chain and its sagas' events."""
    client = await ConnectionSettings.load().connect()
    timeline = await api.correlation_events(client, correlation_id)
    if as_json:
        for entry in timeline:
            typer.echo(entry.model_dump_json())
    else:
        typer.echo(render.causation_tree(timeline) if tree else render.timeline_table(timeline))
    shown = {entry.event_id for entry in timeline}
    while follow and await chain_still_running(client, correlation_id):
        await asyncio.sleep(1)
        for entry in await api.correlation_events(client, correlation_id):
            if entry.event_id not in shown:
                row = render.timeline_table([entry]).splitlines()[-1]
                typer.echo(entry.model_dump_json() if as_json else row)
                shown.add(entry.event_id)


async def chain_still_running(client: Client, correlation_id: str) -> bool:
    """False once the chain has ended, or when there is none (sagas' events alone)."""
    try:
        return await api.chain_running(client, correlation_id)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise


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


async def chosen_entries(
    client: Client, entry_ids: list[str], everything: bool, filters: DlqSelection
) -> list[str]:
    """Entry ids, or --all (with optional filters): never a silent bulk operation by default."""
    if bool(entry_ids) == everything:
        raise SpecError("give entry ids, or --all (with --type and the other filters)")
    return entry_ids or await api.dlq_selected(client, filters)


def report(outcomes: list[BulkOutcome], line: Callable[[BulkOutcome], str]) -> None:
    """One line per entry; exit code 1 when any entry was refused."""
    for outcome in outcomes:
        typer.echo(line(outcome) if outcome.status else f"refused: {outcome.detail}")
    if any(outcome.status is None for outcome in outcomes):
        raise typer.Exit(1)


@dlq_app.command("list")
@runs_async
async def dlq_list(
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
    json_output: Annotated[bool, typer.Option("--json", help="The page as JSON")] = False,
) -> None:
    """List dead letters, newest first, a page at a time (the seed's DLQ table)."""
    chosen = selection(
        type=type,
        topic=topic,
        failure_type=failure_type,
        correlation_id=correlation_id,
        status=status,
    )
    client = await ConnectionSettings.load().connect()
    page = await api.dlq_page(client, chosen, page_size=page_size, cursor=cursor)
    if json_output:
        typer.echo(page.model_dump_json(indent=2))
        return
    typer.echo(render.dlq_table(page.entries))
    if page.next_cursor:
        typer.echo(f"\nnext page: coord dlq list --cursor {page.next_cursor}")


@dlq_app.command("counts")
@runs_async
async def dlq_counts(
    json_output: Annotated[bool, typer.Option("--json", help="The counts as JSON")] = False,
) -> None:
    """Dead letters by failure type and status, with the action each calls for."""
    client = await ConnectionSettings.load().connect()
    counts = await api.dlq_counts(client)
    typer.echo(counts.model_dump_json(indent=2) if json_output else render.dlq_counts_table(counts))


@dlq_app.command("show")
@runs_async
async def dlq_show(entry_id: str) -> None:
    """Show one dead letter in full (JSON)."""
    client = await ConnectionSettings.load().connect()
    typer.echo((await api.dlq_entry(client, entry_id)).model_dump_json(indent=2))


@dlq_app.command("replay")
@runs_async
async def dlq_replay(
    entry_ids: Annotated[list[str] | None, typer.Argument(metavar="[ID]...")] = None,
    everything: Annotated[bool, typer.Option("--all", help="Every parked entry matching")] = False,
    payload: Annotated[
        str | None, typer.Option(help="Fix and replay: the corrected payload")
    ] = None,
    type: EventType = None,
    topic: Topic = None,
    failure_type: FailureType = None,
    correlation_id: Correlation = None,
) -> None:
    """Deliver dead letters again to their targets, optionally with a corrected payload."""
    filters = selection(
        type=type, topic=topic, failure_type=failure_type, correlation_id=correlation_id
    )
    fixed = parse_json_object(payload, "--payload") if payload is not None else None
    client = await ConnectionSettings.load().connect()
    chosen = await chosen_entries(client, entry_ids or [], everything, filters)
    outcomes = await api.dlq_replay_many(client, chosen, fixed)
    report(outcomes, lambda o: f"{o.entry_id}: {o.status}, {o.detail}")


@dlq_app.command("archive")
@runs_async
async def dlq_archive(
    entry_ids: Annotated[list[str] | None, typer.Argument(metavar="[ID]...")] = None,
    note: Annotated[str, typer.Option(help="Why it is not recoverable")] = "",
    everything: Annotated[bool, typer.Option("--all", help="Every parked entry matching")] = False,
    type: EventType = None,
    topic: Topic = None,
    failure_type: FailureType = None,
    correlation_id: Correlation = None,
) -> None:
    """Archive dead letters with a note."""
    filters = selection(
        type=type, topic=topic, failure_type=failure_type, correlation_id=correlation_id
    )
    request = parse_model(ArchiveRequest, {"note": note}, "archive")
    client = await ConnectionSettings.load().connect()
    chosen = await chosen_entries(client, entry_ids or [], everything, filters)
    outcomes = await api.dlq_archive_many(client, chosen, request.note)
    report(outcomes, lambda o: f"{o.entry_id}: archived ({o.detail})")


def check_agents(source: Path, spec: ChainSpec | SagaSpec) -> None:
    """Agents are checked where a spec enters, by the worker's own rule (`AgentRegistry.resolve`)
    against the configuration a worker started here would have ($COORD_AGENTS,
    $COORD_DEMO_AGENTS): a named agent is declared, an inline one is of a kind allowed."""
    named: list[tuple[str, str | None]]
    if isinstance(spec, SagaSpec):
        named = [(f"steps[{i}].agent", s.agent) for i, s in enumerate(spec.steps)]
        named += [(f"steps[{i}].compensation", s.compensation) for i, s in enumerate(spec.steps)]
    else:
        named = [(f"subscriptions[{i}].agent", s.agent) for i, s in enumerate(spec.subscriptions)]
    registry = default_registry()
    for place, agent in named:
        if agent is None:
            continue
        if agent in spec.agents:
            if refusal := registry.settings.inline_refusal(agent, spec.agents[agent]):
                raise SpecError(f"{source}: agents.{agent}: {refusal}")
        elif agent not in registry:
            raise SpecError(f"{source}: {place}: {registry.unknown(agent)}")


def main() -> None:
    exit_without_teardown(app)
