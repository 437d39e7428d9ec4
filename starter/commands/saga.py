"""`coord saga start|state|cancel|rewind`."""

from pathlib import Path
from typing import Annotated

import typer

from coord.models.mesh.declared import read_agents_file
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.specs import parse_json_object, parse_model, read_document
from coord.starter import api
from coord.starter.commands.common import (
    START_OPTIONS,
    AsJson,
    CopyAgents,
    NoWorkerTimeout,
    SpecId,
    StartCommand,
    Wait,
    check_agents,
    connect,
    echo_json,
    echo_started,
    runs_async,
)
from coord.starter.exits import ExitCode
from coord.starter.progress import saga_attempts

app = typer.Typer(no_args_is_help=True, help="Start, inspect and cancel sagas.")


def load_saga_spec(file: Path, input: str | None, saga_id: str | None) -> SagaSpec:
    """The spec file with `--input` merged into its input and `--id` over its saga id."""
    document = read_document(file)
    if isinstance(document, dict):
        if input is not None:
            extra = parse_json_object(input, "--input")
            document["input"] = {**(document.get("input") or {}), **extra}
        if saga_id is not None:
            document["saga_id"] = saga_id
    given = {"saga_id": START_OPTIONS["saga_id"]} if saga_id is not None else None
    spec = parse_model(SagaSpec, document, str(file), given)
    check_agents(file, spec)
    return spec


def show_saga(state: SagaState, as_json: bool) -> None:
    """The record as JSON, on one line for tools."""
    echo_json(state, one_line=as_json)


SAGAS = StartCommand(
    "saga",
    api.start_saga,
    api.saga_outcome,
    saga_attempts,
    show_saga,
    ended_well=lambda state: state.status == SagaStatus.COMPLETED,
    otherwise=ExitCode.SAGA_NOT_COMPLETED,
)


@app.command("start")
@runs_async
async def start(
    file: Path,
    input: Annotated[
        str | None, typer.Option(help="JSON object merged into the spec's input")
    ] = None,
    saga_id: SpecId = None,
    wait: Wait = False,
    as_json: AsJson = False,
    no_worker_timeout: NoWorkerTimeout = 30,
) -> None:
    """Start a saga from a YAML or JSON spec. With --wait, its record is printed (JSON; --json
    prints it on one line, alone on stdout: the `started` line goes to stderr)."""
    spec = load_saga_spec(file, input, saga_id)
    await SAGAS.run(
        spec, spec.saga_id, wait=wait, as_json=as_json, no_worker_timeout=no_worker_timeout
    )


@app.command("state")
@runs_async
async def state(saga_id: str, as_json: AsJson = False) -> None:
    """Print a saga's coordinator record (JSON; --json prints it on one line)."""
    show_saga(await api.saga_state(await connect(), saga_id), as_json)


@app.command("cancel")
@runs_async
async def cancel(saga_id: str) -> None:
    """Cancel a saga; its compensation stack is unwound."""
    await api.cancel_saga(await connect(), saga_id)
    typer.echo(f"cancellation requested for saga {saga_id}; its compensations will run")


@app.command("rewind")
@runs_async
async def rewind(
    saga_id: str,
    to_step: Annotated[int, typer.Option(help="The step the copy starts at (numbered from 1)")],
    copy_id: Annotated[str, typer.Option("--as", help="The copy's saga id")],
    agents_file: CopyAgents = None,
    input: Annotated[
        str | None, typer.Option(help="JSON object merged into the copy's input")
    ] = None,
) -> None:
    """Re-run a saga from one of its steps as a new saga: the steps before are the original's
    (results, events and compensation stack as they stood, never run again), the rest run with
    the agents of `--agents` and `--input` merged into its input. The original is never
    touched."""
    agents = read_agents_file(agents_file).agents if agents_file else None
    extra = parse_json_object(input, "--input") if input is not None else None
    client = await connect()
    handle = await api.rewind_saga(
        client, saga_id, to_step=to_step, copy_id=copy_id, agents=agents, input=extra
    )
    echo_started(client, handle.id)
