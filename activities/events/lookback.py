"""Reading a chain from outside it: what an aggregator's lookback needs, and whether a
correlation's chain runs (what a saga asks before it sends its events), also asked ahead
(`ChainLookahead`)."""

import asyncio
import time
from datetime import UTC, datetime, timedelta

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from coord.infra.hosted_placements import chain_runs
from coord.models import calls as refs
from coord.models.events.envelope import EventEnvelope
from coord.models.events.timeline import TimelineEntry
from coord.models.wire.contract import (
    CORRELATION_ID,
    PLAN_WORKFLOW,
    SAGA_PLACEMENTS_MEMO,
    SAGA_WORKFLOW,
    TIMELINE_QUERY,
    VOTE_WORKFLOW,
    FailureType,
    chain_workflow_id,
    failure,
)

QUERY_TIMEOUT = timedelta(seconds=10)
"""A chain whose worker is away does not answer; the attempt fails and the retry policy (a few
attempts, set by the aggregator) decides."""


class ChainLookback:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=refs.CHAIN_EVENTS.name)
    async def chain_events(self, correlation_id: str) -> list[EventEnvelope]:
        """The events a correlation's chain has recorded so far; none when it has no chain."""
        workflow_id = chain_workflow_id(correlation_id)
        handle = self._client.get_workflow_handle(workflow_id)
        try:
            timeline = await handle.query(
                TIMELINE_QUERY, result_type=list[TimelineEntry], rpc_timeout=QUERY_TIMEOUT
            )
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        except WorkflowQueryFailedError as error:
            raise failure(
                FailureType.LOOKBACK_FAILED,
                f"{workflow_id} does not answer the timeline query: {error.message}",
                non_retryable=True,
            ) from None
        return [entry.to_envelope() for entry in timeline]

    @activity.defn(name=refs.CHAIN_RUNNING.name)
    async def chain_running(self, correlation_id: str) -> bool:
        """Whether the correlation's chain runs (its latest run, across continue-as-new)."""
        return await chain_runs(self._client, correlation_id)


LOOKAHEAD_FRESH = timedelta(seconds=10)
"""How long an answer asked ahead stands: a saga's look-up asks it in its first workflow task,
which the server times out after 10 s by default; an answer older is asked again."""
MAX_LOOKAHEAD = 1024
"""Questions asked ahead and not yet taken, at most: one per saga starting on this worker now."""
ASKING_AHEAD = frozenset({SAGA_WORKFLOW, PLAN_WORKFLOW, VOTE_WORKFLOW})
"""The workflows whose first look-up asks whether their correlation's chain runs."""


class ChainLookahead:
    """Whether a new saga's chain runs, asked as this worker creates the saga's instance, so the
    answer is on its way while the saga's first activation runs and ready when its placements'
    look-up (`AgentRouter.place_agents_with_chain`) takes it: the read of the server leaves the
    saga's first workflow task, whose local activity otherwise waits for it. Nothing the saga
    records changes: the look-up returns the same answer, read a few milliseconds earlier (a
    chain started in between misses the saga's events, as one started after the look-up does).
    Bounded: questions not taken (a saga whose look-up does not ask, one that failed first)
    lapse after `fresh` (LOOKAHEAD_FRESH), and with `most` (MAX_LOOKAHEAD) waiting no more are
    asked ahead."""

    def __init__(
        self, client: Client, fresh: timedelta = LOOKAHEAD_FRESH, most: int = MAX_LOOKAHEAD
    ) -> None:
        self._client = client
        self._fresh = fresh.total_seconds()
        self._most = most
        self._asked: dict[str, tuple[float, asyncio.Task[bool]]] = {}
        """By correlation id, oldest first: when asked (monotonic seconds), and the answer."""
        self.answered_ahead = 0
        """Look-ups answered by a question asked ahead (what the saga bench reports)."""

    @property
    def waiting(self) -> int:
        """Questions asked ahead and not taken yet (lapsed ones included until the next ask)."""
        return len(self._asked)

    def instance_created(self, info: workflow.Info) -> None:
        """A workflow instance this worker creates (`coord.infra.workflow_runner`): a saga's, a
        plan's or a vote's first workflow task (`ASKING_AHEAD`), not a replay of an older run,
        asks ahead for the correlation its start named (its search attribute; a run naming
        another in its spec asks for itself)."""
        if info.workflow_type not in ASKING_AHEAD or not _fresh(info):
            return
        if SAGA_PLACEMENTS_MEMO in info.raw_memo:  # its start says: its look-up asks nothing
            return
        correlation_id = info.typed_search_attributes.get(CORRELATION_ID)
        if correlation_id:
            self.ask(correlation_id)

    def ask(self, correlation_id: str) -> None:
        """Asks now, in the background, unless a question about it is still on its way or
        `most` are waiting; outside an event loop (nothing to ask on), not at all. A question
        already answered and not taken is asked again: it may be a replay's (an instance the
        worker made again within `fresh` of the run's start, after a failed workflow task),
        which no look-up takes, and a chain may have started since."""
        self._lapse()
        if self.asking(correlation_id):
            return
        if correlation_id not in self._asked and len(self._asked) >= self._most:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        answer = loop.create_task(chain_runs(self._client, correlation_id))
        answer.add_done_callback(_seen)
        self._asked.pop(correlation_id, None)  # asked again: now the newest, for `_lapse`
        self._asked[correlation_id] = (time.monotonic(), answer)

    def asking(self, correlation_id: str) -> bool:
        """Whether a question about the correlation's chain is on its way."""
        waiting = self._asked.get(correlation_id)
        return waiting is not None and not waiting[1].done()

    async def chain_runs(self, correlation_id: str) -> bool:
        """The answer asked ahead (taken: asked once, answered once), else asked now."""
        self._lapse()
        asked = self._asked.pop(correlation_id, None)
        if asked is None:
            return await chain_runs(self._client, correlation_id)
        self.answered_ahead += 1
        return await asked[1]

    def _lapse(self) -> None:
        """Drops the questions older than `fresh` (the oldest come first)."""
        horizon = time.monotonic() - self._fresh
        for correlation_id, (at, _) in list(self._asked.items()):
            if at >= horizon:
                return
            del self._asked[correlation_id]


def _fresh(info: workflow.Info) -> bool:
    """The run's first activation is now, not a replay of a run started earlier."""
    return datetime.now(UTC) - info.start_time < LOOKAHEAD_FRESH


def _seen(answer: "asyncio.Task[bool]") -> None:
    """An answer never taken that failed is not reported as an unretrieved exception: the
    look-up, had it asked, would have asked again."""
    if not answer.cancelled():
        answer.exception()
