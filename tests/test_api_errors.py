"""The Python API's edge: what the server refuses leaves a public function as a `CoordError`
naming what is missing in the caller's words (else the function), with Temporal's own error kept
as its cause, and the CLI's exit code for it is the one docs/cli.md documents."""

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

import coord
from coord.starter.exits import ExitCode, failure_exit


async def test_reading_a_chain_that_does_not_exist_is_not_found(client: Client) -> None:
    with pytest.raises(coord.NotFound) as raised:
        await coord.chain_timeline(client, "no-such-correlation")
    error = raised.value
    assert isinstance(error, coord.CoordError)
    assert str(error) == "no chain for correlation id 'no-such-correlation'"
    assert isinstance(error.__cause__, RPCError)
    assert error.__cause__.status == RPCStatusCode.NOT_FOUND
    assert failure_exit(error) == (ExitCode.NOT_FOUND, str(error))


def test_a_refusal_no_other_error_names_is_server_refused() -> None:
    """The CLI maps a raw RPCError as the API would, so the two cannot drift apart."""
    refusal = RPCError("namespace is read-only", RPCStatusCode.PERMISSION_DENIED, b"")
    assert failure_exit(refusal) == (
        ExitCode.REFUSED,
        "namespace is read-only (permission_denied)",
    )
