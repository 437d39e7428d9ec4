"""What every `coord` command shares: running its coroutine so that whatever stops it becomes the
README's one line and exit code, the connection to the configured server, and the agent check
where a spec enters."""

import asyncio
import functools
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

import typer
from pydantic import BaseModel
from rich.console import RenderableType
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import WorkflowAlreadyStartedError

from coord.infra import temporal
from coord.infra.logs import get_logger
from coord.infra.temporal import task_queue, workflow_link
from coord.models import checks
from coord.models.chain.spec import ChainSpec
from coord.models.mesh.declared import declared_agents
from coord.models.plan.spec import PlanSpec
from coord.models.saga.spec import SagaSpec
from coord.models.vote.spec import VoteSpec
from coord.starter import api, render
from coord.starter.exits import ExitCode, failure_exit, one_line
from coord.starter.progress import Sighting, Watch, outcome_with_progress

R = TypeVar("R")
S = TypeVar("S")
M = TypeVar("M", bound=BaseModel)
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for tools")]
log = get_logger("coord.cli")


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
        except BrokenPipeError:
            discard_stdout()
            raise typer.Exit(ExitCode.READER_GONE) from None
        except typer.Exit:
            raise
        except Exception as error:
            code, message = failure_exit(error) or unexpected(error)
            typer.secho(f"error: {one_line(message)}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code) from None

    return wrapper


def discard_stdout() -> None:
    """Once the reader has gone, what is left to write goes nowhere, so the flush at exit does
    not fail again (Python's advice on SIGPIPE, in the `signal` module's documentation)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def unexpected(error: Exception) -> tuple[ExitCode, str]:
    """A bug: the line names it, the traceback goes to the log at DEBUG."""
    log.debug("unexpected error", exc_info=error)
    return ExitCode.INTERNAL, (
        f"unexpected {type(error).__name__}: {error} "
        "(a bug; `coord --log-level DEBUG ...` logs the traceback)"
    )


async def connect() -> Client:
    """A client of the configured server (`coord.infra.temporal.connect`, as scripts connect);
    an unreachable one is ServerUnreachable, exit code 6."""
    return await temporal.connect()


def echo_started(client: Client, workflow_id: str, *, as_json: bool = False) -> None:
    """The line a start command prints: the workflow id and its page in the Temporal UI; on
    stderr with `--json`, whose stdout is the JSON alone (a tool parses it whole)."""
    link = workflow_link(workflow_id, client.namespace)
    typer.echo(f"started {workflow_id}: {link}", err=as_json)


NoWorkerTimeout = Annotated[
    float,
    typer.Option(
        min=0,
        max=366 * 86400,
        help="With --wait: give up after this many seconds with no worker polling",
    ),
]
SpecId = Annotated[str | None, typer.Option("--id", help="Its id (overrides the spec's)")]
START_OPTIONS = {
    "saga_id": "--id",
    "plan_id": "--id",
    "vote_id": "--id",
    "correlation_id": "--correlation-id",
}
"""The spec fields a start command's options override, by option: a problem with one is the
option's (`--id: ...`), not the file's (`load_spec`'s `options`)."""
Wait = Annotated[bool, typer.Option(help="Wait for it to end and print how it ended")]
CorrelationId = Annotated[
    str | None,
    typer.Option(
        help="The correlation it belongs to (overrides the spec's): its lifecycle events go to "
        "that correlation's chain"
    ),
]
AgentsFile = Annotated[
    Path | None, typer.Option("--agents", help="The worker's agents YAML file (also $COORD_AGENTS)")
]
CopyAgents = Annotated[
    Path | None, typer.Option("--agents", help="Agents file: its agents replace the originals")
]
"""A rewound copy's agents, in place of its original's (`coord saga|plan|chain rewind`)."""
DemoAgents = Annotated[
    bool,
    typer.Option("--demo-agents", help="Include the demo agents (also $COORD_DEMO_AGENTS=1)"),
]
ServerPort = Annotated[
    int | None,
    typer.Option(
        "--port", help="The local Temporal's port, started there when none runs  [default: 7233]"
    ),
]
UiPort = Annotated[
    int | None,
    typer.Option("--ui-port", help="An embedded server's UI port  [default: --port plus 1000]"),
]


@dataclass(frozen=True)
class StartCommand(Generic[S, R]):
    """What `coord KIND start` does with a spec of its kind: `start` the run (one already
    running under the same id is a Conflict saying how to read it) and print its id and UI
    link; with `--wait`, show what `watch` sees until its `outcome`, `show` the outcome, and
    exit `otherwise` unless it `ended_well`."""

    kind: str
    start: Callable[[Client, S], Awaitable[WorkflowHandle[Any, R]]]
    outcome: Callable[[WorkflowHandle[Any, R], Client], Awaitable[R]]
    """The final record, read with the client (a read that needs a worker is bounded by it)."""
    watch: Watch
    show: Callable[[R, bool], None]
    """The outcome, for tools (`--json`) or people."""
    ended_well: Callable[[R], bool]
    otherwise: ExitCode
    seen_in: Callable[[R], list[Sighting]] | None = None
    """What `watch` sees, read from the outcome: shown if the waiting did not see it."""

    def register(
        self,
        app: typer.Typer,
        load: Callable[[Path, str | None, str | None], S],
        id_of: Callable[[S], str],
    ) -> None:
        """`coord KIND start FILE [--id] [--correlation-id] [--wait] [--json]`: the spec file
        `load`s with `--id` over the id `id_of` reads and `--correlation-id` over its
        correlation."""

        async def start(
            file: Path,
            run_id: SpecId = None,
            correlation_id: CorrelationId = None,
            wait: Wait = False,
            as_json: AsJson = False,
            no_worker_timeout: NoWorkerTimeout = 30,
        ) -> None:
            spec = load(file, run_id, correlation_id)
            await self.run(
                spec, id_of(spec), wait=wait, as_json=as_json, no_worker_timeout=no_worker_timeout
            )

        app.command("start", help=f"Start a {self.kind} from a YAML or JSON spec.")(
            runs_async(start)
        )

    async def run(
        self, spec: S, name: str, *, wait: bool, as_json: bool = False, no_worker_timeout: float
    ) -> None:
        client = await connect()
        try:
            handle = await self.start(client, spec)
        except WorkflowAlreadyStartedError:
            raise api.Conflict(
                f"{self.kind} {name!r} is already running: read it with "
                f"`coord {self.kind} state {name}`, or give another --id"
            ) from None
        echo_started(client, handle.id, as_json=as_json)
        if not wait:
            return
        outcome = await self._waited(client, handle, no_worker_timeout)
        self.show(outcome, as_json)
        if not self.ended_well(outcome):
            raise typer.Exit(self.otherwise)

    async def _waited(
        self, client: Client, handle: WorkflowHandle[Any, R], no_worker_timeout: float
    ) -> R:
        with render.progress(f"waiting for {handle.id} to end") as report:
            return await outcome_with_progress(
                client,
                handle,
                self.outcome(handle, client),
                self.watch,
                report,
                name=f"the {self.kind}",
                task_queue=task_queue(),
                no_worker_timeout=no_worker_timeout,
                seen_in=self.seen_in,
            )


def echo_json(record: BaseModel, *, one_line: bool = False) -> None:
    typer.echo(record.model_dump_json(indent=None if one_line else 2))


def show_record(record: M, as_json: bool, view: Callable[[M], RenderableType]) -> None:
    """`--json` prints the record for tools; otherwise its view is shown to people."""
    if as_json:
        echo_json(record)
    else:
        render.show(view(record))


def echo_record(record: M, as_json: bool, lines: Callable[[M], Iterable[str]]) -> None:
    """`--json` prints the record for tools; otherwise the `lines` it reads as, for people."""
    if as_json:
        echo_json(record)
        return
    for line in lines(record):
        typer.echo(line)


def check_agents(source: Path | str, spec: ChainSpec | SagaSpec | PlanSpec | VoteSpec) -> None:
    """The SDK's one check (`coord.models.checks.check_agents`, the rule `run_agent` applies)
    against the agents a worker started here would have ($COORD_AGENTS, $COORD_DEMO_AGENTS),
    read from their declarations: no agent's code is imported or run here."""
    checks.check_agents(source, spec, declared_agents())
