"""A command that waits minutes (`--wait`, `coord run`, `events --follow`) outlives the server
recycling its connection: Temporal closes each client connection at its max connection age (5
minutes by default), and a call sent as it closes ends CANCELLED. Here the server's age is two
seconds, so a wait of seconds sees several recycles."""

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, cast

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import TimeoutError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from coord.infra.temporal import (
    RECONNECT_TRIES,
    ServerUnreachable,
    reconnecting,
    recycled_connection,
    server_gone,
)
from coord.models.saga.spec import SagaState
from coord.models.wire.errors import RunFailed
from coord.starter import api
from coord.starter.api.common import api_call
from coord.starter.exits import ExitCode, failure_exit
from coord.starter.progress import outcome_with_progress, plan_activity
from tests.conftest import start_dev_server

MAX_CONNECTION_AGE = "2s"


@pytest.fixture(scope="module")
async def recycling_env() -> AsyncIterator[WorkflowEnvironment]:
    """A server that closes every client connection two seconds after it opened (a call under
    way then has the server's grace, 70 s, to end)."""
    env = await start_dev_server(f'frontend.keepAliveMaxConnectionAge="{MAX_CONNECTION_AGE}"')
    yield env
    await env.shutdown()


async def test_a_wait_outlives_the_servers_connection_recycling(
    recycling_env: WorkflowEnvironment,
) -> None:
    """`--wait`'s loop asks the server several times a second (who polls the queue, what the
    run does) while it waits for the run's end: a round cut by a recycle is asked again, and
    the run's end (here, no worker: its execution timeout) is what the wait returns."""
    client = recycling_env.client
    queue = f"tq-{uuid.uuid4()}"
    handle = await client.start_workflow(
        "NoSuchWorkflow",
        id=f"plan-waited-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        execution_timeout=timedelta(seconds=12),
    )
    lines: list[str] = []
    with pytest.raises(RunFailed) as ended:
        await outcome_with_progress(
            client,
            handle,
            api.plan_outcome(handle),
            plan_activity,
            lines.append,
            name="the plan",
            task_queue=queue,
            no_worker_timeout=60,
            interval=0.05,
        )
    failure = ended.value.__cause__
    assert isinstance(failure, WorkflowFailureError) and isinstance(failure.cause, TimeoutError)
    assert lines == [
        f"warning: no worker polls task queue {queue!r}; the plan waits for one (start it "
        "with `coord worker`)"
    ]


def lost(status: RPCStatusCode) -> RPCError:
    return RPCError("operation was canceled", status, b"")


def reads(*outcomes: BaseException | str) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    """A read answering `outcomes` in turn (an exception is raised), and its count of calls."""
    calls: list[int] = []

    async def read() -> str:
        calls.append(1)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return read, calls


async def test_a_read_lost_with_its_connection_is_asked_again() -> None:
    read, calls = reads(lost(RPCStatusCode.CANCELLED), lost(RPCStatusCode.UNAVAILABLE), "done")
    assert await reconnecting(read, pause=0) == "done"
    assert len(calls) == 3


async def test_a_lost_read_the_api_reported_is_asked_again() -> None:
    """The API's functions turn a server's error into a CoordError (`api_call`), keeping it as
    the cause: still a read lost with its connection."""
    read, calls = reads(lost(RPCStatusCode.CANCELLED), "done")
    assert await reconnecting(api_call(read), pause=0) == "done"
    assert len(calls) == 2


async def test_a_refusal_is_reported_at_once_and_a_server_away_after_a_few_tries() -> None:
    refused = RPCError("no", RPCStatusCode.PERMISSION_DENIED, b"")
    read, calls = reads(refused)
    with pytest.raises(RPCError) as raised:
        await reconnecting(read, pause=0)
    assert raised.value is refused and len(calls) == 1
    read, calls = reads(*[lost(RPCStatusCode.UNAVAILABLE)] * RECONNECT_TRIES)
    with pytest.raises(RPCError):
        await reconnecting(read, pause=0)
    assert len(calls) == RECONNECT_TRIES


def test_only_a_lost_connection_counts_as_recycled() -> None:
    assert recycled_connection(lost(RPCStatusCode.CANCELLED))
    assert not recycled_connection(lost(RPCStatusCode.NOT_FOUND))
    assert not recycled_connection(ValueError("no"))


TRANSPORT_ERROR = RPCError("transport error", RPCStatusCode.UNKNOWN, b"")
"""How the SDK ends a call out when the server is stopped under it (a `--wait`'s wait)."""


class ServerStoppedUnder:
    """A run's handle whose wait for the result is cut by the server going away."""

    id = "saga-away"

    async def result(self) -> Any:
        raise TRANSPORT_ERROR


async def test_a_wait_the_server_stopped_under_is_unreachable_not_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server killed while `saga start --wait` waited used to end it with `error:
    saga_outcome: transport error (unknown)`, exit 1 (input refused): it is exit 6, with the
    line a command that cannot connect prints."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:7721")
    with pytest.raises(ServerUnreachable) as raised:
        await api.saga_outcome(cast(WorkflowHandle[Any, SagaState], ServerStoppedUnder()))
    assert failure_exit(raised.value) == (
        ExitCode.UNREACHABLE,
        "cannot reach Temporal at 127.0.0.1:7721; is it running? `coord server` starts one "
        "here, TEMPORAL_ADDRESS points elsewhere",
    )
    assert raised.value.__cause__ is TRANSPORT_ERROR
    assert failure_exit(TRANSPORT_ERROR) == failure_exit(raised.value)


def test_only_a_call_no_server_answered_is_unreachable() -> None:
    assert server_gone(TRANSPORT_ERROR)
    assert server_gone(lost(RPCStatusCode.UNAVAILABLE))
    assert not server_gone(RPCError("boom", RPCStatusCode.UNKNOWN, b""))
    assert not server_gone(lost(RPCStatusCode.NOT_FOUND))
