"""What `coord` prints and exits with when a command cannot do what was asked: one line on
stderr and a documented exit code per kind of problem (the README's table), never a traceback."""

import re
from enum import IntEnum

from pydantic import ValidationError
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from coord.infra.devserver import PortInUse, ServerBinaryError
from coord.infra.extras import MissingExtra
from coord.infra.payload_store import PayloadStoreError
from coord.infra.search_attributes import SetupNeeded
from coord.infra.temporal import ServerUnreachable
from coord.models.rewind.plan import RewindRefused
from coord.models.wire.contract import failure_message
from coord.models.wire.errors import RunFailed, ServerRefused
from coord.models.wire.specs import SpecError, describe_validation_error
from coord.starter.api.common import Conflict, NotFound, NoWorker, Undeliverable, server_error


class ExitCode(IntEnum):
    OK = 0
    REFUSED = 1
    """The input was refused: a spec, option or payload that does not validate, an unknown
    agent, an event that could not be delivered (its target has ended), an operation a workflow
    refused, a feature whose extra is not installed; `coord validate`: a file with a problem
    (each is printed); the state of a run that refused its spec (a saga, plan, vote or
    aggregator alike: no record)."""
    USAGE = 2
    """The command line itself: an unknown option, a missing argument (click's own code)."""
    SAGA_NOT_COMPLETED = 3
    """`saga start --wait`: the saga ended compensated or failed (its record is printed)."""
    CONFLICT = 4
    """The workflow's state forbids it: the id is already running, or it has already ended."""
    NOT_FOUND = 5
    """No such saga, chain, aggregator, plan, vote, dead letter or workflow (to read, or to
    publish to)."""
    UNREACHABLE = 6
    """No Temporal server answers at the configured address; also a wait (`--wait`, `coord
    run`, `--follow`) whose server went away while it waited: it gives up after a few tries, and
    the run goes on on the server."""
    SETUP_NEEDED = 7
    """The server lacks the project's search attributes: run `coord setup`."""
    SERVER_NOT_STARTED = 8
    """The embedded server cannot start: a port is taken, or its binary is not the pinned one."""
    NO_WORKER = 9
    """`saga|plan start --wait`: no worker polled the task queue (the run stays started); the
    state of a running run, which a worker answers, when no worker polls its task queue."""
    PLAN_NOT_COMPLETED = 10
    """`plan start --wait`: the plan ended partial, failed or cancelled (its report is printed)."""
    VOTE_NOT_DECIDED = 11
    """`vote start --wait`: the vote ended rejected, without quorum, or cancelled (its ballots
    are printed)."""
    GC_INCOMPLETE = 12
    """`coord gc`: something that had outlived its retention could not be removed (a dead
    letter no worker archived, a deletion the server refused); each is listed with why."""
    EVENT_REFUSED = 13
    """`publish --ack`: the chain refused the event (the line says why: ended, closing, a
    probable causation loop, an envelope that does not validate); nothing was recorded or parked."""
    DIFFERS = 14
    """`coord diff`: the two correlations differ (the aligned rows are printed)."""
    LOG_INCOMPLETE = 15
    """`coord events C --all` (or `--since`): the log has a gap (a segment lost or unreadable,
    rows missing between segments, its last rows); every row it has is printed, and a warning
    line names what is missing."""
    INTERNAL = 70
    """A bug: the line names the exception; `--log-level DEBUG` logs its traceback."""
    INTERRUPTED = 130
    """Ctrl-C (SIGINT)."""
    READER_GONE = 141
    """Its output's reader stopped reading (`coord events C --json | head -1`): no line printed,
    as a process ended by SIGPIPE would."""
    TERMINATED = 143
    """SIGTERM: servers and workers started by the command were shut down first."""


CLASS_PREFIX = re.compile(r"^(?:\w+(?:Error|Exception): )+")


def one_line(message: str) -> str:
    """The first line, without a leading `ValueError: ` (the user needs the words, not the
    exception class; multi-line messages such as CEL's carets add nothing on a terminal)."""
    first = (message.strip().splitlines() or [""])[0]
    return CLASS_PREFIX.sub("", first.strip())


PLAIN_EXITS: tuple[tuple[tuple[type[BaseException], ...], ExitCode], ...] = (
    ((Conflict, WorkflowAlreadyStartedError), ExitCode.CONFLICT),
    ((NotFound,), ExitCode.NOT_FOUND),
    ((NoWorker,), ExitCode.NO_WORKER),
    ((ServerUnreachable,), ExitCode.UNREACHABLE),
    ((SetupNeeded,), ExitCode.SETUP_NEEDED),
    ((PortInUse, ServerBinaryError), ExitCode.SERVER_NOT_STARTED),
    ((SpecError, Undeliverable, PayloadStoreError, MissingExtra, RewindRefused), ExitCode.REFUSED),
    ((ServerRefused, RunFailed), ExitCode.REFUSED),
)
"""The errors whose own message is the line to print, by the exit code each means."""


def failure_exit(error: BaseException) -> tuple[ExitCode, str] | None:
    """The exit code and the line to print for an error a user can cause, or None for a bug."""
    match error:
        case RPCError():
            return failure_exit(server_error(error))
        case ValidationError():
            return ExitCode.REFUSED, describe_validation_error(error)
        case WorkflowUpdateFailedError() | WorkflowFailureError():
            return ExitCode.REFUSED, failure_message(error)
        case WorkflowAlreadyStartedError():
            return ExitCode.CONFLICT, f"{error.workflow_id} already exists"
    for kinds, code in PLAIN_EXITS:
        if isinstance(error, kinds):
            return code, str(error)
    return None
