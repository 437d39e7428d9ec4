"""Agent health from the server: per agent queue, its pollers and backlog (DescribeTaskQueue
with stats) and the worker heartbeats of the workers serving it (ListWorkers). Read by
`coord agents` (the agents declared to the caller, and every agent queue of the deployment that
a worker reports serving) and by the coordinator's `choose_agent` (the candidates for a
capability)."""

import asyncio
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from temporalio.api.enums.v1 import TaskQueueType, WorkerStatus
from temporalio.api.worker.v1 import WorkerHeartbeat
from temporalio.api.workflowservice.v1 import ListWorkersRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from coord.infra.queues import describe_queue
from coord.models.mesh.health import AgentHealth, AgentPool, WorkerSeen, WorkerState
from coord.models.wire.contract import DEFAULT_TASK_QUEUE, agent_of_queue, agent_task_queue

WORKER_STATES: dict[int, WorkerState] = {
    WorkerStatus.WORKER_STATUS_RUNNING: "running",
    WorkerStatus.WORKER_STATUS_SHUTTING_DOWN: "shutting_down",
    WorkerStatus.WORKER_STATUS_SHUTDOWN: "shutdown",
}
WORKERS_PAGE = 1000
MAX_WORKER_PAGES = 20
"""ListWorkers is read whole (filtered here, its query language being the server's business);
this bounds what one `coord agents` reads on a namespace with very many workers."""

Heartbeats = dict[str, dict[str, WorkerHeartbeat]]
"""Task queue -> worker identity -> its latest heartbeat."""


async def agents_health(
    client: Client,
    declared: Mapping[str, str | None],
    *,
    home: str = DEFAULT_TASK_QUEUE,
    now: datetime | None = None,
    known: Iterable[str] = (),
) -> list[AgentHealth]:
    """One row per agent, by name: `declared` (name -> kind) and every agent queue of the
    deployment named by its coordinator queue `home` that a worker reports serving, named
    after the agent it serves (`queue_agents`: `known` names those whose queue name cannot
    spell them)."""
    heartbeats = await worker_heartbeats(client)
    queues = {agent_task_queue(name, home): name for name in declared}
    named = queue_agents([*declared, *known], home)
    for queue in heartbeats:
        agent = named.get(queue) or agent_of_queue(queue, home)
        if agent is not None:
            queues.setdefault(queue, agent)
    return await _rows(client, queues, declared, heartbeats, now)


def queue_agents(agents: Iterable[str], home: str) -> dict[str, str]:
    """Agent queue -> agent, for the agents named: the way back from a queue to its agent for
    any name. A name of plain characters that fits is its own queue's suffix
    (`agent_of_queue` reads it back); any other (a space, a `/`, too long) is spelled there
    with a digest, which only the declared name it came from answers."""
    return {agent_task_queue(agent, home): agent for agent in agents}


async def candidates_health(
    client: Client, agents: Iterable[str], *, home: str, now: datetime | None = None
) -> list[AgentHealth]:
    """One row per agent named, by name, and no other: what a routing decision weighs."""
    heartbeats = await worker_heartbeats(client)
    queues = {agent_task_queue(name, home): name for name in agents}
    return await _rows(client, queues, {}, heartbeats, now)


async def _rows(
    client: Client,
    queues: Mapping[str, str],
    kinds: Mapping[str, str | None],
    heartbeats: Heartbeats,
    now: datetime | None,
) -> list[AgentHealth]:
    """The rows of `queues` (queue -> agent), by agent name."""
    moment = now or datetime.now(UTC)
    rows = await asyncio.gather(
        *(
            _agent_row(client, agent, queue, kinds.get(agent), heartbeats.get(queue, {}), moment)
            for queue, agent in queues.items()
        )
    )
    return sorted(rows, key=lambda row: row.agent)


async def _agent_row(
    client: Client,
    agent: str,
    queue: str,
    kind: str | None,
    heartbeats: dict[str, WorkerHeartbeat],
    now: datetime,
) -> AgentHealth:
    activities = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
    response = await describe_queue(client, queue, activities, pollers=True, stats=True)
    polls = {
        poller.identity: poller.last_access_time.ToDatetime(UTC) for poller in response.pollers
    }
    workers = [
        WorkerSeen(
            identity=identity,
            last_poll=polls.get(identity),
            last_heartbeat=_heartbeat_time(heartbeats.get(identity)),
            state=_state(heartbeats.get(identity)),
        )
        for identity in sorted({*polls, *heartbeats})
    ]
    stats = response.stats
    age = stats.approximate_backlog_age.ToTimedelta() if stats.approximate_backlog_count else None
    return AgentHealth.of(
        agent,
        queue,
        workers,
        now,
        kind=kind,
        backlog=stats.approximate_backlog_count,
        backlog_age_s=age.total_seconds() if age is not None else None,
        pool=_pool(
            [heartbeats[w.identity] for w in workers if w.identity in heartbeats and w.alive(now)],
            stats.approximate_backlog_count,
        ),
    )


def _pool(heartbeats: list[WorkerHeartbeat], waiting: int) -> AgentPool | None:
    """The pool of the live workers whose heartbeats report their activity slots. A worker's
    first heartbeat, sent as it starts, may report none used and none available: it says
    nothing of its slots yet (read as a pool of none, the auction would weigh an idle agent
    as full), so it counts as a worker not reporting them."""
    slots = [
        heartbeat.activity_task_slots_info for heartbeat in heartbeats if _reports_slots(heartbeat)
    ]
    if not slots:
        return None
    return AgentPool(
        in_use=sum(slot.current_used_slots for slot in slots),
        free=sum(max(slot.current_available_slots, 0) for slot in slots),
        waiting=waiting,
    )


def _reports_slots(heartbeat: WorkerHeartbeat) -> bool:
    if not heartbeat.HasField("activity_task_slots_info"):
        return False
    slots = heartbeat.activity_task_slots_info
    return slots.current_used_slots > 0 or slots.current_available_slots > 0


async def worker_heartbeats(client: Client) -> Heartbeats:
    """The latest heartbeat of every worker the server lists, by task queue and identity; none
    when the server does not list workers (then polls alone show who is alive)."""
    found: Heartbeats = {}
    token = b""
    for _ in range(MAX_WORKER_PAGES):
        try:
            page = await client.workflow_service.list_workers(
                ListWorkersRequest(
                    namespace=client.namespace, page_size=WORKERS_PAGE, next_page_token=token
                )
            )
        except RPCError as error:
            if error.status in (RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.PERMISSION_DENIED):
                return found
            raise
        for info in page.workers_info:
            _keep_latest(found, info.worker_heartbeat)
        token = page.next_page_token
        if not token:
            break
    return found


def _keep_latest(found: Heartbeats, heartbeat: WorkerHeartbeat) -> None:
    by_identity = found.setdefault(heartbeat.task_queue, {})
    known = by_identity.get(heartbeat.worker_identity)
    if known is None or known.heartbeat_time.ToDatetime() < heartbeat.heartbeat_time.ToDatetime():
        by_identity[heartbeat.worker_identity] = heartbeat


def _heartbeat_time(heartbeat: WorkerHeartbeat | None) -> datetime | None:
    if heartbeat is None or not heartbeat.HasField("heartbeat_time"):
        return None
    return heartbeat.heartbeat_time.ToDatetime(UTC)


def _state(heartbeat: WorkerHeartbeat | None) -> WorkerState:
    return WORKER_STATES.get(heartbeat.status, "unknown") if heartbeat else "unknown"
