"""What a saga or a plan is doing while `coord saga|plan start --wait` waits: read from the server
(the workflow's pending activities, its history, the plan's `progress` query, the task queue's
pollers), so it also tells a user when no worker is there to run anything."""

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError

from coord.infra.queues import task_queue_pollers
from coord.infra.temporal import recycled_connection
from coord.models.wire.contract import RUN_AGENT_ACTIVITY
from coord.starter.api.common import NoWorker
from coord.starter.api.plans import live_progress

R = TypeVar("R")


@dataclass(frozen=True)
class StepAttempt:
    """One attempt of a step or compensation, as the server records it."""

    step: str
    attempt: int
    next_retry: datetime | None
    last_failure: str | None

    def describe(self) -> str:
        text = f"{self.step}: attempt {self.attempt}"
        if self.last_failure:
            text += f" (last failure: {self.last_failure})"
        if self.next_retry:
            wait = max(0.0, (self.next_retry - datetime.now(UTC)).total_seconds())
            text += f", next retry at {self.next_retry:%H:%M:%S} (in {wait:.0f}s)"
        return text


async def activity_names(client: Client, handle: WorkflowHandle[Any, Any]) -> dict[str, str]:
    """Activity id -> the summary the saga gave it (the step, or `compensate: X`)."""
    names = {}
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            summary = event.user_metadata.summary
            activity_id = event.activity_task_scheduled_event_attributes.activity_id
            names[activity_id] = (
                client.data_converter.payload_converter.from_payload(summary, str)
                if summary.data
                else activity_id
            )
    return names


def step_attempt(pending: PendingActivityInfo, names: dict[str, str]) -> StepAttempt:
    return StepAttempt(
        step=names.get(pending.activity_id, pending.activity_type.name),
        attempt=pending.attempt,
        next_retry=(
            pending.next_attempt_schedule_time.ToDatetime(UTC)
            if pending.HasField("next_attempt_schedule_time")
            else None
        ),
        last_failure=pending.last_failure.message or None,
    )


Sighting = tuple[Hashable, str]
"""Something seen of a running workflow: a key (each is reported once) and the line saying it."""


def agent_attempts(pending: Iterable[PendingActivityInfo]) -> list[PendingActivityInfo]:
    """The pending activities that are agents' runs. The others are the workflow's own checks
    (is an agent served again, which agent to route to, ...): not a step's attempt, so not
    reported as one."""
    return [p for p in pending if p.activity_type.name == RUN_AGENT_ACTIVITY]


async def saga_attempts(client: Client, handle: WorkflowHandle[Any, Any]) -> list[Sighting]:
    """Each step or compensation attempt, and whether a retry is scheduled."""
    pending = agent_attempts((await handle.describe()).raw_description.pending_activities)
    names = await activity_names(client, handle) if pending else {}
    attempts = [step_attempt(p, names) for p in pending]
    return [((a.step, a.attempt, a.next_retry is not None), a.describe()) for a in attempts]


async def plan_activity(client: Client, handle: WorkflowHandle[Any, Any]) -> list[Sighting]:
    """Each running task's state and its agent's latest progress summary, what the plan waits
    for, and retries (the history, for the tasks' names, only read when one is retrying)."""
    progress = await live_progress(client, handle)
    seen: list[Sighting] = []
    for task in progress.running:
        line = f"{task.task}: {task.state}" + (f", {task.summary}" if task.summary else "")
        seen.append(((task.task, task.state, task.summary), line))
    seen += [(("waiting", what), f"waiting for {what}") for what in progress.waiting_for]
    pending = (await handle.describe()).raw_description.pending_activities
    retrying = [p for p in agent_attempts(pending) if p.attempt > 1]
    names = await activity_names(client, handle) if retrying else {}
    attempts = [step_attempt(p, names) for p in retrying]
    return seen + [((a.step, a.attempt, a.next_retry is not None), a.describe()) for a in attempts]


Watch = Callable[[Client, WorkflowHandle[Any, Any]], Awaitable[list[Sighting]]]


@dataclass
class WorkerWatch:
    """Whether a worker serves the run's queue: warns once when none does, and gives up
    (NoWorker) after `timeout` seconds without one. A worker the server lists as polling but
    that did not answer the last look (`unanswered`) is none: the server lists a stopped
    worker's pollers for a while after it stopped."""

    name: str
    """What waits for a worker (`the saga`), in the warning."""
    workflow_id: str
    task_queue: str
    timeout: float
    report: Callable[[str], None]
    idle_since: float | None = None
    unanswered: bool = False
    """The last look read what a worker answers (a vote's ballots, a plan's progress), and no
    worker did (NoWorker from `answered`)."""

    async def polled(self, client: Client) -> bool:
        """Whether to look: a worker polls the queue. After a look no worker answered, the wait
        for one goes on while the next look asks again."""
        if await task_queue_pollers(client, self.task_queue):
            if not self.unanswered:
                self.idle_since = None
            return True
        self.unserved()
        return False

    def looked(self, answered: bool) -> None:
        """The look's read was answered by a worker, or refused for want of one (`unserved`)."""
        self.unanswered = not answered
        if self.unanswered:
            self.unserved()

    def unserved(self) -> None:
        """No worker serves the queue now: warns the first time, gives up past `timeout`."""
        now = asyncio.get_running_loop().time()
        verb = "answers on" if self.unanswered else "polls"
        if self.idle_since is None:
            self.idle_since = now
            self.report(
                f"warning: no worker {verb} task queue {self.task_queue!r}; {self.name} waits "
                "for one (start it with `coord worker`)"
            )
        elif now - self.idle_since > self.timeout:
            verb = "answered on" if self.unanswered else "polled"
            raise NoWorker(
                f"no worker {verb} task queue {self.task_queue!r} for {self.timeout:g}s; "
                f"{self.workflow_id} stays started and runs once a worker polls (`coord worker`)"
            )


async def outcome_with_progress(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    outcome: Awaitable[R],
    watch: Watch,
    report: Callable[[str], None],
    *,
    name: str,
    task_queue: str,
    no_worker_timeout: float,
    interval: float = 1.0,
    seen_in: Callable[[R], list[Sighting]] | None = None,
) -> R:
    """`outcome` (the run's final record); meanwhile, while a worker polls, `report` gets a line
    for each new thing `watch` sees. NoWorker when none polled for `no_worker_timeout` seconds
    (the run stays started: it runs once a worker polls). `seen_in`: what `watch` would have
    seen, read from the final record; what no round saw (a run that ended within `interval`, or
    between two rounds) is reported before the outcome returns, so nothing watched is missed."""
    waiting = asyncio.ensure_future(outcome)
    worker = WorkerWatch(name, handle.id, task_queue, no_worker_timeout, report)
    shown: set[Hashable] = set()

    def report_new(sightings: list[Sighting]) -> None:
        for key, line in sightings:
            if key not in shown:
                shown.add(key)
                report(line)

    try:
        while not (await asyncio.wait({waiting}, timeout=interval))[0]:
            try:
                if await worker.polled(client):
                    report_new(await _sightings(watch, client, handle, worker))
            except Exception as error:
                if not recycled_connection(error):
                    raise
                # The server recycled the connection under this round's reads: the next
                # round asks on the new one (minutes of waiting see one at every recycle).
        result = waiting.result()
    finally:
        waiting.cancel()
    report_new(seen_in(result) if seen_in else [])
    return result


async def _sightings(
    watch: Watch, client: Client, handle: WorkflowHandle[Any, Any], worker: WorkerWatch
) -> list[Sighting]:
    """What `watch` sees, or nothing this round when the run cannot answer (it is ending, its
    worker is busy): the next round asks again. A look refused for want of a worker (NoWorker
    from a bounded query, `answered`) tells `worker`, which decides when no worker means giving
    up: a stopped worker's pollers, which the server lists for a while, are no worker."""
    try:
        sightings = await watch(client, handle)
    except NoWorker:
        worker.looked(answered=False)
        return []
    except (RPCError, WorkflowQueryFailedError):
        return []
    worker.looked(answered=True)
    return sightings
