"""What activities tell the worker's metrics (the catalogue, coord.models.ops.metrics): agent runs,
the breakers' and pools' state as this worker sees it, and llm agents' tokens.

Through the activity's metric meter, which the SDK serves on the worker's endpoint (a no-op one
on a worker without an endpoint, to which nothing is sent: an agent run there builds no metric).
Outside an activity (a breaker's last report at shutdown, an agent called by a test) nothing is
recorded."""

import contextlib
import threading
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime

from temporalio import activity
from temporalio.common import MetricMeter

from coord.models.mesh.agents import AgentRegistry, AgentRequest
from coord.models.mesh.ledger import AgentLedgerState, PoolState
from coord.models.ops import metrics as catalogue
from coord.models.ops.metrics import BREAKER_VALUES, MetricSpec
from coord.models.wire.contract import failure_type_of

SUCCEEDED = "succeeded"
CANCELLED = "cancelled"
UNKNOWN_KIND = "unknown"


def _meter() -> MetricMeter | None:
    """The activity's meter; None outside an activity, and on a worker without a metrics
    endpoint (the SDK's no-op meter): nothing is built for it, no labels bounded."""
    if not activity.in_activity():
        return None
    try:
        meter = activity.metric_meter()
    except RuntimeError:  # a sync activity run in another process has no meter
        return None
    return None if meter is MetricMeter.noop else meter


def _record(spec: MetricSpec, value: float = 1, /, **labels: str) -> None:
    meter = _meter()
    if meter is not None:
        spec.record(meter, value, labels)


class _InFlight:
    """Agent runs running now in this process, by agent (runs of one agent may run in several
    activity slots, and `def` agents' calls on other threads)."""

    def __init__(self) -> None:
        self._count: dict[str, int] = {}
        self._lock = threading.Lock()

    def moved(self, agent: str, by: int) -> int:
        with self._lock:
            self._count[agent] = self._count.get(agent, 0) + by
            return self._count[agent]


IN_FLIGHT = _InFlight()


def kind_of(request: AgentRequest, registry: AgentRegistry) -> str:
    """The run's agent's kind: its inline declaration's, else the worker's declaration's."""
    if request.config is not None:
        return request.config.kind
    return registry.kinds.get(request.agent, UNKNOWN_KIND)


def agent_run(
    request: AgentRequest, registry: AgentRegistry
) -> contextlib.AbstractAsyncContextManager[None]:
    """Around the call of an agent (once a pool permit is held, and the breaker let it through):
    in flight while it runs, then counted with its duration by how it ended, the failure type
    read as the run's own classification reads it. Nothing at all on a worker without a
    metrics endpoint: the meter is asked once, and a run there neither counts itself in
    flight nor looks up its kind."""
    meter = _meter()
    if meter is None:
        return contextlib.nullcontext()
    return _metered_run(meter, request.agent, kind_of(request, registry))


@contextlib.asynccontextmanager
async def _metered_run(meter: MetricMeter, agent: str, kind: str) -> AsyncIterator[None]:
    catalogue.AGENT_RUNS_IN_FLIGHT.record(meter, IN_FLIGHT.moved(agent, 1), {"agent": agent})
    started = time.monotonic()
    outcome = SUCCEEDED
    try:
        yield
    except BaseException as error:
        outcome = failure_type_of(error) if isinstance(error, Exception) else CANCELLED
        raise
    finally:
        labels = {"agent": agent, "kind": kind, "outcome": outcome}
        catalogue.AGENT_RUNS.record(meter, 1, labels)
        catalogue.AGENT_RUN_DURATION.record(meter, time.monotonic() - started, labels)
        in_flight = IN_FLIGHT.moved(agent, -1)
        catalogue.AGENT_RUNS_IN_FLIGHT.record(meter, in_flight, {"agent": agent})


def breaker_seen(agent: str, state: AgentLedgerState) -> None:
    """The agent's ledger as this worker last read it: its breaker, as of now, and its pool."""
    breaker = state.breaker_at(datetime.now(UTC))
    _record(catalogue.BREAKER_STATE, BREAKER_VALUES[breaker], agent=agent)
    pool_seen(agent, state.pool)


def pool_seen(agent: str, pool: PoolState | None) -> None:
    """The agent's pool as its ledger last answered this worker (a grant, a release)."""
    if pool is not None:
        _record(catalogue.POOL_IN_USE, pool.in_use, agent=agent)


def llm_tokens(agent: str, model: str, usage: Mapping[str, int]) -> None:
    """The tokens an llm agent's completion used, as its server reported them; the model as
    declared (a label the worker's declarations bound, not what the server answers)."""
    for direction, field in (("input", "prompt_tokens"), ("output", "completion_tokens")):
        tokens = usage.get(field, 0)
        _record(catalogue.LLM_TOKENS, tokens, agent=agent, model=model, direction=direction)
