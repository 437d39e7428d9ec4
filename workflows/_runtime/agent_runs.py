"""How every workflow runs an agent: one `start_agent_run` for sagas, chains, plans, votes and
dead-letter replays.

A run is a `run_agent` activity with the caller's timeouts, retry policy, cancellation and
dispatch (`agent_dispatch`: the agent's own queue, its event's priority), and the agent picked
by capability where the run names capabilities (`assign_agent`; a plan's wave batched by
`AgentPicker`). Around it, the rules of
`coord.models.mesh.runs` for what the agent cannot take:

- a refusal made before the agent was called (its breaker is open, its pool has no permit) comes
  back at once; the run waits (a timer, stretched at random so refused runs come back apart) and
  is sent again with the attempts it had left: nothing was called, so nothing is spent. It fails
  with the refusal's type only when its `schedule_to_close_timeout` (else DEFAULT_AGENT_WAIT)
  would pass;
- a run whose agent cannot serve it (breaker open, no worker took it, timed out) goes elsewhere
  when it can: routed by capability, to the next capable agent; else to its `fallback`;
- every retry's delay is spread by the run's jitter, drawn here so it is the same on replay.

Each detour (waited, rerouted, fell back) is told to the caller, which keeps it in the run's
record; so is a wait in line for a permit of the agent's pool that ended in a permit, which the
worker reports with the result (`_pool_waited`). Runs recorded before these rules ran the
activity alone (AGENT_RUN_GATES_PATCH).

How the two sides meet: this side sends one `AgentRequest` per activity execution; the worker's
side is `run_agent` (activities/mesh/run_agent.py: admit, guard, resolve, run, keep, report).
What this side sets in the request is what that side reads: `gates_return` (a refusal of its
pool or breaker comes back at once, carrying a `GateRefusal`, instead of being retried there),
`attempts_before` (the agent's failures in the executions before, so the attempt and the
retries go on from them), `jitter` (the seeded spread of each retry's delay, which the worker
sets as the failure's `next_retry_delay`) and `budget` (`counted_retries`: the worker counts the
agent's own failures and stops retrying; the server then sets no attempt limit). What comes
back is an `AgentResult` (its data possibly a `ResultReference`), or a typed failure: a gate's,
read here by `GATE_FAILURES`, or the agent's, with its attempt.

A caller that keeps a record of its tokens hands it over (`RunSettings.tokens`, a `TokenMeter`):
every execution of the run is sent what the record has used with the spec's budget, and the
run's result is counted into the record the moment it comes back, so the next run is sent the
new total. (A chain counts in its own model instead: its runs may end in a `ChainRun`.)"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, NoReturn, Protocol, TypedDict

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    FailureError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.events.priority import task_priority
    from coord.models.mesh.agents import AgentRequest, AgentResult
    from coord.models.mesh.assignment import Assignment, CapabilityRoute, Fallback, FallbackRoute
    from coord.models.mesh.attempts import POOL_WAIT, attempt_times, pool_wait
    from coord.models.mesh.batches import BatchedFailure
    from coord.models.mesh.config import SCHEDULE_TO_START_DEFAULT, AgentConfig
    from coord.models.mesh.placement import (
        MAX_PLACED,
        ChainPlacementAsk,
        Placement,
        PlacementAnswer,
        PlacementAsk,
    )
    from coord.models.mesh.retry import LOST_RUNS_ALLOWED, RetryConfig
    from coord.models.mesh.runs import (
        GATE_FAILURES,
        GO_ELSEWHERE,
        NO_JITTER,
        DetourAction,
        GateRefusal,
        RetryJitter,
        RunAllowance,
        RunDetour,
        gate_delay,
        retry_delay,
    )
    from coord.models.mesh.usage import TokenMeter
    from coord.models.wire import contract
    from coord.models.wire.contract import (
        FailureType,
        failure_message,
        failure_type_of,
    )
    from coord.models.wire.sizes import json_size
    from coord.models.wire.versions import (
        AGENT_PLACEMENT_PATCH,
        AGENT_QUEUES_PATCH,
        AGENT_RUN_GATES_PATCH,
        AGENT_RUN_PRIORITY_PATCH,
        CAPABILITY_ROUTING_PATCH,
        COUNTED_RETRIES_PATCH,
        PLACEMENTS_ASKED_AS_ACTIVITY_PATCH,
        ROUTING_PICKS_BATCHED_PATCH,
    )
    from coord.workflows._runtime import calls
    from coord.workflows._runtime.common import uncancellable
    from coord.workflows._runtime.local_batches import BatchLane
    from coord.workflows._runtime.patches import patched


MIN_SCHEDULE_TO_CLOSE = timedelta(seconds=1)
SERVED_CHECK_TIMEOUT = timedelta(seconds=30)
SERVED_CHECK_HEARTBEAT = timedelta(seconds=5)
"""What an execution sent again late in its run's time gets at least (Temporal refuses zero)."""

PLACE_TIMEOUT = timedelta(seconds=10)
PLACE_RETRY = RetryPolicy(maximum_attempts=3)
"""The worker's answer to where its agents run is a look-up in its registry."""
PLACE_LOCAL_TIMEOUT = timedelta(seconds=60)
"""A local look-up's attempt: an attempt that timed out is replayed with the patch checks of
the workflow's first run in another place than they were recorded (a nondeterminism error),
so only a worker starved this long may see one; a slow answer across workflow task heartbeats
replays as it ran."""
PLACE_DEADLINE = timedelta(seconds=30)
"""How long a workflow waits for a worker of its queue to answer (one serving workflows alone
never does: its agents then run on their own queues)."""

Detoured = Callable[[RunDetour, Assignment | None], None]
"""Told of each detour, and of the assignment when the run was routed again by capability."""


def counted_retries(request: AgentRequest, retry: RetryConfig) -> tuple[AgentRequest, RetryPolicy]:
    """The request and the server's retry policy of a `run_agent` retried by `retry`:
    `start_activity(..., request, retry_policy=policy)` with `request, policy =
    counted_retries(request, retry)`, wherever a step's, subscription's or task's agent runs.
    The policy's backoff and non-retryable types are `retry`'s; the budget travels in the
    request (activities/run_tally.py counts it)."""
    if not patched(COUNTED_RETRIES_PATCH):
        return request, retry.to_retry_policy()
    return request.model_copy(update={"budget": retry.budget()}), retry.to_counted_policy()


class AgentDispatch(TypedDict, total=False):
    """The activity options that say where a `run_agent` goes and how long it may wait there."""

    task_queue: str
    schedule_to_start_timeout: timedelta
    priority: Priority


def agent_dispatch(
    request: AgentRequest, schedule_to_start: timedelta, *, agent_queue: bool = True
) -> AgentDispatch:
    """Where every workflow sends a `run_agent` (`start_activity(..., **agent_dispatch(...))`).

    A named agent runs on its own task queue (`agent_task_queue`, next to this workflow's
    queue), served by whichever workers declare it; if none takes the run within
    `schedule_to_start` it fails `agent_unavailable`. An agent declared inline by the spec
    stays on this workflow's queue: any coordinator worker that allows its kind can run it, and
    no worker declares it to poll a queue of its own. So does every run when `agent_queue` is
    False (a plan's `dispatch: coordinator`), handed over eagerly to the worker scheduling it.

    Either way the run waits its turn by its event's priority and its correlation's fairness
    key (`task_priority`), where the server orders tasks so."""
    dispatch = _agent_queue(request, schedule_to_start) if agent_queue else AgentDispatch()
    if patched(AGENT_RUN_PRIORITY_PATCH):
        dispatch["priority"] = task_priority(request.event, workflow.info().workflow_id)
    return dispatch


def _agent_queue(request: AgentRequest, schedule_to_start: timedelta) -> AgentDispatch:
    if request.config is not None or not patched(AGENT_QUEUES_PATCH):
        return {}
    home = workflow.info().task_queue
    return {
        "task_queue": contract.agent_task_queue(request.agent, home),
        "schedule_to_start_timeout": schedule_to_start,
    }


CHOOSE_AGENT_TIMEOUT = timedelta(seconds=30)
CHOOSE_AGENT_RETRY = RetryPolicy(maximum_attempts=5)
"""Reading the server may fail for a moment; `no_capable_agent` is not retried."""


async def assign_agent(route: CapabilityRoute | None, summary: str) -> Assignment | None:
    """The agent picked for a run that names capabilities (saga step, chain subscription, plan
    task), with every candidate's bid, for the caller to record and dispatch `run_agent` to
    (`agent_dispatch`); None for a run that names its agent. Raises the activity's error
    (`no_capable_agent` when no declared agent offers enough) like a failed run."""
    if route is None or not patched(CAPABILITY_ROUTING_PATCH):
        return None
    assignment: Assignment = await calls.execute(
        refs.CHOOSE_AGENT,
        route,
        start_to_close_timeout=CHOOSE_AGENT_TIMEOUT,
        retry_policy=CHOOSE_AGENT_RETRY,
        summary=f"choose agent: {summary}",
    )
    return assignment


async def assign_agents(routes: Sequence[CapabilityRoute], summary: str) -> list[Assignment | None]:
    """The agents picked for runs started together, in order, in one `choose_agents`: each pick
    counts as load on its agent for the picks after it, so the runs spread over the capable
    agents. None for a route no declared agent offers enough for (`assign_agent` asked alone
    fails it `no_capable_agent`, like an unbatched pick). Raises the activity's error."""
    picks: list[Assignment | None] = await calls.execute(
        refs.CHOOSE_AGENTS,
        list(routes),
        start_to_close_timeout=CHOOSE_AGENT_TIMEOUT,
        retry_policy=CHOOSE_AGENT_RETRY,
        summary=f"choose agents: {summary}",
    )
    return picks


class AgentPicker:
    """One workflow's picks by capability, batched: every `pick` asked in the same workflow
    step (the runs of a plan's wave, granted their slots together) goes into one
    `assign_agents`, sent once the step's other coroutines have asked theirs."""

    def __init__(self) -> None:
        self._asked: list[tuple[CapabilityRoute, str, asyncio.Future[Assignment | None]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def pick(self, route: CapabilityRoute | None, summary: str) -> Assignment | None:
        """As `assign_agent` (None for a run naming its agent; the activity's error raised),
        the pick made together with the others of this step."""
        if route is None or not patched(CAPABILITY_ROUTING_PATCH):
            return None
        if not patched(ROUTING_PICKS_BATCHED_PATCH):
            return await assign_agent(route, summary)
        picked: asyncio.Future[Assignment | None] = asyncio.get_running_loop().create_future()
        if not self._asked:
            asyncio.get_running_loop().call_soon(self._send)
        self._asked.append((route, summary, picked))
        assignment = await picked
        return assignment if assignment is not None else await assign_agent(route, summary)

    def _send(self) -> None:
        asked, self._asked = self._asked, []
        sending = asyncio.create_task(self._choose(asked))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _choose(
        self, asked: list[tuple[CapabilityRoute, str, asyncio.Future[Assignment | None]]]
    ) -> None:
        summary = ", ".join(each for _, each, _ in asked)
        try:
            picks = await assign_agents([route for route, _, _ in asked], summary[:200])
        except ActivityError as error:  # every run of the batch fails as its own pick would
            for _, _, picked in asked:
                if not picked.done():
                    picked.set_exception(error)
            return
        for (_, _, picked), assignment in zip(asked, picks, strict=True):
            if not picked.done():  # a run cancelled meanwhile no longer waits
                picked.set_result(assignment)


class Placements:
    """Where one workflow's agent runs go (coord.models.mesh.placement), as its worker said once
    for the agents the workflow names (`learn`). An agent it was not asked about goes to its own
    queue, as every named agent's run did before: one a route picked (routing weighs the load
    it reads from the agents' queues, which a run elsewhere would not add to), a fallback."""

    def __init__(
        self, *, local: bool = True, ask_in_activity: bool = False, only_local: bool = False
    ) -> None:
        """`local` False: an agent that would run as a local activity runs on this workflow's
        queue instead (a vote; a chain recorded before CHAIN_LOCAL_RUNS_PATCH). `ask_in_activity`:
        the worker is asked in an activity, not a local one (a chain, `_answer`).
        `only_local`: an agent that does not run locally goes where runs went before they were
        placed (its own queue, unless the run says `agent_queue` False): a plan's `dispatch`
        keeps its meaning."""
        self._only_local = only_local
        self._known: dict[str, Placement] = {}
        self._asking: asyncio.Task[None] | None = None
        self._local = local
        self._ask_in_activity = ask_in_activity
        self.chain_runs: bool | None = None
        """Whether the chain asked about with the agents runs (`learn(chain_of=...)`); None
        when not asked or not answered (answers recorded before said it only when every
        agent ran locally)."""
        self._from_start: frozenset[str] = frozenset()
        """The agents placed by the run's start (`take`), whose runs the worker checks."""

    def take(self, answer: PlacementAnswer) -> None:
        """What the run's start says (`SAGA_PLACEMENTS_MEMO`), taken as the worker's answer:
        nothing is asked about those agents, nor about the chain. Never a local run
        (`claimable`); a run placed on this workflow's queue says so (`AgentRequest.placed`),
        and the worker refuses it there (`misplaced`) for an agent it does not serve there."""
        self._known.update(answer.agents)
        self.chain_runs = answer.chain_runs
        self._from_start = frozenset(answer.agents)

    def from_start(self, agent: str) -> bool:
        """Whether `agent`'s place came from the run's start (`take`)."""
        return agent in self._from_start

    def settled(self, agents: Iterable[str]) -> bool:
        """Whether `learn(agents)` would return at once: no question in flight, every agent
        asked about (those past MAX_PLACED never are)."""
        asking = self._asking is not None and not self._asking.done()
        return not asking and not set(agents) - self._known.keys()

    async def learn(self, agents: Iterable[str], chain_of: str | None = None) -> None:
        """Asks the worker running this workflow task, in one local activity, about the agents
        not asked about yet (runs starting together wait for one question, then ask only what
        it left out); nothing for runs recorded before (AGENT_PLACEMENT_PATCH). `chain_of`:
        the same activity also says whether that correlation's chain runs (`chain_runs`)."""
        while self._asking is not None and not self._asking.done():
            await asyncio.shield(self._asking)
        asked = sorted(set(agents) - self._known.keys())[:MAX_PLACED]
        if not asked or not patched(AGENT_PLACEMENT_PATCH):
            return
        ask = (
            PlacementAsk(agents=asked)
            if chain_of is None
            else ChainPlacementAsk(agents=asked, chain_of=chain_of)
        )
        self._asking = asyncio.ensure_future(self._ask(ask))
        try:
            await asyncio.shield(self._asking)
        finally:
            self._asking = None

    async def _ask(self, ask: PlacementAsk) -> None:
        """The worker's answer; without one (a worker serving the workflows without their
        activities, or a bug), every agent asked about goes to its own queue, as before runs
        were placed."""
        try:
            answer = await self._answer(ask)
        except ActivityError as error:
            workflow.logger.warning("agents not placed: %s", failure_message(error))
            answer = PlacementAnswer(agents=dict.fromkeys(ask.agents, Placement.AGENT_QUEUE))
        except ValueError as error:  # a worker running the workflows alone, without activities
            workflow.logger.warning("agents not placed: %s", error)
            answer = PlacementAnswer(agents=dict.fromkeys(ask.agents, Placement.AGENT_QUEUE))
        self._known.update(answer.agents)
        self.chain_runs = answer.chain_runs

    async def _answer(self, ask: PlacementAsk) -> PlacementAnswer:
        """A chain (`ask_in_activity`) asks a worker of its own queue, in an activity
        (PLACEMENTS_ASKED_AS_ACTIVITY_PATCH): the workers of one queue serve the same agents,
        and the answer is an event, which replay meets in the workflow task it landed in. Any
        other workflow asks its own worker, in a local activity, whose attempts outlive no
        lookup short of a starved worker (PLACE_LOCAL_TIMEOUT)."""
        if self._ask_in_activity and patched(PLACEMENTS_ASKED_AS_ACTIVITY_PATCH):
            placed = await calls.execute(
                refs.PLACE_AGENTS,
                ask,
                start_to_close_timeout=PLACE_TIMEOUT,
                schedule_to_close_timeout=PLACE_DEADLINE,
                retry_policy=PLACE_RETRY,
                summary="where the agents run",
            )
        elif isinstance(ask, ChainPlacementAsk):
            return await calls.execute_local(
                refs.PLACE_AGENTS_WITH_CHAIN,
                ask,
                start_to_close_timeout=PLACE_LOCAL_TIMEOUT,
                retry_policy=PLACE_RETRY,
                summary="where the agents run; does the chain run?",
            )
        else:
            placed = await calls.execute_local(
                refs.PLACE_AGENTS,
                ask,
                start_to_close_timeout=PLACE_LOCAL_TIMEOUT,
                retry_policy=PLACE_RETRY,
                summary="where the agents run",
            )
        return PlacementAnswer(agents=placed)

    def of(self, request: AgentRequest) -> Placement:
        """Where `request` goes: an agent declared inline stays on this workflow's queue."""
        if request.config is not None:
            return Placement.HOME
        where = self._known.get(request.agent, Placement.AGENT_QUEUE)
        if self._only_local and where == Placement.HOME:
            return Placement.AGENT_QUEUE
        return Placement.HOME if where == Placement.LOCAL and not self._local else where

    def local(self, agent: str) -> bool:
        """Whether a run of `agent` (named, not declared inline) goes local."""
        return self._local and self._known.get(agent) == Placement.LOCAL


@dataclass(frozen=True)
class RunSettings:
    """What the caller's spec says about one run: its activity options and where it may go."""

    summary: str
    retry: RetryConfig
    start_to_close: timedelta | None = None
    schedule_to_close: timedelta | None = None
    heartbeat_timeout: timedelta | None = None
    schedule_to_start: timedelta = SCHEDULE_TO_START_DEFAULT
    cancellation: workflow.ActivityCancellationType = workflow.ActivityCancellationType.TRY_CANCEL
    activity_id: str | None = None
    agent_queue: bool = True
    """False: every run on this workflow's queue (a plan's `dispatch: coordinator`)."""
    route: CapabilityRoute | None = None
    """The capabilities the run's agent was picked for, to pick again when it cannot serve."""
    fallback: Fallback | None = None
    inline_agents: Mapping[str, AgentConfig] = field(default_factory=dict)
    """The spec's own agent declarations, for a run that goes to another agent."""
    room: Callable[[int], Awaitable[None]] | None = None
    """The caller's budget per workflow task (`FanOut.room`), which a run sent again waits for
    as the first execution did: many runs waiting at one gate come back together."""
    tokens: TokenMeter | None = None
    """The caller's record of its tokens and its spec's budget: each execution is sent the
    allowance (`AgentRequest.tokens`), and the run's usage is counted into it when it succeeds."""
    placements: Placements | None = None
    """Where the caller's agents run (`Placements`); none: each named agent on its own queue."""
    local_share: bool = True
    """False once a local execution of the run was refused (`local_share_full`: its agent holds
    its share of the worker's local activity slots): it goes on as an activity task on the
    agent's own queue, whose worker's slots are the agent's alone."""
    home_refused: bool = False
    """True once the worker refused the run on this workflow's queue, where its start placed it
    (`misplaced`): it goes on as an activity task on the agent's own queue."""

    def placement(self, request: AgentRequest) -> Placement:
        """Where this run of `request` goes. A run with a heartbeat timeout is watched by its
        heartbeats, which a local activity does not send: it goes to this workflow's queue. A
        run refused its local share goes to its agent's queue, where it holds none of the slots
        the workflow's own activities need."""
        if self.placements is None:
            return Placement.HOME if request.config is not None else Placement.AGENT_QUEUE
        where = self.placements.of(request)
        if where == Placement.LOCAL and not self.local_share:
            return Placement.AGENT_QUEUE
        if where == Placement.LOCAL and self.heartbeat_timeout is not None:
            return Placement.HOME
        if where == Placement.HOME and self.home_refused:
            return Placement.AGENT_QUEUE
        return where

    def placed_by_start(self, request: AgentRequest) -> bool:
        """Whether `request` goes to this workflow's queue because the run's start said so,
        which the worker then checks (`AgentRequest.placed`)."""
        return (
            self.placements is not None
            and request.config is None
            and self.placements.from_start(request.agent)
            and self.placement(request) == Placement.HOME
        )


class DeclaredRun(Protocol):
    """What a saga step, a chain subscription and a plan task each declare about their runs."""

    timeout: timedelta
    heartbeat_timeout: timedelta | None
    schedule_to_start_timeout: timedelta
    schedule_to_close_timeout: timedelta | None
    retry: RetryConfig
    fallback: Fallback | None

    @property
    def route(self) -> CapabilityRoute | None: ...


def declared_settings(item: DeclaredRun, summary: str, **others: Any) -> RunSettings:
    """The run settings `item` declares (its timeouts, retry policy, route and fallback), with
    the caller's `others` (any other RunSettings field, or one of these overridden)."""
    declared = RunSettings(
        summary=summary,
        retry=item.retry,
        start_to_close=item.timeout,
        schedule_to_close=item.schedule_to_close_timeout,
        heartbeat_timeout=item.heartbeat_timeout,
        schedule_to_start=item.schedule_to_start_timeout,
        route=item.route,
        fallback=item.fallback,
    )
    return replace(declared, **others)


def start_agent_run(
    request: AgentRequest, settings: RunSettings, on_detour: Detoured | None = None
) -> "asyncio.Task[AgentResult]":
    """The run, started now: awaiting it gives the agent's result or raises its ActivityError;
    cancelling it cancels the activity as `settings.cancellation` says."""
    if not patched(AGENT_RUN_GATES_PATCH):
        return _start(request, settings, settings.retry.to_retry_policy())
    run = _AgentRun(request, settings, on_detour)
    return asyncio.ensure_future(run.result(run.execute()))


def start_batched_run(
    request: AgentRequest,
    settings: RunSettings,
    batches: BatchLane,
    on_detour: Detoured | None = None,
) -> "asyncio.Task[AgentResult]":
    """A local run (`settings.placement` says LOCAL, `settings.start_to_close` set), its first
    attempt in the caller's batch (`LocalBatches`, `RunsAhead`), then on as `start_agent_run`'s:
    awaiting it gives the agent's result or raises its ActivityError."""
    run = _AgentRun(request, settings, on_detour)
    return asyncio.ensure_future(run.batched(batches))


def batched_first_attempt(request: AgentRequest, settings: RunSettings) -> AgentRequest:
    """What a run's first attempt in a batch is sent (`_AgentRun.batched`): no jitter, since the
    retry's wait is computed in the workflow (the batch's policy is not the run's)."""
    update: dict[str, Any] = {"gates_return": True, "jitter": None, "attempts_before": 0}
    if settings.tokens is not None:
        update["tokens"] = settings.tokens.allowance()
    return request.model_copy(update=update)


def _start(
    request: AgentRequest, settings: RunSettings, policy: RetryPolicy
) -> workflow.ActivityHandle[AgentResult]:
    """One execution where the run's placement says: a local activity, or an activity task on
    the agent's queue or this workflow's own."""
    where = settings.placement(request)
    if where == Placement.LOCAL:
        return calls.start(refs.RUN_AGENT, request, local=True, **_execution(settings, policy))
    agent_queue = settings.agent_queue and where == Placement.AGENT_QUEUE
    return calls.start(
        refs.RUN_AGENT,
        request,
        heartbeat_timeout=settings.heartbeat_timeout,
        **_execution(settings, policy),
        **agent_dispatch(request, settings.schedule_to_start, agent_queue=agent_queue),
    )


class ExecutionOptions(TypedDict):
    """The activity options of every execution of a run, wherever it goes. A local activity
    gets these alone: no heartbeat timeout (it sends none), no queue to wait on, no priority
    (nothing waits in line)."""

    activity_id: str | None
    start_to_close_timeout: timedelta | None
    schedule_to_close_timeout: timedelta | None
    retry_policy: RetryPolicy
    cancellation_type: workflow.ActivityCancellationType
    summary: str


def _execution(settings: RunSettings, policy: RetryPolicy) -> ExecutionOptions:
    return ExecutionOptions(
        activity_id=settings.activity_id,
        start_to_close_timeout=settings.start_to_close,
        schedule_to_close_timeout=settings.schedule_to_close,
        retry_policy=policy,
        cancellation_type=settings.cancellation,
        summary=settings.summary,
    )


def _local_retries(request: AgentRequest, retry: RetryConfig) -> tuple[AgentRequest, RetryPolicy]:
    """The request and retry policy of a local execution: retried by its worker with the
    policy's attempts, which that worker counts itself (no tally to carry between attempts: a
    local activity's attempts all run on this worker, and none is lost to a server outage)."""
    return request, retry.to_retry_policy()


class _AgentRun:
    """One run through its refusals and detours."""

    def __init__(
        self, request: AgentRequest, settings: RunSettings, on_detour: Detoured | None
    ) -> None:
        self.settings = settings
        self.on_detour = on_detour
        self.policy = settings.retry.to_retry_policy()
        self.allowance = RunAllowance.starting(
            self.policy.maximum_attempts, workflow.now(), settings.schedule_to_close
        )
        jitter = settings.retry.jitter
        seed = workflow.random().getrandbits(32)
        self.request = request.model_copy(
            update={
                "gates_return": True,
                "jitter": None if jitter == "none" else RetryJitter(kind=jitter, seed=seed),
            }
        )
        self.tried = [request.agent]
        self.fallback_taken = settings.fallback is None
        self.unserved = 0
        """Times the run was sent again after no worker took it (`_served_again`)."""
        self.local = False
        """Whether the execution under way is a local activity (`_outcome`)."""

    async def result(self, first: workflow.ActivityHandle[AgentResult]) -> AgentResult:
        """The run's result. The first execution is started by the caller, in its own step of
        the workflow, so that its command goes out where an activity's always did."""
        execution = first
        while True:
            try:
                result = await _outcome(execution, local=self.local)
                break
            except ActivityError as error:
                if not await self._recovered(error):
                    self._name_unserved(error)
                    raise
            execution = await self._again()
        return self._took(result)

    def _name_unserved(self, error: ActivityError) -> None:
        """A run no worker took fails naming its agent and the queue it waited on (the
        server's failure says only `activity ScheduleToStart timeout`): the same failure type,
        `agent_unavailable`, in words a user can act on. Words only: no command changes."""
        if failure_type_of(error) != FailureType.AGENT_UNAVAILABLE:
            return
        agent = self.request.agent
        queue = contract.agent_task_queue(agent, workflow.info().task_queue)
        error.__cause__ = TimeoutError(
            contract.unserved_words(agent, queue, self.settings.schedule_to_start),
            type=TimeoutType.SCHEDULE_TO_START,
            last_heartbeat_details=[],
        )

    async def batched(self, batches: BatchLane) -> AgentResult:
        """The run's first attempt in the caller's batch, as its first local execution would
        send it, then on as its own run: from its second attempt after its retry's wait (the
        policy's, spread here by the run's jitter) when it failed with attempts left (as its
        worker would retry it); after a refusal, or a failure it is done retrying, as after any
        execution's last (`_recovered`)."""
        timeout = self.settings.start_to_close
        assert timeout is not None  # a local run's (`start_batched_run`)
        outcome = await batches.run(batched_first_attempt(self.request, self.settings), timeout)
        if outcome.result is not None:
            return self._took(outcome.result)
        if outcome.failure is not None:
            await self._after_batched_failure(outcome.failure)
        # refused its local share, the run goes on as an activity task, which holds no local slot
        local = batches.one_local if self.settings.local_share else contextlib.nullcontext()
        async with local:
            return await self.result(await self._again())

    async def _after_batched_failure(self, failed: BatchedFailure) -> None:
        """Waits for the second attempt of a run whose first failed in its batch, or, when it
        is not retried, goes through `_recovered` as after any execution's last (raising the
        failure when the run does not go on)."""
        delay = self._retry_wait(failed)
        if delay is not None:
            self.allowance.spent += 1
            await workflow.sleep(delay, summary=f"{self.request.agent}: {failed.type}, retrying")
            return
        error = _batched_error(failed)
        if not await self._recovered(error):
            raise error

    def _retry_wait(self, failed: BatchedFailure) -> timedelta | None:
        """The wait before the second attempt of a run whose first failed in its batch; None
        when it is not retried (not retryable, or its policy allows one attempt)."""
        policy = self.policy
        if failed.non_retryable or failed.type in (policy.non_retryable_error_types or ()):
            return None
        if policy.maximum_attempts == 1:
            return None
        if failed.retry_after_s is not None:
            return timedelta(seconds=failed.retry_after_s)
        return retry_delay(
            1,
            self.request.jitter or NO_JITTER,
            initial=policy.initial_interval,
            coefficient=policy.backoff_coefficient,
            maximum=policy.maximum_interval,
        )

    async def _again(self) -> workflow.ActivityHandle[AgentResult]:
        """The next execution, sent within the caller's budget per workflow task."""
        if self.settings.room is not None:
            await self.settings.room(json_size(self.request))
        return self.execute()

    def _took(self, result: AgentResult) -> AgentResult:
        """The run's result, counted; the wait its attempt had for a permit of its agent's
        pool (in the worker, not a refusal) told as a detour."""
        if self.settings.tokens is not None:
            self.settings.tokens.add(result)
        if POOL_WAIT in result.metadata:  # a run that waited in line: most never do
            waited = pool_wait(result.metadata)
            if waited is not None:
                self._tell(_pool_waited(result, waited))
        return result

    def _sent(self) -> AgentRequest:
        """The request an execution sends now: the attempts spent before it, the tokens left."""
        update: dict[str, Any] = {"attempts_before": self.allowance.spent}
        if self.settings.tokens is not None:
            update["tokens"] = self.settings.tokens.allowance()
        placed = self.settings.placed_by_start(self.request)
        update["placed"] = Placement.HOME if placed else None
        return self.request.model_copy(update=update)

    def execute(self) -> workflow.ActivityHandle[AgentResult]:
        """One activity execution of the run, with the attempts and time it has left: its
        worker counts the agent's failures on from those of the executions before
        (`counted_retries`), or, for runs recorded before workers counted, the server does."""
        sent = self._sent()
        self.local = local = self.settings.placement(sent) == Placement.LOCAL
        request, policy = (_local_retries if local else counted_retries)(sent, self.settings.retry)
        if policy.maximum_attempts:
            policy = replace(policy, maximum_attempts=self.allowance.remaining)
        settings = self.settings
        if settings.schedule_to_close is not None:
            left = self.allowance.time_left(workflow.now())
            settings = replace(settings, schedule_to_close=max(left, MIN_SCHEDULE_TO_CLOSE))
        return _start(request, settings, policy)

    async def _recovered(self, error: ActivityError) -> bool:
        """Whether the run goes on after `error`: as an activity task, elsewhere, or after a
        wait at a gate."""
        kind = failure_type_of(error)
        if kind == FailureType.LOCAL_SHARE_FULL and self.settings.local_share:
            self._tell(_detour(self.request.agent, kind, "queued", error))
            self.settings = replace(self.settings, local_share=False)
            return True
        if kind == FailureType.MISPLACED and not self.settings.home_refused:
            self._tell(_detour(self.request.agent, kind, "queued", error))
            self.settings = replace(self.settings, home_refused=True)
            return True
        refusal = _refusal(error) if kind in GATE_FAILURES else None
        if refusal is not None:
            self.allowance.refused(refusal)
        bounded = self.settings.schedule_to_close is not None
        has_time = not bounded or self.allowance.time_left(workflow.now()) > timedelta(0)
        if kind in GO_ELSEWHERE and has_time and await self._went_elsewhere(kind, error):
            return True
        if kind == FailureType.AGENT_UNAVAILABLE and has_time:
            return await self._served_again(error)
        if refusal is None:
            return False
        delay = gate_delay(refusal, workflow.random().random())
        if delay > self.allowance.time_left(workflow.now()):
            return False
        await self._wait(kind, delay, error)
        return True

    async def _served_again(self, error: ActivityError) -> bool:
        """A run no worker took in time is sent again when a worker serves its agent now (or
        within a few seconds): it waited out a server outage or a worker's restart, which is
        no fault of the agent's; at most LOST_RUNS_ALLOWED times."""
        if self.unserved >= LOST_RUNS_ALLOWED:
            return False
        self.unserved += 1
        served: bool = await calls.execute(
            refs.AGENT_SERVED,
            self.request.agent,
            start_to_close_timeout=SERVED_CHECK_TIMEOUT,
            heartbeat_timeout=SERVED_CHECK_HEARTBEAT,
            summary=f"is {self.request.agent} served again?",
        )
        if served:
            self._tell(_detour(self.request.agent, FailureType.AGENT_UNAVAILABLE, "resent", error))
        return served

    async def _wait(self, kind: str, delay: timedelta, error: ActivityError) -> None:
        agent = self.request.agent
        self._tell(_detour(agent, kind, "waited", error, waited_s=delay.total_seconds()))
        await workflow.sleep(delay, summary=f"{agent}: {kind}, waiting to run again")

    async def _went_elsewhere(self, kind: str, error: ActivityError) -> bool:
        """Routed again among the capable agents not tried yet, else to the fallback; False
        when there is nowhere left to go."""
        agent, assignment, action = await self._next_agent()
        if agent is None:
            return False
        self._tell(_detour(self.request.agent, kind, action, error, to_agent=agent), assignment)
        self.tried.append(agent)
        self.allowance.spent = 0  # another agent: the attempts were the other one's
        self.request = self.request.model_copy(
            update={"agent": agent, "config": self.settings.inline_agents.get(agent)}
        )
        return True

    async def _next_agent(self) -> tuple[str | None, Assignment | None, DetourAction]:
        """The next capable agent not tried yet, else the fallback (once); None: nowhere."""
        if self.settings.route is not None:
            assignment = await self._pick(self.settings.route)
            if assignment is not None:
                return assignment.agent, assignment, "rerouted"
        fallback = None if self.fallback_taken else self.settings.fallback
        self.fallback_taken = True
        if isinstance(fallback, FallbackRoute):
            assignment = await self._pick(fallback.route)
            return (assignment.agent if assignment else None), assignment, "fell_back"
        return (fallback if fallback not in self.tried else None), None, "fell_back"

    async def _pick(self, route: CapabilityRoute) -> Assignment | None:
        """The capable agent picked among those not tried yet; None when there is none."""
        route = route.model_copy(update={"exclude": sorted(set(self.tried))})
        try:
            return await assign_agent(route, self.settings.summary)
        except ActivityError as error:
            if failure_type_of(error) == FailureType.NO_CAPABLE_AGENT:
                return None
            raise

    def _tell(self, detour: RunDetour, assignment: Assignment | None = None) -> None:
        workflow.logger.info("agent run detour: %s", detour.describe())
        if self.on_detour is not None:
            self.on_detour(detour, assignment)


async def outcomes_landed() -> None:
    """Returns once everything this workflow task made ready has run, so that an agent's
    outcome that arrived with a cancel is recorded before the cancel is acted on, however many
    steps its way to the record takes (an agent run is a task awaiting its activity). Runs
    recorded before took one step (`asyncio.sleep(0)`)."""
    if patched(AGENT_RUN_GATES_PATCH):
        await uncancellable(workflow.wait_condition(_always))
    else:
        await asyncio.sleep(0)


def _always() -> bool:
    return True


async def _outcome(execution: workflow.ActivityHandle[AgentResult], *, local: bool) -> AgentResult:
    """What the execution ends with, whatever a cancel of the run does meanwhile: the cancel is
    passed on to an activity task (which ends as its cancellation type says), and a result that
    arrived in the same workflow task as the cancel is kept, as awaiting the activity itself
    would keep it.

    A local execution is never cancelled: it is short, it holds the workflow task that would
    hear the cancel until it ends anyway, and it ends as an agent that ignores a cancel does
    (its result kept). The SDK's core records a local activity's cancel in one workflow task
    and may hand its outcome to the workflow only in the next, which replays differently."""
    while True:
        try:
            return await asyncio.shield(execution)
        except asyncio.CancelledError:
            if execution.done():
                return _local_outcome(execution)
            if not local:
                execution.cancel()
        except FailureError as error:
            _raise_as_activity_error(error)


def _local_outcome(execution: workflow.ActivityHandle[AgentResult]) -> AgentResult:
    try:
        return execution.result()
    except FailureError as error:
        _raise_as_activity_error(error)


def _batched_error(failed: BatchedFailure) -> ActivityError:
    """A first attempt's failure in its batch as an activity's (raised from the agent's
    ApplicationError), which is what every caller reads: its type, attempt, retry state."""
    delay = None if failed.retry_after_s is None else timedelta(seconds=failed.retry_after_s)
    cause = ApplicationError(
        failed.message,
        *failed.details,
        type=failed.type,
        non_retryable=failed.non_retryable,
        next_retry_delay=delay,
    )
    error = _as_activity_error(cause)
    error.__cause__ = cause
    return error


def _raise_as_activity_error(error: FailureError) -> NoReturn:
    if isinstance(error, ActivityError) and not _local_timeout(error):
        raise error
    cause = error.cause if isinstance(error, ActivityError) else error
    raise _as_activity_error(error) from cause


def _local_timeout(error: FailureError) -> bool:
    """A local activity timed out after its attempts: the SDK says its retry state is
    CANCEL_REQUESTED, which would read as one attempt."""
    return (
        isinstance(error, ActivityError)
        and isinstance(error.cause, TimeoutError)
        and error.retry_state == RetryState.CANCEL_REQUESTED
    )


def _as_activity_error(error: FailureError) -> ActivityError:
    """A local execution's failure as an activity's (raised from its cause): the SDK raises a
    local activity's own failure (the agent's ApplicationError, a cancel) where an activity
    task's comes wrapped in an ActivityError, which is what every caller reads (its type,
    attempt, retry state, cancel); a local timeout after its attempts says it ran out of them."""
    return ActivityError(
        error.message,
        scheduled_event_id=0,
        started_event_id=0,
        identity="",
        activity_type=refs.RUN_AGENT.name,
        activity_id="",
        retry_state=_retry_state(error),
    )


def _retry_state(error: FailureError) -> RetryState:
    if isinstance(error, ActivityError):  # a local timeout (`_local_timeout`)
        return RetryState.MAXIMUM_ATTEMPTS_REACHED
    if isinstance(error, CancelledError):
        return RetryState.CANCEL_REQUESTED
    if isinstance(error, ApplicationError) and error.non_retryable:
        return RetryState.NON_RETRYABLE_FAILURE
    return RetryState.MAXIMUM_ATTEMPTS_REACHED


def _detour(
    agent: str,
    reason: str,
    action: DetourAction,
    error: ActivityError,
    *,
    to_agent: str | None = None,
    waited_s: float | None = None,
) -> RunDetour:
    return RunDetour(
        at=workflow.now(),
        agent=agent,
        reason=reason,
        action=action,
        to_agent=to_agent,
        waited_s=None if waited_s is None else round(waited_s, 3),
        message=failure_message(error),
    )


def _pool_waited(result: AgentResult, waited: float) -> RunDetour:
    """A wait in line for a permit of the agent's pool that ended in a permit: from when the
    attempt began (as its worker reported it: its wait on its agent's queue is its own), else
    `waited` before now."""
    times = attempt_times(result.metadata)
    began = times[max(times)].started_at if times else None
    return RunDetour(
        at=began or workflow.now() - timedelta(seconds=waited),
        agent=result.agent,
        reason=FailureType.POOL_FULL.value,
        action="waited",
        waited_s=round(waited, 3),
        message=f"agent {result.agent!r}: waited {waited:g}s for a permit of its pool",
    )


def _refusal(error: ActivityError) -> GateRefusal:
    cause = error.cause
    details = cause.details if isinstance(cause, ApplicationError) else ()
    return GateRefusal.of(details[0] if details else None)
