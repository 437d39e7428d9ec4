"""`coord schema` prints a spec kind's JSON Schema; `coord validate` checks spec files offline
(docs/specs.md); `coord examples` finds (or copies) the example specs the package ships. None
needs a server, and none loads any agent's code."""

import json
import shutil
from pathlib import Path
from typing import Annotated

import typer

from coord.models.kinds import SpecKind, file_problems, problem_lines, schema_of
from coord.models.mesh.declared import declared_agents
from coord.models.wire.specs import SpecError
from coord.starter.commands.common import AgentsFile, DemoAgents, runs_async
from coord.starter.examples import COPIED_SCHEMAS, EXAMPLES, SCHEMAS, as_copied, shipped
from coord.starter.exits import ExitCode

app = typer.Typer()


@app.command()
def schema(
    kind: Annotated[
        SpecKind,
        typer.Argument(metavar="KIND", help="saga, chain, aggregator, plan, vote or agents"),
    ],
) -> None:
    """Print the JSON Schema (draft 2020-12) of a kind of spec file, for editors and CI; the
    repository ships them as schemas/<kind>.json."""
    typer.echo(json.dumps(schema_of(kind), indent=2))


@app.command()
@runs_async
async def validate(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE",
            help="Spec files and agents files (YAML or JSON), or agent definitions (markdown)",
        ),
    ],
    kind: Annotated[
        SpecKind | None,
        typer.Option(help="Their kind, when their shape does not tell (default: by shape)"),
    ] = None,
    agents: AgentsFile = None,
    demo_agents: DemoAgents = False,
    correlation_id: Annotated[
        str | None,
        typer.Option(help="As `start --correlation-id` gives it, to specs that have the field"),
    ] = None,
) -> None:
    """Check spec files without a server: each is read, its kind told by its shape (or
    --kind), validated as `coord ... start` would, and its agents checked against those a
    worker started here would serve (--agents, --demo-agents), from their declarations. One
    line per problem, `FILE: FIELD: PROBLEM`; exit code 0 when every file is valid, 1 when not.
    An agents file given as FILE is checked as the worker would read it; one given to --agents
    (or $COORD_AGENTS) that has problems has them printed the same way, and then no FILE is
    checked."""
    try:
        declared = declared_agents(agents, demo_agents=demo_agents)
    except SpecError as error:
        for line in problem_lines(error):
            typer.echo(line)
        typer.echo(
            f"0 of {len(files)} files valid: none was checked, their agents file is not valid",
            err=True,
        )
        raise typer.Exit(ExitCode.REFUSED) from None
    overrides = {"correlation_id": correlation_id} if correlation_id else None
    failing = 0
    for path in files:
        problems = file_problems(path, declared, kind, overrides)
        failing += bool(problems)
        for line in problems:
            typer.echo(line)
    typer.echo(f"{len(files) - failing} of {len(files)} files valid", err=True)
    if failing:
        raise typer.Exit(ExitCode.REFUSED)


@app.command()
@runs_async
async def examples(
    copy: Annotated[
        Path | None,
        typer.Option(
            "--copy",
            metavar="DIR",
            help="Copy them into DIR (created when missing; a file already there is refused)",
        ),
    ] = None,
) -> None:
    """Print the folder of the example specs and agent files the package ships, then each
    file in it: the files the README and the docs run (`examples/feature-deployment.yaml`, ...).
    `--copy examples` in an empty folder puts them where those commands look, with the schemas
    their first lines name in DIR/schemas (each line then points there, so an editor finds
    it)."""
    files = shipped()
    if copy is None:
        typer.echo(str(EXAMPLES))
        for file in files:
            typer.echo(f"  {file.as_posix()}")
        return
    copies = {copy / file: as_copied(file) for file in files}
    schemas = sorted({schema for _, schema in copies.values() if schema is not None})
    targets = [*copies, *(copy / COPIED_SCHEMAS / schema for schema in schemas)]
    if taken := [target for target in targets if target.exists()]:
        raise SpecError(f"--copy: {taken[0]} already exists; nothing was copied")
    try:
        for target, (data, _) in copies.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        for schema in schemas:
            (copy / COPIED_SCHEMAS).mkdir(exist_ok=True)
            shutil.copyfile(SCHEMAS / schema, copy / COPIED_SCHEMAS / schema)
    except OSError as error:
        raise SpecError(f"--copy: {error}") from None
    typer.echo(
        f"{len(files)} files copied to {copy}, and the {len(schemas)} schemas they name to "
        f"{copy / COPIED_SCHEMAS}"
    )
