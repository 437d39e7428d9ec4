"""`coord rewind`: a correlation re-run from one of its events on a copy; `coord diff`: two
correlations side by side, a rewound copy beside its original."""

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from coord.models.chain.spec import ChainSpec
from coord.models.mesh.declared import read_agents_file
from coord.models.rewind.plan import RewindPlan
from coord.models.wire.specs import SpecError, load_spec, read_document
from coord.starter import api, render
from coord.starter.commands.common import (
    AsJson,
    CopyAgents,
    connect,
    echo_record,
    runs_async,
    show_record,
)
from coord.starter.commands.rewind_batch import (
    BatchOptions,
    BatchRewind,
    Concurrency,
    Since,
    Suffix,
    ToType,
    Until,
    Where,
    Window,
    rewind_all,
    summarise_copies,
)
from coord.starter.exits import ExitCode

app = typer.Typer()


@app.command()
@runs_async
async def rewind(
    correlation_id: Annotated[
        str | None, typer.Argument(help="The original correlation (not with --all)")
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to", help="The event the copy starts from: its id, or its type (the first)"
        ),
    ] = None,
    copy_id: Annotated[
        str | None, typer.Option("--as", help="The copy's new correlation id")
    ] = None,
    agents_file: CopyAgents = None,
    specs: Annotated[
        list[str] | None,
        typer.Option(
            "--spec", help="PATTERN=FILE: a copy's spec (chain=..., or an aggregator or vote id)"
        ),
    ] = None,
    speed: Annotated[
        float,
        typer.Option(help="Re-deliver later events N times faster than they came (0: at once)"),
    ] = 0,
    batch: BatchOptions = False,
    since: Since = None,
    until: Until = None,
    where: Where = None,
    to_type: ToType = None,
    suffix: Suffix = None,
    concurrency: Concurrency = 8,
    as_json: AsJson = False,
) -> None:
    """Re-run a correlation from one of its events on a copy: what came before is taken from
    the original's log (no agent runs again for it), what came after from outside is sent
    again, and the rest is made anew by the copy's agents; its aggregators, votes, sagas and
    plans at work at that event are copied with their slots, ballots, steps and tasks then.
    The original is never touched. With --all, every chain of this coordinator's queue started
    between --since and --until, each onto `<C><SUFFIX>`."""
    spec, pattern_specs = copy_specs(specs or [])
    agents = read_agents_file(agents_file).agents if agents_file else None
    if batch:
        window = Window(since, until, suffix)
        if pattern_specs:
            raise SpecError("--spec: with --all, give chain=FILE only (each batch has its own)")
        options = BatchRewind(
            where=where, to_type=to_type, spec=spec, agents=agents, concurrency=concurrency
        )
        await rewind_all(window, options, as_json)
        return
    if correlation_id is None or to is None or copy_id is None:
        raise SpecError("rewind: give C --to EVENT --as C2, or --all --since T --suffix S")
    client = await connect()
    try:
        plan = await api.rewind_chain(
            client,
            correlation_id,
            to=to,
            copy_id=copy_id,
            spec=spec,
            agents=agents,
            speed=speed,
            specs=pattern_specs,
        )
    except api.NotFound as missing:
        if not str(missing).startswith("no chain for correlation id"):
            raise
        raise api.NotFound(f"{missing}; {NO_CHAIN_HINT}") from None
    echo_record(plan, as_json, rewound_lines)


NO_CHAIN_HINT = (
    "`coord rewind` copies a correlation's chain: rewind a saga alone with `coord saga rewind`, "
    "a plan with `coord plan rewind`"
)
"""What a rewind of a correlation without a chain says besides (its saga or plan may run)."""


def rewound_lines(plan: RewindPlan) -> Iterator[str]:
    """How the original's events came into the copy, then a line for each pattern copied."""
    yield (
        f"rewound {plan.original} at {plan.point} onto {plan.copy_id}: {len(plan.recorded)} "
        f"events taken as recorded, {len(plan.redelivered)} sent again, "
        f"{len(plan.regenerated)} to be made anew"
    )
    for copy in plan.copies:
        taken = _TAKEN.get(copy.pattern, "taken")
        yield f"  {copy.pattern} {copy.original} -> {copy.copy_id} ({copy.taken} {taken})"


_TAKEN = {"aggregator": "slots", "vote": "ballots", "saga": "steps", "plan": "tasks"}
"""What a copy of each pattern takes from its original's past, as `coord rewind` names it."""


def copy_specs(specs: list[str]) -> tuple[ChainSpec | None, dict[str, dict[str, Any]]]:
    """The `--spec PATTERN=FILE` options: a chain spec for the copy (`chain=FILE`; None keeps
    the original's) and, by aggregator or vote id, the spec documents of those copies."""
    chain: ChainSpec | None = None
    documents: dict[str, dict[str, Any]] = {}
    for option in specs:
        pattern, _, path = option.partition("=")
        if not pattern or not path:
            raise SpecError(f"--spec: {option!r}: give PATTERN=FILE (chain, or a pattern's id)")
        if pattern == "chain":
            chain = load_spec(ChainSpec, Path(path))
        else:
            document = read_document(Path(path))
            if not isinstance(document, dict):
                raise SpecError(f"--spec: {option!r}: {path} holds no spec (a mapping)")
            documents[pattern] = document
    return chain, documents


@app.command()
@runs_async
async def diff(
    left: Annotated[str | None, typer.Argument(help="A correlation id (the original)")] = None,
    right: Annotated[str | None, typer.Argument(help="Another correlation id (the copy)")] = None,
    summary: Annotated[
        bool, typer.Option("--summary", help="Count what changed over many copies (--suffix)")
    ] = False,
    since: Since = None,
    until: Until = None,
    suffix: Suffix = None,
    as_json: AsJson = False,
) -> None:
    """Show two correlations' tables side by side, aligned by causation: the rows that are the
    same, changed (payload or source) or only in one. Exits 14 when they differ. With
    --summary, every chain of this coordinator's queue started between --since and --until
    beside its copy `<C><SUFFIX>`:
    how many pairs changed outcome (and which way) and how many differ row by row."""
    if summary:
        await summarise_copies(Window(since, until, suffix), as_json)
        return
    if left is None or right is None:
        raise SpecError("diff: give two correlation ids, or --summary --since T --suffix S")
    client = await connect()
    compared = await api.diff_correlations(client, left, right)
    show_record(compared, as_json, render.diff_table)
    if compared.differs:
        raise typer.Exit(ExitCode.DIFFERS)
