"""Pools, rate limits, priority and fairness, on the real
dev server: an agent's `max_concurrent` and `rate_limit` held by Temporal's own limits, the pool
as `coord agents` shows it, one correlation flooding a shared agent queue without starving
another, and idle workers taking the runs a slow one cannot (work stealing)."""

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from coord.activities.kinds import load_agents
from coord.activities.mesh.pools import answered
from coord.infra.agent_health import agents_health
from coord.infra.ledgers import LedgerClient, read_ledger
from coord.infra.task_dispatch import dispatch_order
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.events.priority import MAX_FAIRNESS_KEY_BYTES, fairness_key, task_priority
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.health import AgentHealth, AgentPool
from coord.models.mesh.ledger import BreakerConfig, PoolState
from coord.models.wire.contract import (
    ACQUIRE_PERMIT_UPDATE,
    REPORT_STATS_UPDATE,
    RUN_AGENT_ACTIVITY,
    agent_ledger_workflow_id,
    agent_task_queue,
)
from coord.starter import api
from coord.worker import build_worker
from tests.conftest import CONTINUE_AS_NEW_AFTER
from tests.helpers import connected_as, event, eventually
from tests.workers import COORD, WorkerProcess, run, server_env


@dataclass
class AgentRuns:
    """What the test agents below saw: how many ran at once, and each run's start."""

    running: int = 0
    peak: int = 0
    started: list[tuple[float, str, int]] = field(default_factory=list)
    """(monotonic time, correlation id, the event's `n`) of each run's start, in order."""
    done: int = 0
    attempts: list[tuple[int, int]] = field(default_factory=list)
    """(the event's `n`, the run's attempt) of each run's start, in order."""


RUNS = AgentRuns()
RELEASE = asyncio.Event()


async def counted(envelope: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """Counts the runs in progress at once, as the agent itself sees them."""
    RUNS.running += 1
    RUNS.peak = max(RUNS.peak, RUNS.running)
    started = (time.monotonic(), envelope.event.correlation_id or "", envelope.payload["n"])
    RUNS.started.append(started)
    try:
        await asyncio.sleep(0.1)
    finally:
        RUNS.running -= 1
        RUNS.done += 1
    return {}


async def holding_the_first(envelope: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """The first run to start holds its permit until RELEASE, heartbeating as a live run
    does; the others end at once."""
    first = not RUNS.attempts
    RUNS.attempts.append((envelope.payload["n"], context.attempt))
    while first and not RELEASE.is_set():
        context.heartbeat()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(RELEASE.wait(), 0.2)
    RUNS.done += 1
    return {}


def declared(tmp_path: Path, **declaration: Any) -> AgentRegistry:
    """A registry with one agent `pooled` (the `counted` agent), declared as in an agents file
    with `declaration`'s fields."""
    agents_file = tmp_path / "agents.yaml"
    config = {"kind": "python", "callable": f"{__name__}:counted", **declaration}
    agents_file.write_text(json.dumps({"agents": {"pooled": config}}))
    global RUNS
    RUNS = AgentRuns()
    return load_agents(agents_file, AgentRegistry())


def flood_chain(agent: str, runs: int, **subscription: Any) -> ChainSpec:
    """A chain that hands each `Work` event to `agent`, all at once (its own limit is no limit),
    its subscription's fields overridden by `subscription`."""
    fields = {"agent": agent, "events": "Work", "timeout": "2m", **subscription}
    return ChainSpec.model_validate(
        {
            "name": "flood",
            "triggers": ["Work"],
            "alerts": None,
            "max_concurrency": runs,
            "subscriptions": [fields],
        }
    )


async def flood(client: Client, task_queue: str, agent: str, runs: int, **subscription: Any) -> str:
    """Starts a chain and sends it `runs` events for `agent`; its correlation id."""
    correlation_id = f"c-{uuid.uuid4().hex[:8]}"
    spec = flood_chain(agent, runs, **subscription)
    await api.start_chain(client, spec, correlation_id, queue=task_queue)
    for n in range(runs):
        await api.publish(client, event(correlation_id, "Work", n=n))
    return correlation_id


async def ledger_updates(client: Client, agent_queue: str) -> list[str]:
    """The names of the updates the agent's ledger accepted, in order."""
    handle = client.get_workflow_handle(agent_ledger_workflow_id(agent_queue))
    return [
        event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for event in (await handle.fetch_history()).events
        if event.HasField("workflow_execution_update_accepted_event_attributes")
    ]


async def runs_done(count: int, timeout: float = 60) -> None:
    async def done() -> bool:
        return RUNS.done >= count

    await eventually(done, timeout)


async def test_max_concurrent_2_is_never_exceeded_under_20_queued_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    registry = declared(tmp_path, max_concurrent=2)
    async with build_worker(client, task_queue, registry):
        await flood(client, task_queue, "pooled", 20)
        await runs_done(20)
    assert RUNS.peak == 2, f"{RUNS.peak} runs at once"


async def test_workers_declaring_different_pools_share_the_smallest(
    client: Client, task_queue: str
) -> None:
    """Two workers declaring max_concurrent 3 and 1 for one agent, through its ledger: while
    the narrow one takes part (here a run of its own asking, again and again, as a waiting run
    does) the pool is 1; once it has left, 3 again."""
    queue = agent_task_queue(f"mixed-{uuid.uuid4().hex[:8]}", task_queue)
    wide = LedgerClient(client, queue, task_queue, BreakerConfig(), "wide")
    narrow = LedgerClient(client, queue, task_queue, BreakerConfig(), "narrow")

    async def narrow_run() -> None:
        while not (await answered(narrow.acquire_permit, "n1", 1, 60.0)).granted:
            pass

    async with build_worker(client, task_queue):
        assert (await answered(wide.acquire_permit, "w1", 3, 60.0)).granted
        waiting = asyncio.create_task(narrow_run())
        await eventually(pool_shows(client, queue, PoolState(size=1, in_use=1, waiting=1)))
        refused = await answered(wide.acquire_permit, "w2", 3, 60.0)
        assert not refused.granted, "a second would exceed the narrow worker's 1"
        await answered(wide.release_permit, "w2")
        await answered(wide.release_permit, "w1")
        await asyncio.wait_for(waiting, 30)
        await answered(narrow.release_permit, "n1")
        again = await answered(wide.acquire_permit, "w3", 3, 60.0)
        assert again.granted and again.pool == PoolState(size=3, in_use=1, waiting=0)


async def test_the_rate_limit_paces_run_starts_across_the_agents_queue(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    registry = declared(tmp_path, rate_limit=4)
    async with build_worker(client, task_queue, registry):
        await flood(client, task_queue, "pooled", 16)
        await runs_done(16)
    updates = await ledger_updates(client, agent_task_queue("pooled", task_queue))
    assert REPORT_STATS_UPDATE in updates, "the breaker's batched stats"
    assert ACQUIRE_PERMIT_UPDATE not in updates, "no max_concurrent: no permit asked"
    starts = [at for at, _, _ in RUNS.started]
    span = starts[-1] - starts[0]
    # Unlimited, 16 runs of 0.1 s start within a few tenths of a second of each other; at 4 a
    # second, after the limiter's first burst, the last starts seconds after the first.
    assert span >= 2, f"16 runs started within {span:.2f}s"
    assert RUNS.peak > 1, "the limit is on starts, not on runs at once"


async def test_a_correlation_flooding_a_shared_agent_does_not_starve_another(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    registry = declared(tmp_path, max_concurrent=1)
    async with build_worker(client, task_queue, registry):
        flooding = await flood(client, task_queue, "pooled", 30)

        async def backlogged() -> bool:
            return len(RUNS.started) >= 2

        await eventually(backlogged)
        before = len(RUNS.started)
        other = await flood(client, task_queue, "pooled", 2)
        await runs_done(32)
    order = [correlation for _, correlation, _ in RUNS.started]
    assert Counter(order) == {flooding: 30, other: 2}
    after = order[before:]
    ahead = [
        after[:i].count(flooding) for i, correlation in enumerate(after) if correlation == other
    ]
    # In arrival order the other correlation's runs would wait behind the 28 or so queued
    # before them; the server takes turns between the two correlations' fairness keys instead.
    assert max(ahead) <= 5, f"the other correlation's runs started after {ahead} flooding runs"


async def test_a_critical_event_runs_before_the_normal_ones_queued_ahead_of_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    registry = declared(tmp_path, max_concurrent=1)
    async with build_worker(client, task_queue, registry):
        correlation_id = await flood(client, task_queue, "pooled", 20)

        async def backlogged() -> bool:
            return len(RUNS.started) >= 2

        await eventually(backlogged)
        before = len(RUNS.started)
        await api.publish(client, event(correlation_id, "Work", priority=Priority.CRITICAL, n=-1))
        await runs_done(21)
    critical = next(i for i, (_, _, n) in enumerate(RUNS.started) if n == -1)
    assert critical - before <= 3, f"{critical - before} runs queued before it started first"


def test_an_events_priority_and_partition_are_its_runs_task_priority_and_fairness_key() -> None:
    urgent = EventEnvelope.new("Work", "/t", correlation_id="c-1", priority=Priority.CRITICAL)
    assert task_priority(urgent, "wf").priority_key == 1
    assert task_priority(urgent, "wf").fairness_key == "c-1"
    plain = EventEnvelope.new("Work", "/t")
    assert (task_priority(plain, "wf").priority_key, task_priority(plain, "wf").fairness_key) == (
        3,
        "wf",
    ), "normal is the server's default; no correlation: the workflow's own turn"
    tenant = EventEnvelope.new("Work", "/t", correlation_id="c-2")
    tenant.routing.partition_key = "tenant-a"
    assert task_priority(tenant, "wf").fairness_key == "tenant-a"
    long_ids = {fairness_key("x" * 100 + tail) for tail in "ab"}
    assert len(long_ids) == 2
    assert all(len(key.encode()) <= MAX_FAIRNESS_KEY_BYTES for key in long_ids)


def test_a_worker_says_what_the_server_does_with_priority_and_fairness() -> None:
    assert dispatch_order("1.32.0").startswith("server 1.32.0 starts agent runs by priority, ")
    assert "matching.enableFairness=true" in dispatch_order("1.32.0")
    assert "only with matching.useNewMatcher=true" in dispatch_order("1.27.2")
    assert "(version unknown)" in dispatch_order("")


SHELL_AGENT = """\
agents:
  {name}:
    kind: shell
    argv:
      - sh
      - -c
      - >-
        echo "+ $PPID" >> "$RUNS"; {work};
        echo "- $PPID $COORD_IDEMPOTENCY_KEY" >> "$RUNS"; echo {{}}
    env: {{RUNS: '{runs}'}}
    {limit}
"""


def shell_agent(path: Path, runs: Path, work: str, limit: str, name: str) -> Path:
    """An agents file with one shell agent, paced by `limit` (its declaration's line, such as
    `max_concurrent: 2`), that appends `+ PID` to `runs` (its worker's pid) when it starts,
    does `work`, and appends `- PID KEY` (KEY: the run's idempotency key) when it ends. Each
    line is one append: the file orders the starts and ends of every worker's runs as they
    happened."""
    path.write_text(SHELL_AGENT.format(name=name, runs=runs, work=work, limit=limit))
    return path


def run_log(runs: Path) -> list[tuple[str, int]]:
    """The (`+` or `-`, worker pid) lines the shell agents appended."""
    if not runs.exists():
        return []
    lines = (line.split() for line in runs.read_text().splitlines())
    return [(sign, int(pid)) for sign, pid, *_ in lines]


def runs_ended_by(runs: Path, pid: int) -> Counter[str]:
    """How many times the worker `pid` ran each run (by its idempotency key) to its end."""
    lines = (line.split() for line in runs.read_text().splitlines()) if runs.exists() else ()
    return Counter(
        " ".join(key) for sign, worker, *key in lines if sign == "-" and int(worker) == pid
    )


def most_at_once(log: list[tuple[str, int]]) -> int:
    """The most runs in progress at once, from the agents' own log."""
    running = peak = 0
    for sign, _ in log:
        running += 1 if sign == "+" else -1
        peak = max(peak, running)
    return peak


def ended_by_worker(log: list[tuple[str, int]]) -> Counter[int]:
    return Counter(pid for sign, pid in log if sign == "-")


def started_by(log: list[tuple[str, int]], pid: int) -> int:
    return log.count(("+", pid))


def pool_shows(client: Client, queue: str, expected: PoolState) -> Callable[[], Awaitable[bool]]:
    """Whether the agent's ledger shows its pool as `expected` (a condition to wait for)."""

    async def shows() -> bool:
        return (await read_ledger(client, queue)).pool == expected

    return shows


@asynccontextmanager
async def serving(
    client: Client, task_queue: str, log: Path, agent_queue: str, *agents_files: Path
) -> AsyncIterator[list[WorkerProcess]]:
    """One `coord worker --no-workflows` process per agents file (in their order), started
    together, each polling `agent_queue` when the block starts; all gone when it ends."""
    args = [("--agents", str(agents_file), "--no-workflows") for agents_file in agents_files]
    started = await asyncio.gather(
        *(WorkerProcess.start(client, task_queue, log, *a, polls=agent_queue) for a in args),
        return_exceptions=True,
    )
    workers = [worker for worker in started if isinstance(worker, WorkerProcess)]
    try:
        for outcome in started:
            if isinstance(outcome, BaseException):
                raise outcome
        yield workers
    finally:
        # Off the event loop: the test's own worker serves the ledgers they report to as they
        # shut down.
        await asyncio.gather(*(asyncio.to_thread(worker.stop) for worker in workers))


async def test_max_concurrent_2_holds_across_two_workers_serving_the_agent(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Each worker would run two at once (its slot limit); the ledger's permits hold the two
    of them together to two."""
    runs = tmp_path / "runs"
    agents_file = shell_agent(
        tmp_path / "agents.yaml", runs, "sleep 0.2", "max_concurrent: 2", name="shared"
    )
    queue = agent_task_queue("shared", task_queue)
    log = tmp_path / "workers.log"
    agent_workers = serving(client, task_queue, log, queue, agents_file, agents_file)
    async with build_worker(client, task_queue), agent_workers as workers:
        await flood(client, task_queue, "shared", 20)

        async def all_ended() -> bool:
            return sum(ended_by_worker(run_log(runs)).values()) == 20

        await eventually(all_ended, timeout=60)
        await eventually(pool_shows(client, queue, PoolState(size=2, in_use=0, waiting=0)))
    ran = run_log(runs)
    assert most_at_once(ran) == 2, f"{most_at_once(ran)} runs at once across both workers"
    by_worker = ended_by_worker(ran)
    assert set(by_worker) == {worker.process.pid for worker in workers}, by_worker


async def test_a_killed_workers_permits_come_back_when_their_leases_end(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A permit's lease is the run's heartbeat timeout (2 s here, plus 2 s slack), renewed while
    the run goes on: a live worker keeps its two permits for longer than a lease; SIGKILLed, it
    cannot give them back, the renewals stop and the leases end within seconds (not the runs'
    2 minutes); the other worker then runs everything, the killed runs' retries too. Each
    event's run ends once in the chain's record; its agent may have run it more than once (a
    run is at least once: an attempt the server timed out under load is retried, which is why
    agents get an idempotency key), so the agent's log is counted by run, not by line."""
    runs = tmp_path / "runs"
    log = tmp_path / "workers.log"
    queue = agent_task_queue("leased", task_queue)
    limit = "max_concurrent: 2"
    hanging = shell_agent(tmp_path / "hang.yaml", runs, "sleep 60", limit, name="leased")
    quick = shell_agent(tmp_path / "quick.yaml", runs, "sleep 0.1", limit, name="leased")
    retry = {"max_retries": 20, "initial_delay": "200ms", "max_delay": "1s"}
    doomed_worker = serving(client, task_queue, log, queue, hanging)
    async with build_worker(client, task_queue), doomed_worker as [doomed]:
        correlation_id = await flood(
            client, task_queue, "leased", 10, heartbeat_timeout="2s", retry=retry
        )

        async def both_permits_held() -> bool:
            return started_by(run_log(runs), doomed.process.pid) == 2

        await eventually(both_permits_held)
        held_at = time.monotonic()
        lease = 2 + 2

        async def held_past_a_lease() -> bool:
            return time.monotonic() - held_at > lease + 1

        await eventually(held_past_a_lease)
        pool_renewed = (await read_ledger(client, queue)).pool
        await doomed.kill()
        killed_at = time.monotonic()
        async with serving(client, task_queue, log, queue, quick) as [survivor]:

            async def survivor_started() -> bool:
                return started_by(run_log(runs), survivor.process.pid) > 0

            await eventually(survivor_started, timeout=60)
            first_start = time.monotonic() - killed_at

            chain = api.chain_handle(client, correlation_id)

            async def all_ended() -> bool:
                return len(run_ends(await chain.fetch_history())) == 10

            await eventually(all_ended, timeout=60)
            await eventually(pool_shows(client, queue, PoolState(size=2, in_use=0, waiting=0)))
            ends = run_ends(await chain.fetch_history())
    assert pool_renewed == PoolState(size=2, in_use=2, waiting=0), "renewed past one lease"
    assert 2 <= first_start <= 20, f"the survivor's first run started {first_start:.1f}s after"
    assert ends == ["completed"] * 10
    assert set(ended_by_worker(run_log(runs))) == {survivor.process.pid}, "none of the killed"
    ended = runs_ended_by(runs, survivor.process.pid)
    assert len(ended) == 10, f"each event's run ended on the survivor: {ended}"
    assert most_at_once([line for line in run_log(runs) if line[1] != doomed.process.pid]) <= 2


async def test_a_run_waiting_in_line_for_a_permit_outlives_its_heartbeat_timeout(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """One permit, heartbeat timeout 2 s, two workers: the first run holds the permit for three
    heartbeat timeouts, the second waits in line all that time. Each ask waits up to POOL_WAIT
    (2 s) in the ledger, as long as the timeout: the waiting run heartbeats while it asks, so
    its attempt lives on and each event runs once, in its first attempt. (Heartbeating only
    between answers, it timed out and was retried again and again, and the attempts that had
    timed out still ran the agent when their turn came.)"""
    global RELEASE
    RELEASE = asyncio.Event()
    registry = declared(tmp_path, max_concurrent=1, callable=f"{__name__}:holding_the_first")
    queue = agent_task_queue("pooled", task_queue)
    retry = {"max_retries": 20, "initial_delay": "200ms", "max_delay": "1s"}
    # Two workers serve the agent (each takes one run, its slot limit), the second on a client
    # of its own as another process's would be: the second run waits for the permit in the
    # ledger, not on the queue.
    other = await connected_as(client, "second-worker")
    async with (
        build_worker(client, task_queue, registry),
        build_worker(other, task_queue, registry, workflows=False),
    ):
        correlation_id = await flood(
            client, task_queue, "pooled", 2, heartbeat_timeout="2s", retry=retry
        )
        await eventually(pool_shows(client, queue, PoolState(size=1, in_use=1, waiting=1)))
        in_line_from = time.monotonic()

        async def waited_three_timeouts() -> bool:
            return time.monotonic() - in_line_from > 3 * 2

        await eventually(waited_three_timeouts)
        RELEASE.set()
        # Generous: on a loaded machine a release the ledger did not answer in time leaves the
        # permit to its lease's end.
        await runs_done(2, timeout=120)
        chain = api.chain_handle(client, correlation_id)

        async def both_recorded() -> bool:
            return len(run_ends(await chain.fetch_history())) == 2

        await eventually(both_recorded, timeout=120)
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(chain.result(), 30)
        history = await chain.fetch_history()
    assert run_attempts(history) == [1, 1], f"the runs' last attempts: {run_attempts(history)}"
    assert run_ends(history) == ["completed", "completed"]
    assert sorted(n for n, _ in RUNS.attempts) == [0, 1], f"each event ran once: {RUNS.attempts}"


def run_ids(history: WorkflowHistory) -> set[int]:
    """The scheduled event ids of the `run_agent` activities in `history`."""
    return {
        e.event_id
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == RUN_AGENT_ACTIVITY
    }


def run_attempts(history: WorkflowHistory) -> list[int]:
    """Each agent run's last attempt, as its started event records it."""
    runs = run_ids(history)
    return [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.activity_task_started_event_attributes.scheduled_event_id in runs
    ]


RUN_ENDS = {
    "activity_task_completed_event_attributes": "completed",
    "activity_task_failed_event_attributes": "failed",
    "activity_task_timed_out_event_attributes": "timed_out",
    "activity_task_canceled_event_attributes": "canceled",
}


def run_ends(history: WorkflowHistory) -> list[str]:
    """How each agent run that ended did (`completed`, `failed`, `timed_out`, `canceled`)."""
    runs = run_ids(history)
    ends = []
    for e in history.events:
        kind = e.WhichOneof("attributes")
        if kind in RUN_ENDS and getattr(e, kind).scheduled_event_id in runs:
            ends.append(RUN_ENDS[kind])
    return ends


async def test_the_pools_permits_are_carried_across_the_ledgers_continue_as_new(
    client: Client, task_queue: str
) -> None:
    queue = agent_task_queue(f"carried-{uuid.uuid4().hex[:8]}", task_queue)
    ledger = LedgerClient(client, queue, task_queue, BreakerConfig(), "test")
    handle = client.get_workflow_handle(agent_ledger_workflow_id(queue))
    async with build_worker(client, task_queue):
        assert (await answered(ledger.acquire_permit, "kept", 2, 60.0)).granted
        assert (await answered(ledger.acquire_permit, "other", 2, 60.0)).granted
        waited = await answered(ledger.acquire_permit, "waiter", 2, 60.0)
        assert not waited.granted and waited.pool == PoolState(size=2, in_use=2, waiting=1)
        await answered(ledger.release_permit, "waiter")  # what a run turned away does
        await answered(ledger.release_permit, "other")
        first_run = (await handle.describe()).run_id
        for _ in range(CONTINUE_AS_NEW_AFTER // 4):
            await answered(ledger.acquire_permit, "passing", 2, 60.0)
            await answered(ledger.release_permit, "passing")
        assert (await handle.describe()).run_id != first_run, "continued as new"
        assert (await read_ledger(client, queue)).pool == PoolState(size=2, in_use=1, waiting=0)
        assert (await answered(ledger.acquire_permit, "second", 2, 60.0)).granted
        third = await answered(ledger.acquire_permit, "third", 2, 60.0)
    assert not third.granted, "the permit kept before continuing as new still counts"


async def test_coord_agents_shows_the_pool_in_use_free_and_waiting(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    runs = tmp_path / "runs"
    agents_file = shell_agent(
        tmp_path / "agents.yaml",
        runs,
        f"while [ ! -e {release} ]; do sleep 0.1; done",
        "max_concurrent: 2",
        name="held",
    )
    queue = agent_task_queue("held", task_queue)
    # Each of the two workers takes two runs (its slots): two hold the pool's permits, two
    # wait in the ledger for one, the fifth waits on the queue.
    expected = AgentPool(in_use=2, free=0, waiting=3)
    agent_workers = serving(
        client, task_queue, tmp_path / "workers.log", queue, agents_file, agents_file
    )
    async with build_worker(client, task_queue), agent_workers:
        await flood(client, task_queue, "held", 5)

        async def full() -> bool:
            rows = await agents_health(client, {"held": "shell"}, home=task_queue)
            [row] = [row for row in rows if row.agent == "held"]
            return row.with_ledger(await read_ledger(client, queue)).pool == expected

        await eventually(full, timeout=30)
        env = server_env(dev_env, task_queue)
        # Declared to the CLI: the workers' own reports of their queues may not have come yet.
        declared = ("--agents", str(agents_file))
        code, out, err = await run(COORD, "agents", *declared, env=env)
        json_code, json_out, _ = await run(COORD, "agents", *declared, "--json", env=env)
        release.touch()

        async def all_ended() -> bool:
            return sum(ended_by_worker(run_log(runs)).values()) == 5

        await eventually(all_ended)
    assert (code, err, json_code) == (0, "", 0)
    [line] = [line for line in out.splitlines() if line.startswith("held ")] or [out]
    assert "2 in use, 0 free, 3 waiting" in [cell.strip() for cell in line.split("|")]
    [row] = [AgentHealth.model_validate(r) for r in json.loads(json_out) if r["agent"] == "held"]
    assert row.pool == expected and row.free_pool_share == 0.0


async def test_idle_workers_take_the_runs_a_slow_worker_cannot(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Work stealing needs no code: each worker asks the agent's queue for a run only when it
    has a free slot, so the fast ones take what the slow one would otherwise hold up."""
    runs = tmp_path / "runs"
    log = tmp_path / "workers.log"
    queue = agent_task_queue("stealer", task_queue)
    one_at_a_time = "max_concurrent_per_worker: 1"
    fast = shell_agent(tmp_path / "fast.yaml", runs, "true", one_at_a_time, name="stealer")
    slow = shell_agent(tmp_path / "slow.yaml", runs, "sleep 2", one_at_a_time, name="stealer")
    agent_workers = serving(client, task_queue, log, queue, slow, fast, fast)
    async with build_worker(client, task_queue), agent_workers as workers:
        await flood(client, task_queue, "stealer", 30)

        async def all_ran() -> bool:
            return sum(ended_by_worker(run_log(runs)).values()) == 30

        await eventually(all_ran, timeout=60)
    by_worker = ended_by_worker(run_log(runs))
    slow_pid, *fast_pids = (worker.process.pid for worker in workers)
    assert set(by_worker) <= {slow_pid, *fast_pids}
    assert by_worker[slow_pid] <= 5, f"the slow worker ran {by_worker[slow_pid]} of 30"
    assert sum(by_worker[pid] for pid in fast_pids) >= 25
