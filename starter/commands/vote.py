"""`coord vote start|state|cancel`: consensus votes from the command line."""

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Column
from rich.text import Text
from temporalio.client import Client, WorkflowHandle

from coord.models.vote.spec import Ballot, VoteSpec, VoteState, VoteStatus
from coord.models.wire import contract
from coord.models.wire.specs import SpecError, load_spec
from coord.starter import api, render
from coord.starter.api.common import answered
from coord.starter.commands.common import (
    START_OPTIONS,
    AsJson,
    StartCommand,
    check_agents,
    connect,
    echo_json,
    runs_async,
)
from coord.starter.exits import ExitCode
from coord.starter.progress import Sighting
from coord.workflows.vote import Vote

app = typer.Typer(no_args_is_help=True, help="Start, inspect and cancel consensus votes.")
VoteId = Annotated[str, typer.Argument(metavar="ID", help="Vote id or workflow id")]
CHOICE_STYLES = {"approve": "green", "reject": "red", "abstain": "yellow"}


def load_vote_spec(file: Path, vote_id: str | None, correlation_id: str | None = None) -> VoteSpec:
    """The spec file with `--id` over its vote id and `--correlation-id` over its correlation,
    its voters checked as the worker would."""
    given = {"vote_id": vote_id, "correlation_id": correlation_id}
    overrides = {field: value for field, value in given.items() if value is not None}
    spec = load_spec(VoteSpec, file, overrides or None, START_OPTIONS)
    if contract.ID_PART_SEPARATOR in spec.vote_id:
        raise SpecError(
            f"{file}: vote_id: {spec.vote_id!r} holds `~`, which only the votes of plan tasks "
            "have (`<plan_id>~<task_id>`); give an identifier"
        )
    check_agents(file, spec)
    return spec


def vote_view(state: VoteState) -> Group:
    """Every voter with its ballot (or why it has none), then the outcome and the count."""
    reason = Column("Reason", max_width=80, no_wrap=True, overflow="ellipsis")
    view = render.table("Voter", "Ballot", reason, "At")
    for voter in state.voters:
        ballot = state.ballot_of(voter)
        view.add_row(voter, *(ballot_cells(ballot) if ballot else unanswered(state, voter)))
    lines = [
        "",
        f"Vote {state.vote_id}: {state.status.value}, {state.summary}",
        f"Proposal: {json.dumps(state.proposal)}",
    ]
    if state.status == VoteStatus.VOTING and state.deadline is not None:
        lines.append(f"Deadline: {state.deadline:%Y-%m-%d %H:%M:%S} UTC")
    return Group(view, *map(Text, lines))


def ballot_cells(ballot: Ballot) -> tuple[Text, str, str]:
    choice = ballot.choice.value + ("" if ballot.counted else " (late, not counted)")
    return (
        Text(choice, style=CHOICE_STYLES[ballot.choice.value]),
        ballot.reason or "-",
        f"{ballot.at:%H:%M:%S}",
    )


def unanswered(state: VoteState, voter: str) -> tuple[Text, str, str]:
    if voter in state.cancelled:
        why = (
            "the vote was cancelled"
            if state.status == VoteStatus.CANCELLED
            else "the outcome was known"
        )
        return Text("-", style="dim"), f"cancelled: {why}", "-"
    return Text("waiting", style="cyan"), "-", "-"


def show_vote(state: VoteState, as_json: bool) -> None:
    if as_json:
        echo_json(state, one_line=True)
    else:
        render.show(vote_view(state))


async def ballots_cast(client: Client, handle: WorkflowHandle[Any, Any]) -> list[Sighting]:
    """Each ballot as it is cast, while `vote start --wait` waits: its `state` query, refused
    (NoWorker, `answered`) when no worker answers, so the wait gives up as one for a worker."""
    return ballots_in(await answered(client, handle, Vote.state))


def ballots_in(state: VoteState) -> list[Sighting]:
    """The record's ballots, as `ballots_cast` reports them (the final record's, for those cast
    after its last look: a vote decided within a second is never seen voting)."""
    return [((ballot.voter,), ballot_line(ballot)) for ballot in state.ballots]


def ballot_line(ballot: Ballot) -> str:
    """`bob: reject (no rollback plan)`."""
    reason = f" ({ballot.reason})" if ballot.reason else ""
    return f"{ballot.voter}: {ballot.choice.value}{reason}"


VOTES = StartCommand(
    "vote",
    api.start_vote,
    lambda handle, _client: api.vote_outcome(handle),  # its record needs no worker
    ballots_cast,
    show_vote,
    ended_well=lambda state: state.status == VoteStatus.DECIDED,
    otherwise=ExitCode.VOTE_NOT_DECIDED,
    seen_in=ballots_in,
)


VOTES.register(app, load_vote_spec, lambda spec: spec.vote_id)


@app.command("state")
@runs_async
async def state(vote: VoteId, as_json: AsJson = False) -> None:
    """Print a vote's ballots and outcome (--json: the record)."""
    show_vote(await api.vote_state(await connect(), vote), as_json)


@app.command("cancel")
@runs_async
async def cancel(vote: VoteId) -> None:
    """Cancel a vote; its voters' runs still out are cancelled and the record says so."""
    await api.cancel_vote(await connect(), vote)
    typer.echo(f"cancellation requested for vote {vote}; its voters' runs are cancelled")
