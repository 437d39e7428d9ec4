"""The worker: runs the coordination workflows on the coordinator task queue, and each agent it
declares on the agent's own task queue."""

import asyncio
import os
import signal
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.worker import Worker

from coord.activities.events.dead_letters import DeadLetterActivities
from coord.activities.events.log import LogWriter
from coord.activities.events.lookback import ChainLookahead, ChainLookback
from coord.activities.kinds import serve
from coord.activities.mesh.apart import PayloadsJoined
from coord.activities.mesh.breakers import Breakers
from coord.activities.mesh.local_shares import LOCAL_ACTIVITY_SLOTS, LocalShares
from coord.activities.mesh.monitor import AgentMonitorActivities
from coord.activities.mesh.pools import AgentPools
from coord.activities.mesh.reports import ReportKeeper
from coord.activities.mesh.routing import AgentRouter
from coord.activities.mesh.run_agent import AgentActivities
from coord.activities.mesh.run_tally import TallyCarrier
from coord.activities.plan.planning import PlanningActivities
from coord.activities.plan.progress import PlanProgressReader
from coord.activities.plan.scratchpad import ScratchpadWriter
from coord.activities.plan.update_callers import UpdateCallers
from coord.infra.gc import options_for, sweep_forever
from coord.infra.hosted_placements import PlaceAgent, hosting
from coord.infra.logs import configure_logging, core_logging, get_logger
from coord.infra.metrics import MetricsEndpoint
from coord.infra.run_context import RunContext
from coord.infra.search_attributes import require_search_attributes
from coord.infra.task_dispatch import server_dispatch_order
from coord.infra.temporal import WORKER_RETRY, ConnectionSettings, task_queue
from coord.infra.tracing import configure_tracing, untraced
from coord.infra.workflow_runner import UnsandboxedRunner
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.declared import declared_agents
from coord.models.wire.contract import (
    AGENT_MONITOR_WORKFLOW,
    agent_monitor_workflow_id,
    agent_task_queue,
    ledger_task_queue,
)
from coord.models.wire.durations import format_duration
from coord.models.wire.specs import SpecError
from coord.workflows._runtime.interceptor import SurplusArguments
from coord.workflows.aggregator import Aggregator
from coord.workflows.chain.reactive import ReactiveChain
from coord.workflows.chain.run import ChainRun
from coord.workflows.dlq import DeadLetterEntry
from coord.workflows.mesh.ledger import AgentLedger
from coord.workflows.mesh.monitor import AgentMonitor
from coord.workflows.plan.graph import TaskGraph
from coord.workflows.plan.member import TeamMember
from coord.workflows.saga import Saga
from coord.workflows.vote import Vote

WORKFLOWS: Sequence[type] = (
    Saga,
    ReactiveChain,
    ChainRun,
    Aggregator,
    DeadLetterEntry,
    TaskGraph,
    TeamMember,
    Vote,
    AgentLedger,
    AgentMonitor,
)


def default_registry(
    agents_file: Path | None = None, *, demo_agents: bool = False
) -> AgentRegistry:
    """The agents declared in `agents_file` (or $COORD_AGENTS) with its `worker:` settings, and
    the demo agents only when asked for (`demo_agents`, or $COORD_DEMO_AGENTS), each with its
    code: what the CLI checks specs against (`declared_agents`), now served."""
    return serve(declared_agents(agents_file, demo_agents=demo_agents))


WORKER_HEARTBEAT_INTERVAL = timedelta(seconds=3)
"""How often a `coord worker` reports itself to the server;
`coord agents` counts a worker alive for 10 s after its last report or poll."""
SHUTDOWN_GRACE = timedelta(seconds=30)
"""How long a stopping `coord worker` lets its running activities (agent runs) finish before
it cancels them: a run cancelled by the stop runs again on another worker, so a rolling upgrade
would run every in-flight run twice (docs/operations.md)."""
SHUTDOWN_GRACE_ENV = "COORD_SHUTDOWN_GRACE"
HEARTBEAT_THROTTLE = timedelta(seconds=1)
"""Cancellation reaches an agent on its next heartbeat; the SDK's 30s default throttle would
hold compensation back that long when a step sets no heartbeat timeout."""


class WorkerSet:
    """The Temporal workers of one process, used like one Worker (`async with`, `run()`,
    `shutdown()`): the coordinator queue's, unless told not to, and one per agent it serves,
    polling the agent's own queue."""

    def __init__(
        self,
        workers: Sequence[Worker],
        task_queue: str,
        breakers: Breakers | None = None,
        keeper: ReportKeeper | None = None,
        lookahead: ChainLookahead | None = None,
        place: PlaceAgent | None = None,
    ) -> None:
        """`place`: where the coordinator worker places agents (`AgentRegistry.placement`),
        told to this process's starters while it runs (`hosting`); None without one."""
        if not workers:
            raise SpecError("nothing to serve: no agents, and --no-workflows")
        self.workers = list(workers)
        self._breakers = breakers
        self._keeper = keeper
        self.lookahead = lookahead
        """The coordinator worker's chain look-ahead (`ChainLookahead`)."""
        self.task_queue = task_queue
        """The coordinator queue, which names the deployment's agent queues."""
        self._running: asyncio.Task[None] | None = None
        self._place = place

    @property
    def queues(self) -> list[str]:
        return [worker.task_queue for worker in self.workers]

    async def run(self) -> None:
        """Until shut down; one worker failing stops the others. Meanwhile a saga started
        from this process on the coordinator queue is told where its agents run."""
        with hosting(self.task_queue, self._place) if self._place else nullcontext():
            async with asyncio.TaskGroup() as group:
                for worker in self.workers:
                    group.create_task(worker.run())

    async def shutdown(self) -> None:
        if self._breakers is not None:
            await self._breakers.close()  # while the ledgers' workflows are still served
        await asyncio.gather(*(worker.shutdown() for worker in self.workers))
        if self._keeper is not None:
            await self._keeper.close()

    async def __aenter__(self) -> "WorkerSet":
        self._running = asyncio.create_task(self.run())
        await asyncio.sleep(0)  # the task begins: the coordinator queue is hosted from now on
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.shutdown()
        if self._running is not None:
            await self._running


def build_worker(
    client: Client,
    queue: str | None = None,
    registry: AgentRegistry | None = None,
    *,
    only: Sequence[str] | None = None,
    workflows: bool = True,
    local_slots: int = LOCAL_ACTIVITY_SLOTS,
    shutdown_grace: timedelta = timedelta(),
) -> WorkerSet:
    """The workers serving `registry` (restricted to `only` when given): the coordinator
    worker on `queue` and the ledgers' worker (unless `workflows` is False), and one worker per
    agent on its queue. The coordinator worker runs `local_slots` local activities at once,
    half of them at most for any one agent (`LocalShares`). Shut down, they let running
    activities finish for `shutdown_grace` before cancelling them (`coord worker`:
    SHUTDOWN_GRACE; none by default, the SDK's, as tests and `coord dev` stop at once)."""
    registry = registry or default_registry()
    if only is not None:
        registry = registry.only(only)
    shares = LocalShares(local_slots)
    process = WorkerProcess.of(client, queue or task_queue(), registry, shares, shutdown_grace)
    workers = [coordinator_worker(process, registry), ledger_worker(process)] if workflows else []
    workers += [agent_worker(process, registry.only([name])) for name in registry]
    place = registry.placement if workflows else None
    return WorkerSet(
        workers, process.home, process.breakers, process.keeper, process.lookahead, place
    )


@dataclass(frozen=True)
class WorkerProcess:
    """What the workers of one process share: the client, the deployment's coordinator queue
    `home` (which names its agent queues and its ledgers' queue), the agents' breakers and pools
    (against those ledgers), the report keeper, the chain look-ahead, and the agents' shares of
    the local activity slots, and how long its workers let running activities finish when shut
    down (`shutdown_grace`)."""

    client: Client
    home: str
    breakers: Breakers
    pools: AgentPools
    keeper: ReportKeeper
    lookahead: ChainLookahead
    local_shares: LocalShares
    shutdown_grace: timedelta = timedelta()

    @classmethod
    def of(
        cls,
        client: Client,
        home: str,
        registry: AgentRegistry,
        local_shares: LocalShares,
        shutdown_grace: timedelta = timedelta(),
    ) -> "WorkerProcess":
        breakers, pools = Breakers(client, home, registry), AgentPools(client, home, registry)
        keeper, lookahead = ReportKeeper(client), ChainLookahead(client)
        return cls(client, home, breakers, pools, keeper, lookahead, local_shares, shutdown_grace)

    def agent_activities(self, registry: AgentRegistry) -> AgentActivities:
        """The `run_agent` activity (and `run_agents`, local runs' batches) for the agents of
        `registry`, through this process's breakers, pools and local shares."""
        return AgentActivities(registry, self.breakers, self.pools, self.local_shares)

    def worker(
        self, queue: str, activities: Sequence[Callable[..., Any]], **options: Any
    ) -> Worker:
        """A worker of this process on `queue`, with its heartbeat throttle and interceptors
        (`options`: the Worker's others). The report keeper comes first (outermost), so that it
        sees the heartbeat details as they are sent, with the run's tally the carrier adds; the
        joining of payloads sent apart comes next, before anything reads a run's request."""
        return Worker(
            self.client,
            task_queue=queue,
            activities=activities,
            default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
            graceful_shutdown_timeout=self.shutdown_grace,
            interceptors=[
                self.keeper,
                PayloadsJoined(),
                RunContext(),
                TallyCarrier(),
                SurplusArguments(),
            ],
            **options,
        )


def agent_worker(process: WorkerProcess, registry: AgentRegistry) -> Worker:
    """One agent's worker: `run_agent` on the agent's queue, for that agent only, paced by its
    declaration: its slot limit (`max_concurrent_per_worker`, else `max_concurrent`), the pool
    across all its workers through the process's pools (permits from the agent's ledger), and
    `rate_limit` the server's limit on the queue (one for all its workers)."""
    (agent,) = registry
    declaration = registry.declarations.get(agent)
    return process.worker(
        agent_task_queue(agent, process.home),
        [process.agent_activities(registry).run_agent],
        max_concurrent_activities=declaration.worker_slots if declaration else None,
        max_task_queue_activities_per_second=declaration.rate_limit if declaration else None,
    )


WORKFLOW_TASK_SLOTS = 1000
"""Workflow tasks the coordinator worker holds at once: ten times its local activities' slots
(`LOCAL_ACTIVITY_SLOTS`), as many as the SDK caches workflows. A workflow task stays open while
its local runs run or wait for a slot, so with 100 of each, a hundred sagas whose local agent
hangs would hold every task, and the worker's other workflows would wait for them (the agents'
ledgers, whose breakers must open then, run on a queue of their own: `ledger_worker`). An open
task holds only memory."""


def coordinator_worker(process: WorkerProcess, registry: AgentRegistry) -> Worker:
    """The workflows, the activities they run themselves, and `run_agent` for agents declared
    inline (and for runs recorded before agents had queues of their own). Its runner tells
    the chain look-ahead of each instance it creates: a new saga's chain is asked about then,
    for its placements' look-up (`ChainLookahead`)."""
    client = process.client
    delivery = DeadLetterActivities(client)
    monitor = AgentMonitorActivities(client, registry)
    lookahead = process.lookahead
    router = AgentRouter(client, registry, lookahead)
    planning = PlanningActivities(registry)
    lookback = ChainLookback(client)
    agents = process.agent_activities(registry)
    activities: list[Callable[..., Any]] = [
        agents.run_agent,
        agents.run_agents,
        lookback.chain_events,
        lookback.chain_running,
        LogWriter().write_log_segment,
        delivery.park,
        delivery.redeliver,
        delivery.declared_agent,
        delivery.stored_event,
        ScratchpadWriter(registry.settings).write_scratchpad,
        PlanProgressReader(client).plan_progress,
        UpdateCallers(client).update_caller,
        planning.planning_catalogue,
        planning.check_plan_agents,
        router.choose_agent,
        router.choose_agents,
        router.agent_served,
        router.place_agents,
        router.place_agents_with_chain,
        monitor.read_agent_health,
        monitor.publish_agent_health,
    ]
    return process.worker(
        process.home,
        activities,
        workflows=list(WORKFLOWS),
        unsandboxed_workflow_runner=UnsandboxedRunner(lookahead.instance_created),
        max_concurrent_workflow_tasks=WORKFLOW_TASK_SLOTS,
        max_concurrent_local_activities=process.local_shares.slots,
    )


def ledger_worker(process: WorkerProcess) -> Worker:
    """The deployment's agent ledgers (`ledger_task_queue`), on workflow task slots of their
    own: a breaker opens while the coordinator worker's tasks all wait on a hanging agent. The
    coordinator worker serves them too, for ledgers started on its queue before."""
    return process.worker(ledger_task_queue(process.home), [], workflows=[AgentLedger])


async def start_agent_monitor(client: Client, home: str) -> None:
    """The deployment's agent monitor (AgentHealth events), started by every worker serving its
    workflows: the first start wins, later ones find it running (USE_EXISTING), and one that
    ended (terminated, say) is started anew. Untraced (`untraced`): its readings belong to no
    correlation (a chain's handling of an AgentHealth event it delivers is in the chain's
    trace all the same)."""
    with untraced():
        await client.start_workflow(
            AGENT_MONITOR_WORKFLOW,
            id=agent_monitor_workflow_id(home),
            task_queue=home,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )


def worker_runtime(metrics: MetricsEndpoint | None = None) -> Runtime:
    """The SDK runtime of a process that runs workers: they report themselves to the server
    every WORKER_HEARTBEAT_INTERVAL, which `coord agents` reads as their health; with `metrics`,
    its exporter serves the SDK's and the product's metrics there (raises SpecError when it
    cannot: the port taken). The core's log lines join the worker's own (`core_logging`)."""
    telemetry = TelemetryConfig(
        logging=core_logging(), metrics=metrics.prometheus() if metrics else None
    )
    try:
        return Runtime(telemetry=telemetry, worker_heartbeat_interval=WORKER_HEARTBEAT_INTERVAL)
    except ValueError as error:
        if metrics is None:
            raise
        raise metrics.refused(error) from None


def shutdown_grace(seconds: float | None) -> timedelta:
    """`--shutdown-grace`, else $COORD_SHUTDOWN_GRACE (seconds), else SHUTDOWN_GRACE; raises
    SpecError naming the variable when it is no number of seconds."""
    if seconds is None:
        raw = os.environ.get(SHUTDOWN_GRACE_ENV, "").strip()
        if not raw:
            return SHUTDOWN_GRACE
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1
        if not 0 <= seconds <= 86400:
            raise SpecError(
                f"{SHUTDOWN_GRACE_ENV}: {raw!r} is not a number of seconds (0 to 86400)"
            )
    return timedelta(seconds=seconds)


def log_stopping_signals(grace: timedelta) -> None:
    """Log which signal stops the worker (the SDK logs only "Worker cancelled") and how long it
    lets running activities finish: wraps the Python-level handlers of SIGTERM and SIGINT that
    stop it (the command's cancelling of its task, asyncio's Ctrl-C), which still do so."""
    log = get_logger("worker")
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        if not callable(previous):
            continue  # the default: the process ends without a word from Python

        def stopping(signum: int, frame: Any, previous: Callable[..., Any] = previous) -> None:
            log.info(
                "worker stopping",
                signal=signal.Signals(signum).name,
                activities_finish_within=format_duration(grace),
            )
            previous(signum, frame)

        signal.signal(sig, stopping)


def served_only(registry: AgentRegistry, names: Sequence[str]) -> AgentRegistry:
    """`--only`: a name the worker does not have stops it before it connects."""
    try:
        return registry.only(names)
    except SpecError as error:
        raise SpecError(f"--only: {error}") from None


async def run_worker(
    agents_file: Path | None = None,
    *,
    demo_agents: bool = False,
    only: Sequence[str] | None = None,
    workflows: bool = True,
    metrics: MetricsEndpoint | None = None,
    grace: timedelta = SHUTDOWN_GRACE,
) -> None:
    """`coord worker`: with `metrics`, its Prometheus endpoint (docs/metrics.md); stopped (by
    SIGTERM or Ctrl-C), it lets running activities finish within `grace`, then cancels them."""
    registry = default_registry(agents_file, demo_agents=demo_agents)
    if only is not None:
        registry = served_only(registry, only)
    collection, sweeping = options_for(registry.settings, task_queue())
    settings = ConnectionSettings.load()
    client = await settings.connect(worker_runtime(metrics), retry=WORKER_RETRY)
    worker = build_worker(client, registry=registry, workflows=workflows, shutdown_grace=grace)
    if workflows:
        await require_search_attributes(client)
        await start_agent_monitor(client, worker.task_queue)
    log = get_logger("worker")
    log.info(
        "worker started",
        address=settings.address,
        task_queues=worker.queues,
        inline_agents=registry.settings.inline_agents,
    )
    log.info("task dispatch", order=await server_dispatch_order(client))
    if metrics is not None:
        log.info("metrics endpoint", url=metrics.url)
    sweeper = None
    if workflows and sweeping.every is not None:
        # The periodic collection (README "Retention"), beside the worker, stopping with it.
        log.info("gc sweep", every=str(sweeping.every))
        sweeper = asyncio.create_task(sweep_forever(client, collection, sweeping.every))
    log_stopping_signals(grace)
    try:
        await worker.run()
    finally:
        if sweeper is not None:
            sweeper.cancel()


def main() -> None:
    configure_logging()
    configure_tracing("coord-worker")
    asyncio.run(run_worker(metrics=MetricsEndpoint.of(None)))


if __name__ == "__main__":
    main()
