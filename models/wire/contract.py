"""The wire contract: every name that crosses the Temporal boundary, in one place.

Workflow types and ids, the task queue, signal, query and update names, activity names, memo
keys, search attributes and failure types are what the server records and what clients,
workers and recorded histories agree on. Renaming one breaks running workflows and replays, so
each is spelled here once and everything else refers to it.

The pure layer: this module imports no worker or workflow code (only `temporalio.common` and
`temporalio.exceptions`), so clients, activities, workflows and models all import it."""

import builtins
import hashlib
import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import BaseModel
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

# --- Task queue -------------------------------------------------------------------------------

TASK_QUEUE_ENV: Final = "COORD_TASK_QUEUE"
"""The environment variable naming the task queue workers poll and clients start on."""
DEFAULT_TASK_QUEUE: Final = "coordinator"
AGENT_QUEUE_PREFIX: Final = "agent-"
MAX_TASK_QUEUE_NAME: Final = 255
"""How long a task queue name this project makes may be (Temporal allows 1000 characters; a
shorter bound keeps names readable in the UI and in `coord agents`)."""
_QUEUE_NAME_UNSAFE = re.compile(r"[^\w.@:+-]")


def agent_queue_prefix(home: str = DEFAULT_TASK_QUEUE) -> str:
    """What every agent queue of a deployment starts with. The deployment is named by its
    coordinator queue (`COORD_TASK_QUEUE`): the default one's agents are on `agent-<name>`,
    another's on `<queue>/agent-<name>`, so two deployments (or two tests) sharing a namespace
    never run each other's agents."""
    return AGENT_QUEUE_PREFIX if home == DEFAULT_TASK_QUEUE else f"{home}/{AGENT_QUEUE_PREFIX}"


LEDGER_QUEUE_SUFFIX: Final = "/ledgers"


def ledger_task_queue(home: str = DEFAULT_TASK_QUEUE) -> str:
    """The task queue of a deployment's agent ledgers (its breakers and pools), served by every
    worker serving its workflows, on workflow task slots of its own: the coordinator queue's can
    all be held by workflows waiting on a hanging local agent, whose breaker must open then."""
    return f"{home}{LEDGER_QUEUE_SUFFIX}"


def ledger_home(task_queue: str) -> str:
    """The coordinator queue of the deployment whose ledgers run on `task_queue`
    (`ledger_task_queue`'s inverse), where the activities a ledger needs are served: its own
    queue's worker runs none. A ledger started on its coordinator queue (before ledgers had a
    queue of their own) is on it already."""
    return task_queue.removesuffix(LEDGER_QUEUE_SUFFIX)


def agent_task_queue(agent: str, home: str = DEFAULT_TASK_QUEUE) -> str:
    """The task queue the workers serving `agent` poll and its runs are dispatched to. An agent
    name is any string: characters outside letters, digits and `.@:+-_` become `_`, and a name
    changed so, or cut to the bound, gets a digest of the original, so two agents never share
    a queue."""
    prefix = agent_queue_prefix(home)
    return prefix + _safe_name(agent, MAX_TASK_QUEUE_NAME - len(prefix))


def _safe_name(name: str, room: int) -> str:
    """`name` if it is made of safe characters and fits `room`; else its safe characters cut
    to fit with a digest of the original, so two names never come out the same."""
    safe = _QUEUE_NAME_UNSAFE.sub("_", name)
    if safe == name and len(name) <= room:
        return name
    digest = "~" + hashlib.sha256(name.encode()).hexdigest()[:12]
    return safe[: room - len(digest)] + digest


def agent_of_queue(queue: str, home: str = DEFAULT_TASK_QUEUE) -> str | None:
    """The agent an agent queue of this deployment serves (as its queue spells it), else None."""
    prefix = agent_queue_prefix(home)
    return queue.removeprefix(prefix) if queue.startswith(prefix) and queue != prefix else None


# --- Workflow types and patterns --------------------------------------------------------------

SAGA_WORKFLOW: Final = "Saga"
CHAIN_WORKFLOW: Final = "ReactiveChain"
AGGREGATOR_WORKFLOW: Final = "Aggregator"
DEAD_LETTER_WORKFLOW: Final = "DeadLetterEntry"
PLAN_WORKFLOW: Final = "TaskGraph"
VOTE_WORKFLOW: Final = "Vote"
AGENT_MONITOR_WORKFLOW: Final = "AgentMonitor"
AGENT_LEDGER_WORKFLOW: Final = "AgentLedger"
CHAIN_RUN_WORKFLOW: Final = "ChainRun"
"""One agent run (or vote) of a chain, in a workflow of its own that outlives the chain's run."""
TEAM_MEMBER_WORKFLOW: Final = "TeamMember"
"""A plan's long-lived team member: a mailbox, its agent run on each message, its memory."""
DELIVER_SIGNAL: Final = "deliver"
"""A message for a long-lived team member (`TeamMessage`), from its plan."""
MEMBER_SENT_SIGNAL: Final = "member_sent"
"""What a long-lived member's run asked to send (`MemberSent`), to its plan, which checks it."""


class Pattern(StrEnum):
    """The `CoordPattern` search attribute: which coordination pattern a run is."""

    SAGA = "saga"
    CHAIN = "chain"
    AGGREGATOR = "aggregator"
    DLQ = "dlq"
    PLAN = "plan"
    VOTE = "vote"


# --- Workflow ids -----------------------------------------------------------------------------

SAGA_ID_PREFIX: Final = "saga-"
CHAIN_ID_PREFIX: Final = "chain-"
AGGREGATOR_ID_PREFIX: Final = "aggregator-"
DEAD_LETTER_ID_PREFIX: Final = "dlq-"
PLAN_ID_PREFIX: Final = "plan-"
VOTE_ID_PREFIX: Final = "vote-"
AGENT_MONITOR_ID_PREFIX: Final = "agent-monitor-"


def saga_workflow_id(saga_id: str) -> str:
    return SAGA_ID_PREFIX + saga_id


def saga_id_of(workflow_id: str) -> str:
    """The saga id a saga's workflow id carries."""
    return workflow_id.removeprefix(SAGA_ID_PREFIX)


def chain_workflow_id(correlation_id: str) -> str:
    """A correlation has at most one chain: its workflow id is the correlation id's."""
    return CHAIN_ID_PREFIX + correlation_id


CHAIN_RUN_SEPARATOR: Final = "/"
"""Between a chain's workflow id and its run's part in the run's id (`chain-C/run-7`)."""


def chain_run_workflow_id(chain_workflow_id: str, seq: int) -> str:
    """A chain's run `seq` (its queue number, unique across the chain's continue-as-new)."""
    return f"{chain_workflow_id}{CHAIN_RUN_SEPARATOR}run-{seq}"


def is_chain_workflow_id(workflow_id: str) -> bool:
    return workflow_id.startswith(CHAIN_ID_PREFIX)


def correlation_id_of_chain(workflow_id: str) -> str:
    """The correlation id a chain's workflow id carries, or one of its runs' (`/run-N` after
    it: a correlation id, an identifier, holds no `/`)."""
    return workflow_id.removeprefix(CHAIN_ID_PREFIX).partition(CHAIN_RUN_SEPARATOR)[0]


ID_PART_SEPARATOR: Final = "~"
"""Joins the two user-chosen parts of an id built from two (a plan and its task, an aggregator
and its correlation). No identifier holds it (`coord.models.wire.specs.IDENTIFIER`), so the pair is
read back one way only: plan `a-b` with task `c` is `a-b~c`, plan `a` with task `b-c` is
`a~b-c`, and neither is any single identifier."""


def scoped_id(outer: str, inner: str) -> str:
    """The id of `inner` within `outer` (both identifiers), unambiguous (`ID_PART_SEPARATOR`)."""
    return f"{outer}{ID_PART_SEPARATOR}{inner}"


def aggregator_workflow_id(aggregator_id: str, correlation_id: str | None = None) -> str:
    """One aggregator per spec, or per spec and correlation when it is scoped to one
    (`aggregator-<aggregator_id>~<correlation_id>`)."""
    scoped = scoped_id(aggregator_id, correlation_id) if correlation_id else aggregator_id
    return AGGREGATOR_ID_PREFIX + scoped


def correlation_of_target(workflow_id: str | None) -> str | None:
    """The correlation a chain's or a scoped aggregator's workflow id carries; None for any
    other workflow (a dead letter without an event is listed by its target's correlation)."""
    if not workflow_id:
        return None
    if workflow_id.startswith(CHAIN_ID_PREFIX):
        return correlation_id_of_chain(workflow_id) or None
    if workflow_id.startswith(AGGREGATOR_ID_PREFIX) and ID_PART_SEPARATOR in workflow_id:
        return workflow_id.rsplit(ID_PART_SEPARATOR, 1)[1] or None
    return None


def as_aggregator_workflow_id(name: str) -> str:
    """What a user names an aggregator by (its workflow id, or that id without the prefix)
    as its workflow id."""
    return name if name.startswith(AGGREGATOR_ID_PREFIX) else AGGREGATOR_ID_PREFIX + name


def dead_letter_workflow_id(digest: str) -> str:
    """A dead-letter entry's id, from a digest of what it parks (so parking twice finds it)."""
    return DEAD_LETTER_ID_PREFIX + digest


def plan_workflow_id(plan_id: str) -> str:
    return PLAN_ID_PREFIX + plan_id


def member_workflow_id(plan_id: str, member: str) -> str:
    """`member-<plan_id>~<member>`: a long-lived team member of a plan."""
    return "member-" + scoped_id(plan_id, member)


def plan_id_of(workflow_id: str) -> str:
    """The plan id a plan's workflow id carries."""
    return workflow_id.removeprefix(PLAN_ID_PREFIX)


def as_plan_workflow_id(name: str) -> str:
    """What a user names a plan by (its workflow id, or its plan id) as its workflow id."""
    return name if name.startswith(PLAN_ID_PREFIX) else PLAN_ID_PREFIX + name


LEDGER_ID_PREFIX: Final = "ledger-"


def agent_ledger_workflow_id(agent_queue: str) -> str:
    """An agent's ledger (its circuit breaker and recent stats): one per agent queue."""
    return LEDGER_ID_PREFIX + agent_queue


def vote_workflow_id(vote_id: str) -> str:
    return VOTE_ID_PREFIX + vote_id


def vote_id_of(workflow_id: str) -> str:
    """The vote id a vote's workflow id carries."""
    return workflow_id.removeprefix(VOTE_ID_PREFIX)


def as_vote_workflow_id(name: str) -> str:
    """What a user names a vote by (its workflow id, or its vote id) as its workflow id."""
    return name if name.startswith(VOTE_ID_PREFIX) else VOTE_ID_PREFIX + name


def agent_monitor_workflow_id(home: str = DEFAULT_TASK_QUEUE) -> str:
    """A deployment (named by its coordinator queue) has one agent monitor."""
    return AGENT_MONITOR_ID_PREFIX + home


# --- Signals, queries, updates ----------------------------------------------------------------

EVENT_SIGNAL: Final = "event"
"""An event addressed to a saga, chain or aggregator. Untyped on purpose: the Temporal CLI and
other clients send plain JSON, which the workflow validates (and parks if it must)."""
CHAIN_EVENT_SIGNAL: Final = "chain_event"
"""An event a chain recorded, forwarded to a listener (an aggregator) of its correlation."""
RERUN_SIGNAL: Final = "rerun"
"""A dead letter replayed to a chain: run the subscription's agent again on the event."""
RECORDED_SIGNAL: Final = "recorded"
"""A rewound copy's past: events its chain takes as they stood in the original, matching them
(joins, alerts, the terminal event) without running an agent for them."""
ATTACH_SIGNAL: Final = "attach"
"""An aggregator asks its correlation's chain to forward what it records (with its id)."""
DETACH_SIGNAL: Final = "detach"
"""A finished aggregator asks its chain to forward nothing more (with its id)."""
CLOSE_SIGNAL: Final = "close"
"""A chain accepts no more events, finishes what it started, and ends; a long-lived team
member handles what its mailbox holds, and ends."""
RUN_OUTCOME_SIGNAL: Final = "run_outcome"
"""A chain's run (`ChainRun`) reports its outcome to the chain, whichever run of it is current."""

STATE_QUERY: Final = "state"
"""A saga's, chain's or aggregator's current record."""
TIMELINE_QUERY: Final = "timeline"
"""A chain's recorded events, the correlation table."""
ENTRY_QUERY: Final = "entry"
"""A dead-letter entry's whole record."""
PROGRESS_QUERY: Final = "progress"
"""A plan's running tasks with their elapsed time, and its counts (their agents' latest words
are read from the server by whoever asks; plans started before polled them into it)."""
LEDGER_QUERY: Final = "ledger"
"""An agent ledger's breaker state and recent-window stats (AgentLedgerState)."""

REPLAY_UPDATE: Final = "replay"
"""Replay a dead-letter entry (optionally with a fixed payload)."""
ARCHIVE_UPDATE: Final = "archive"
"""Archive a dead-letter entry with a note."""
APPROVE_UPDATE: Final = "approve"
"""Approve or reject a plan task waiting for a person (who, why)."""
ADD_TASKS_UPDATE: Final = "add_tasks"
"""Add tasks to a running plan (validated against its graph; refused naming the field)."""
REPORT_OUTCOME_UPDATE: Final = "report_outcome"
"""A worker tells an agent's ledger of a run that matters to its breaker (a failure, the success
ending a streak, a probe's outcome); answers the ledger's state."""
CLAIM_PROBE_UPDATE: Final = "claim_probe"
"""A worker asks a half-open breaker's ledger for its one probe run."""
REPORT_STATS_UPDATE: Final = "report_stats"
"""A worker's batch of counted runs of an agent, every few seconds, to its ledger."""
ACQUIRE_PERMIT_UPDATE: Final = "acquire_permit"
"""A run of an agent declaring max_concurrent asks its ledger for one of the pool's permits
(waiting a bounded time for one); answers whether it was granted."""
RELEASE_PERMIT_UPDATE: Final = "release_permit"
"""A run gives its pool permit back (or stops waiting for one)."""
PUBLISH_UPDATE: Final = "publish"
"""An acknowledged publish: the chain takes the event in at once and answers `PublishAnswer`;
its validator refuses (one line, a failure type) an event the chain would reject."""

UNKNOWN_SIGNAL: Final = ""
"""The key of `HANDLER_TEXT` for a workflow's dynamic signal handler (nameless)."""
HANDLER_TEXT: Final[Mapping[str, str]] = {
    EVENT_SIGNAL: "An event, as an EventEnvelope in JSON; one that does not validate is parked "
    "in the dead-letter queue as invalid_envelope",
    CHAIN_EVENT_SIGNAL: "An event its correlation's chain recorded, forwarded to this listener",
    RERUN_SIGNAL: "A dead letter replayed: run the subscription's agent again on its event",
    RECORDED_SIGNAL: "A rewound copy's past: events taken as recorded, without running agents",
    ATTACH_SIGNAL: "An aggregator asks to be forwarded what this chain records",
    DETACH_SIGNAL: "An aggregator asks to be forwarded nothing more",
    CLOSE_SIGNAL: "Take nothing new: finish what was started, then end",
    RUN_OUTCOME_SIGNAL: "The outcome of one of this chain's agent runs, from its ChainRun",
    DELIVER_SIGNAL: "A message for this team member (TeamMessage), from its plan",
    MEMBER_SENT_SIGNAL: "What a team member's run asked to send (MemberSent); checked, else parked",
    UNKNOWN_SIGNAL: "Any signal no other handler takes: parked in the dead-letter queue as "
    "invalid_input, with what it carried",
    STATE_QUERY: "Its record now (what coord's state command shows)",
    TIMELINE_QUERY: "The chain's recorded events, the correlation's table",
    ENTRY_QUERY: "The dead-letter entry's whole record",
    PROGRESS_QUERY: "The plan's running tasks, their elapsed times, and its counts",
    LEDGER_QUERY: "The agent's breaker and its recent runs (AgentLedgerState)",
    APPROVE_UPDATE: "Approve or reject a task waiting for a person (ApprovalRequest)",
    REPORT_OUTCOME_UPDATE: "A worker reports a run that matters to the agent's breaker",
    CLAIM_PROBE_UPDATE: "A worker asks the half-open breaker for its probe run",
    REPORT_STATS_UPDATE: "A worker's batch of the agent's counted runs",
    ACQUIRE_PERMIT_UPDATE: "A run asks for one of the agent's pool permits, waiting its turn",
    RELEASE_PERMIT_UPDATE: "A run gives its pool permit back, or stops waiting for one",
    PUBLISH_UPDATE: "Publish an event and hear at once whether it was accepted (with its "
    "sequence number), a duplicate, or refused and why",
}
"""What each signal, query and update takes or answers, as the Temporal UI and `temporal
workflow metadata` show it beside its name. Not the updates a client calls by typed reference
(`replay`, `archive`, `add_tasks`): the SDK types a described update's result as a coroutine."""

PublishVerdict = Literal["accepted", "duplicate", "refused"]


class PublishAnswer(BaseModel):
    """What a chain answers an acknowledged publish (`PUBLISH_UPDATE`): the event was
    `accepted` and recorded as `seq` in the chain's timeline; a `duplicate` of one it had
    already seen (`seq`: the number that one got, while the chain still keeps it in its
    timeline window); or `refused`, with the intake's `failure_type` and `reason` (the API
    builds that answer from the validator's refusal: nothing was recorded or parked)."""

    verdict: PublishVerdict
    event_id: str
    workflow_id: str
    seq: int | None = None
    failure_type: str | None = None
    reason: str | None = None

    def describe(self) -> str:
        """One line for a person: what the chain did with the event."""
        if self.verdict == "accepted":
            return f"accepted {self.event_id} as seq {self.seq} by {self.workflow_id}"
        if self.verdict == "duplicate":
            had = f"seq {self.seq}" if self.seq is not None else "a seq no longer kept"
            return f"duplicate {self.event_id} (it had {had}) at {self.workflow_id}"
        return f"refused {self.event_id} by {self.workflow_id} ({self.failure_type}): {self.reason}"


# --- Activities -------------------------------------------------------------------------------

RUN_AGENT_ACTIVITY: Final = "run_agent"
"""Runs an agent by name (or inline declaration) on an event: every agent run goes through it."""
RUN_AGENTS_ACTIVITY: Final = "run_agents"
"""Runs the first attempts of several local agent runs side by side, each as `run_agent` would
(a chain's burst, as one local activity)."""
PARK_DEAD_LETTER_ACTIVITY: Final = "park_dead_letter"
"""Starts a dead-letter entry's workflow for what a workflow could not handle."""
REDELIVER_ACTIVITY: Final = "redeliver"
"""Delivers a replayed dead letter to its target workflow (as an event or a chain rerun)."""
DECLARED_AGENT_ACTIVITY: Final = "declared_agent"
"""Reads the agent's inline declaration from a replay's target workflow's own start event."""
STORED_EVENT_ACTIVITY: Final = "stored_event"
"""Reads again, from the worker's payload store, the event a dead letter waits for (one its
parker could not read: `payload_unavailable`), so a replay delivers it."""
CHAIN_EVENTS_ACTIVITY: Final = "chain_events"
"""Reads the events a correlation's chain has recorded (an aggregator's lookback)."""
CHAIN_RUNNING_ACTIVITY: Final = "chain_running"
"""Whether a correlation's chain runs (a saga, before it sends its first event)."""
PLACE_AGENTS_WITH_CHAIN_ACTIVITY: Final = "place_agents_with_chain"
"""Where a workflow's agents run, and whether its correlation's chain runs when they all run
locally: one local activity for both questions a saga of local agents asks."""
PLAN_PROGRESS_ACTIVITY: Final = "plan_progress"
"""Reads a plan's running activities' latest heartbeat details (progress, attempt, failure), for
the plans that poll them (started before plans stopped polling)."""
UPDATE_CALLER_ACTIVITY: Final = "update_caller"
"""Reads who sent a workflow update (the client identity the server recorded with it) from the
run's history: the author of a plan's approval."""
WRITE_LOG_SEGMENT_ACTIVITY: Final = "write_log_segment"
"""Writes a segment of a chain's log (consecutive timeline rows) to the payload store."""
WRITE_SCRATCHPAD_ACTIVITY: Final = "write_scratchpad"
"""Writes a plan's scratchpad files (task plan, worker results, final report) on the worker."""
PLANNING_CATALOGUE_ACTIVITY: Final = "planning_catalogue"
"""The agents a plan's planner may give tasks to, with their capabilities (the worker's)."""
CHECK_PLAN_AGENTS_ACTIVITY: Final = "check_plan_agents"
"""Checks a planned graph's agents and capabilities against the worker's agents (the rule a
spec is checked by where it enters); answers the first problem, or none."""
CHOOSE_AGENT_ACTIVITY: Final = "choose_agent"
"""Picks the agent for a run that names capabilities: candidates, their load and record, the
strategy's winner (on the coordinator queue)."""
CHOOSE_AGENTS_ACTIVITY: Final = "choose_agents"
AGENT_SERVED_ACTIVITY: Final = "agent_served"
PLACE_AGENTS_ACTIVITY: Final = "place_agents"
"""Whether a live worker serves an agent's queue (waiting a little for one to come back): a run
that no worker took while the server was away is sent again, not failed."""
"""Picks the agents for the runs a workflow starts together (a plan's wave), each pick seeing
the ones before it."""
READ_AGENT_HEALTH_ACTIVITY: Final = "read_agent_health"
"""Reads the health of a deployment's agents from the server (the agent monitor's reading)."""
PUBLISH_AGENT_HEALTH_ACTIVITY: Final = "publish_agent_health"
"""Delivers an AgentHealth event to the running chains whose subscriptions use the agent."""

# --- Events the product publishes -------------------------------------------------------------

AGENT_HEALTH_EVENT: Final = "AgentHealthEvent"
"""The system event (its event taxonomy's `AgentHealthEvent`): an agent turned healthy
or unreachable, or its circuit breaker changed state. Chains subscribe to it like any event."""
AGENT_HEALTH_TOPIC: Final = "agents.health"
"""Its topic: a subscription without a topic, or with this one, takes it."""
AGENT_MONITOR_SOURCE: Final = "/agent-monitor"
"""Its source (the agent column of `coord events`): the deployment's `AgentMonitor`."""

# --- Memo keys --------------------------------------------------------------------------------

SAGA_RECORD_MEMO: Final = "saga_state"
"""A finished saga's record, kept where visibility can read it after its history is gone."""
AGGREGATOR_RECORD_MEMO: Final = "aggregator_state"
"""A finished aggregator's record, as above."""
PLAN_RECORD_MEMO: Final = "plan_state"
"""A finished plan's record (its final report), as above."""
VOTE_RECORD_MEMO: Final = "vote_state"
"""A cancelled vote's record (the ballots cast until then), as above."""
SAGA_VERSION_MEMO: Final = "saga_version"
"""The saga runtime version a saga's starter wrote into its run's start (`versions.SAGA_VERSION`):
which of the saga's patches the run takes without asking."""
SAGA_PLACEMENTS_MEMO: Final = "saga_placements"
"""Where a saga's agents run and whether its correlation's chain runs
(`coord.models.mesh.placement.PlacementAnswer`), written into its start by a starter whose own
process hosts the worker of the saga's queue (`start_saga`): the run then asks its worker
nothing before its first step. A start is not trusted: the run takes only placements on its own
queue or the agents' queues, and the worker refuses a run placed on its queue for an agent it
does not serve there (`misplaced`)."""
SAGA_HISTORY_BUDGET_MEMO: Final = "saga_history_budget"
"""A history size smaller than a saga's budget (`models.saga.budget.HistoryBudget.lowered`),
for a test that reaches it in seconds: never written by coord's starters, and a larger one is
ignored."""
DEAD_LETTER_SUMMARY_MEMO: Final = "summary"
"""A dead-letter entry's listing row, so listing needs no query per entry."""

ARGUMENT_COUNT_METADATA: Final = "coord-argument-count"
"""Payload metadata marking arguments sent beyond what a handler takes."""

STORED_OBJECT_NAME: Final = re.compile(r"[0-9a-f]{64}")
"""A payload-store object's name: the SHA-256 of its bytes, in lowercase hex."""
PAYLOAD_UNAVAILABLE: Final = "payload_unavailable"
"""The one key of what a payload store reference resolves to when its object cannot be read
(`{"payload_unavailable": {"sha256": ..., "reason": ...}}`), so a workflow says so."""

# --- Search attributes ------------------------------------------------------------------------

CORRELATION_ID = SearchAttributeKey.for_keyword("CorrelationId")
COORD_PATTERN = SearchAttributeKey.for_keyword("CoordPattern")
COORD_STATUS = SearchAttributeKey.for_keyword("CoordStatus")
FAILURE_TYPE = SearchAttributeKey.for_keyword("CoordFailureType")
EVENT_TYPE = SearchAttributeKey.for_keyword("CoordEventType")
TOPIC = SearchAttributeKey.for_keyword("CoordTopic")
"""A dead letter's failure type and the type and topic of the event it holds, so the queue is
filtered and counted by visibility (`CoordPattern = 'dlq' AND CoordFailureType = 'timeout'`)."""

AGENTS = SearchAttributeKey.for_keyword_list("CoordAgents")
"""The agents a chain's subscriptions name (`agent_search_values`), so the agent monitor finds
the chains to tell when one of them changes health (`agent_clause`)."""

REWIND_OF = SearchAttributeKey.for_keyword("CoordRewindOf")
"""On a rewound copy's runs: `<original correlation>@<event id>`, what it was rewound from."""

SEARCH_ATTRIBUTES: tuple[SearchAttributeKey[Any], ...] = (
    CORRELATION_ID,
    COORD_PATTERN,
    COORD_STATUS,
    FAILURE_TYPE,
    EVENT_TYPE,
    TOPIC,
    AGENTS,
    REWIND_OF,
)
"""Every custom search attribute; every server the project starts registers them."""
MAX_AGENT_SEARCH_VALUE: Final = 64
AGENTS_SEARCH_BUDGET: Final = 1024
"""Bytes of agent names one run's `CoordAgents` holds at most: the server fails a workflow whose
search attribute value passes 2 KB (`limit.searchAttributeSizeLimit`), whatever its spec says."""

SearchValues = dict[SearchAttributeKey[str], str]


def coordination_attributes(
    pattern: Pattern, *, correlation_id: str, status: str, rewind_of: str | None = None
) -> SearchValues:
    """What every pattern's run is found by in the UI; a rewound copy (`rewind_of`, its origin's
    search value) is found by its original too."""
    values = {CORRELATION_ID: correlation_id, COORD_PATTERN: pattern.value, COORD_STATUS: status}
    if rewind_of is not None:
        values[REWIND_OF] = rewind_of
    return values


def agent_search_value(agent: str) -> str:
    """How `CoordAgents` spells an agent: its name when short and made of plain characters
    (letters, digits, `.@:+-_`), else a bounded safe form with a digest, which also keeps
    quotes out of visibility queries."""
    return _safe_name(agent, MAX_AGENT_SEARCH_VALUE)


def agent_search_values(agents: Iterable[str]) -> list[str]:
    """A run's `CoordAgents`: its agents' search values in order, as many as fit the budget."""
    values: list[str] = []
    size = 0
    for value in sorted({agent_search_value(agent) for agent in agents}):
        size += len(value.encode())
        if size > AGENTS_SEARCH_BUDGET:
            break
        values.append(value)
    return values


def agent_clause(agent: str) -> str:
    """The visibility query clause selecting the runs whose `CoordAgents` names `agent`."""
    return f"{AGENTS.name} = '{agent_search_value(agent)}'"


def as_start_attributes(values: SearchValues) -> TypedSearchAttributes:
    return TypedSearchAttributes([SearchAttributePair(key, value) for key, value in values.items()])


def pattern_clause(pattern: Pattern) -> str:
    """The visibility query clause selecting one pattern's runs."""
    return f"{COORD_PATTERN.name} = '{pattern.value}'"


# --- Failure types: the one taxonomy ----------------------------------------------------------


class FailureType(StrEnum):
    """Every failure type the product raises or parks, by who raises it. An agent may raise
    types of its own: any string is a failure type; these are the ones the product knows."""

    # An agent run (the error taxonomy): retried by the step's or subscription's policy,
    # except the two that retrying cannot fix.
    TIMEOUT = "timeout"
    TEMPORARY_FAILURE = "temporary_failure"
    INVALID_PAYLOAD = "invalid_payload"
    UNAUTHORIZED = "unauthorized"
    # The worker refusing an agent run: not retried.
    UNKNOWN_AGENT = "unknown_agent"
    AGENT_NOT_ALLOWED = "agent_not_allowed"
    AGENT_UNAVAILABLE = "agent_unavailable"
    """No worker took the run off its agent's queue within its schedule-to-start limit."""
    CIRCUIT_OPEN = "circuit_open"
    """The agent's circuit breaker is open: the run failed fast without calling the agent, and
    its next retry comes no earlier than the end of the open window (retryable)."""
    POOL_FULL = "pool_full"
    """The agent's pool (max_concurrent across all its workers) had no permit free for the
    run within its wait: the agent was not called; retried after a spread delay (retryable)."""
    LOCAL_SHARE_FULL = "local_share_full"
    """A local run of an agent whose local runs already hold its share of the worker's local
    activity slots: the agent was not called, and the workflow sends the run on as an activity
    task on the agent's queue (never parked: it is how a run changes place)."""
    MISPLACED = "misplaced"
    """A run its saga's start placed on the workflow's own queue, for an agent whose runs the
    worker there sends to the agent's own queue (a pool, a rate limit, capabilities) or does
    not serve: the agent was not called, and the workflow sends the run on as an activity task
    on the agent's queue (never parked: it is how a run changes place)."""
    NO_CAPABLE_AGENT = "no_capable_agent"
    """A run naming capabilities instead of an agent found no declared agent offering them."""
    AGENT_BLOCKED = "agent_blocked"
    """An `async def` python agent blocked its event loop (one of its own) past its
    `blocked_after`: the run is abandoned, not waited on. Not retried: a blocking call in an
    async agent is in its code and would block again, each attempt leaving a thread stuck."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """An `llm` run refused before the model was called: the token budget of its correlation's
    workflow (the spec's `budget`, or the agent declaration's, whichever is smaller) has
    nothing left. Not retried: nothing left now is nothing left on a retry."""
    TOOL_NOT_ALLOWED = "tool_not_allowed"
    """An `llm` agent's model called a tool its declaration's `tools` whitelist does not name:
    the run fails before any tool of that answer runs. Not retried: the whitelist or the
    prompt needs a change."""
    # A workflow's input or a signal it cannot take (recorded and parked, or failing the run).
    INVALID_SPEC = "invalid_spec"
    INVALID_INPUT = "invalid_input"
    INVALID_ENVELOPE = "invalid_envelope"
    INVALID_RERUN = "invalid_rerun"
    INVALID_RECORDED = "invalid_recorded"
    INVALID_ATTACH = "invalid_attach"
    INVALID_DETACH = "invalid_detach"
    INVALID_RUN_OUTCOME = "invalid_run_outcome"
    """A `run_outcome` signal that does not validate, or names no run the chain has in flight."""
    INVALID_DEAD_LETTER = "invalid_dead_letter"
    # An event its target cannot handle any more, or should not.
    TARGET_ENDED = "target_ended"
    TARGET_UNAVAILABLE = "target_unavailable"
    CHAIN_ENDED = "chain_ended"
    CHAIN_CLOSING = "chain_closing"
    FOREIGN_CORRELATION = "foreign_correlation"
    CAUSATION_LOOP = "causation_loop"
    CHAIN_BUSY = "chain_busy"
    """An acknowledged publish refused for now: the chain's run is overdue to continue as new
    and takes no new events until it has; nothing was recorded, and publishing again (the API
    does, for a while) reaches the new run."""
    PUBLISH_NOT_ALLOWED = "publish_not_allowed"
    """An event a chain's agent asked to publish (its result's `publish`) of a type neither
    its subscription's `publishes` nor its own declaration allows: refused, recorded in the
    chain's record and parked with the event, never published."""
    # How a saga ends when it does not complete.
    SAGA_FAILED = "saga_failed"
    SAGA_COMPENSATED = "saga_compensated"
    COMPENSATION_FAILED = "compensation_failed"
    CANCELLED = "cancelled"
    """A saga step cancelled before it ended (its outcome unknown, so it is compensated)."""
    HISTORY_BUDGET = "history_budget"
    """A saga step not run: the saga's history had passed its budget (40 MiB or 40,960
    events), the rest kept to compensate the steps before it, which the saga then does."""
    # How a plan task or a plan ends when it does not succeed.
    REVIEW_REJECTED = "review_rejected"
    """A task's review or verification still failing when its fix budget is spent."""
    APPROVAL_REJECTED = "approval_rejected"
    """A person rejected a task, or nobody approved it in time."""
    APPROVAL_REFUSED = "approval_refused"
    """A decision refused once its caller was known: not one of the task's approvers, a `by`
    that is not the caller's identity, or no identity to read (the task keeps waiting)."""
    INVALID_APPROVAL = "invalid_approval"
    """An approval naming no waiting task, or malformed."""
    DEPENDENCY_FAILED = "dependency_failed"
    """A task skipped because a task it depends on did not succeed."""
    NO_MESSAGE = "no_message"
    """A team member's task that waits for a message (`wait_for_message`) got none in time."""
    VOTE_REJECTED = "vote_rejected"
    """A vote task's or subscription's vote ended rejected."""
    NO_QUORUM = "no_quorum"
    """A vote task's or subscription's vote ended without quorum (abstentions, the deadline)."""
    PLAN_FAILED = "plan_failed"
    """A plan that ends without success and is configured to fail (`fail_fast`)."""
    PLANNING_FAILED = "planning_failed"
    """A plan's planner gave no graph the plan can run (its answer is refused naming the
    field, or its run failed): no task ran."""
    INVALID_TASKS = "invalid_tasks"
    """Tasks refused by a running plan (`add_tasks`): a cycle, an unknown or failed
    dependency, a repeated id, a cap, or a plan that has ended."""
    SCRATCHPAD_REFUSED = "scratchpad_refused"
    """A scratchpad write the worker will not do: it has no scratchpad root, or the path would
    leave it, or a file is too large (not retried; the plan records it and goes on)."""
    # The dead-letter queue and the aggregator's lookback.
    NOT_PARKED = "not_parked"
    PAYLOAD_UNAVAILABLE = "payload_unavailable"
    """A replay refused because the stored object its entry waits for (an event the parker
    could not read) still cannot be read from the worker's payload store: the entry stays
    parked."""
    LOOKBACK_FAILED = "lookback_failed"


UNTYPED_APPLICATION_ERROR: Final = "ApplicationError"
"""The failure type of an ApplicationError raised without one."""

NOT_RETRYABLE: Final = frozenset({FailureType.INVALID_PAYLOAD, FailureType.UNAUTHORIZED})
"""The agent failures no retry can fix: the default `no_retry_on`."""

RETRY_LATER: Final = frozenset(
    {
        FailureType.TEMPORARY_FAILURE,
        FailureType.TARGET_UNAVAILABLE,
        FailureType.AGENT_UNAVAILABLE,
        FailureType.CIRCUIT_OPEN,
        FailureType.POOL_FULL,
    }
)
FIX_AND_REPLAY: Final = frozenset(
    {FailureType.INVALID_PAYLOAD, FailureType.UNAUTHORIZED, FailureType.COMPENSATION_FAILED}
)


OVER_BUDGET: Final = frozenset({FailureType.BUDGET_EXCEEDED})


def dlq_action(failure_type: str) -> str:
    """The DLQ Action column: transient failures are retried later, bad data is fixed and
    replayed, a run over its token budget waits for a person to raise the budget (or to let
    it go), anything else (timeouts, late or invalid events, loops) needs a person first."""
    if failure_type in OVER_BUDGET:
        return "Raise the budget or archive"
    if failure_type in RETRY_LATER:
        return "Retry later"
    if failure_type in FIX_AND_REPLAY:
        return "Fix and replay"
    return "Investigate"


class Health(StrEnum):
    """Why an agent's failure says the agent itself is unhealthy, beside its failure type: the
    agent kinds mark such failures (`failure(..., health=...)`) so that the circuit breaker
    tells them from the failures an agent declares as its outcome, without another failure
    type (a 503 and a python agent's own `temporary_failure` are both `temporary_failure`)."""

    TIMEOUT = "timeout"
    """No answer in time (the kind's own `timeout`, or Temporal's start-to-close/heartbeat)."""
    CONNECTION = "connection"
    """The endpoint could not be reached (refused, reset, DNS)."""
    HTTP_5XX = "http_5xx"
    HTTP_429 = "http_429"
    SIGNAL = "signal"
    """A shell agent killed by a signal (out of memory, say)."""


HEALTH_DETAIL: Final = "health"
"""The key of the failure detail carrying its `Health` reason."""


def failure(
    kind: str,
    message: str,
    *details: Any,
    non_retryable: bool | None = None,
    retry_after: timedelta | None = None,
    health: Health | None = None,
) -> ApplicationError:
    """The one way the product raises a typed failure (`details` travel with it, such as a
    saga's final record). Not retried when `non_retryable` says so, or by default when its type
    is one retrying cannot fix. `health`: why it says the agent is unhealthy (one more detail,
    read by `health_of`)."""
    if health is not None:
        details = (*details, {HEALTH_DETAIL: health.value})
    return ApplicationError(
        message,
        *details,
        type=kind,
        non_retryable=kind in NOT_RETRYABLE if non_retryable is None else non_retryable,
        next_retry_delay=retry_after,
    )


def failure_type_of(error: BaseException) -> str:
    """The failure type of what an agent raised, or of what a workflow saw an activity fail
    with (an ActivityError's cause): its ApplicationError type, `timeout` for Temporal's
    timeouts (`agent_unavailable` for the schedule-to-start one: no worker took the run), else
    its class name."""
    if isinstance(error, ActivityError) and error.cause is not None:
        error = error.cause
    if isinstance(error, ApplicationError):
        return error.type or UNTYPED_APPLICATION_ERROR
    if _not_started(error):
        return FailureType.AGENT_UNAVAILABLE
    if isinstance(error, TimeoutError):
        return FailureType.TIMEOUT
    return type(error).__name__


def health_of(error: BaseException) -> str | None:
    """The `Health` reason an agent's failure carries (`failure(..., health=...)`); for what a
    python agent raised as is, a builtin `TimeoutError` is `timeout` and a `ConnectionError`
    (refused, reset, broken pipe) `connection`; else None."""
    if isinstance(error, ApplicationError):
        return next(
            (
                str(detail[HEALTH_DETAIL])
                for detail in error.details
                if isinstance(detail, dict) and HEALTH_DETAIL in detail
            ),
            None,
        )
    if isinstance(error, builtins.TimeoutError):
        return Health.TIMEOUT
    if isinstance(error, ConnectionError):
        return Health.CONNECTION
    return None


def failure_message(error: BaseException) -> str:
    """The innermost message, which is the agent's own words rather than Temporal's wrapper."""
    while error.__cause__ is not None:
        error = error.__cause__
    if _not_started(error):
        words = str(error)
        if words.startswith(UNSERVED):  # names the agent and its queue (`unserved_words`)
            return f"agent unavailable: {words}; {START_A_WORKER}"
        return AGENT_UNAVAILABLE_MESSAGE
    return str(error)


START_A_WORKER: Final = (
    "start a worker that declares the agent (`coord worker --agents FILE`, or --demo-agents "
    "for the demo agents); `coord agents` shows which agents are served"
)
AGENT_UNAVAILABLE_MESSAGE: Final = (
    "agent unavailable: no worker took the run from the agent's task queue within its "
    f"schedule-to-start limit; {START_A_WORKER}"
)
"""The words for a run no worker took, when its failure does not name the agent (the server's
own `activity ScheduleToStart timeout`, as runs recorded before `unserved_words` carry)."""
UNSERVED: Final = "no worker took agent "


def unserved_words(agent: str, queue: str, waited: timedelta) -> str:
    """What a run no worker took fails with (`agent_unavailable`): the agent and the queue it
    waited on, which the server's `activity ScheduleToStart timeout` names neither of."""
    return f"{UNSERVED}{agent!r} on its queue {queue!r} within {waited.total_seconds():g}s"


def _not_started(error: BaseException) -> bool:
    """A run that timed out before any worker started it: its agent has no worker."""
    return isinstance(error, TimeoutError) and error.type == TimeoutType.SCHEDULE_TO_START
