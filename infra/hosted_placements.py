"""What a saga's starter can tell its run when its own process hosts the saga's worker: where
the saga's agents run (`hosted_placements`, from the registry of the worker this process runs
on the saga's queue) and whether its correlation's chain runs (`chain_runs`, one read of the
server). Written into the start (`SAGA_PLACEMENTS_MEMO`), it spares the run the look-up its
first workflow task would make: a local activity, and its marker in the history."""

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from coord.models.mesh.placement import Placement
from coord.models.wire.contract import chain_workflow_id

DESCRIBE_TIMEOUT = timedelta(seconds=10)

PlaceAgent = Callable[[str], Placement]
"""Where a run of an agent goes from a workflow the worker runs (`AgentRegistry.placement`)."""

_hosted: dict[str, list[PlaceAgent]] = {}
"""By coordinator queue, the workers this process runs on it: one entry each."""


@contextmanager
def hosting(queue: str, place: PlaceAgent) -> Iterator[None]:
    """While a worker of this process serves the workflows of `queue`, placing agents by
    `place`."""
    _hosted.setdefault(queue, []).append(place)
    try:
        yield
    finally:
        places = _hosted[queue]
        places.remove(place)
        if not places:
            del _hosted[queue]


def hosted_placements(queue: str, agents: Iterable[str]) -> dict[str, Placement] | None:
    """Where the runs of `agents` go from a workflow on `queue`, as the one worker this process
    runs on it places them; None unless there is exactly one (two could place differently, and
    either may take the run's first workflow task)."""
    places = _hosted.get(queue, [])
    if len(places) != 1:
        return None
    return {agent: places[0](agent) for agent in agents}


async def chain_runs(client: Client, correlation_id: str) -> bool:
    """Whether the correlation's chain runs (its latest run, across continue-as-new): one read
    of the server."""
    handle = client.get_workflow_handle(chain_workflow_id(correlation_id))
    try:
        described = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status == WorkflowExecutionStatus.RUNNING
