"""The wire contract (models/contract.py), without a server: the names on the wire are pinned to
the strings recorded histories and running workflows know, every workflow and activity is
registered under the contract's names, and the ids and failure types behave as documented."""

import ast
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from coord.activities.events.dead_letters import DeadLetterActivities
from coord.activities.events.lookback import ChainLookback
from coord.activities.mesh.monitor import AgentMonitorActivities
from coord.activities.mesh.routing import AgentRouter
from coord.activities.mesh.run_agent import AgentActivities
from coord.activities.plan.progress import PlanProgressReader
from coord.activities.plan.update_callers import UpdateCallers
from coord.models.mesh.retry import RetryConfig
from coord.models.wire import contract
from coord.models.wire.contract import FailureType
from coord.models.wire.specs import IDENTIFIER, SCOPED_IDENTIFIER
from coord.workflows.aggregator import Aggregator
from coord.workflows.chain.reactive import ReactiveChain
from coord.workflows.chain.run import ChainRun
from coord.workflows.dlq import DeadLetterEntry
from coord.workflows.mesh.ledger import AgentLedger
from coord.workflows.mesh.monitor import AgentMonitor
from coord.workflows.plan.graph import TaskGraph
from coord.workflows.saga import Saga
from coord.workflows.vote import Vote

WIRE_NAMES = {
    contract.DEFAULT_TASK_QUEUE: "coordinator",
    contract.SAGA_WORKFLOW: "Saga",
    contract.CHAIN_WORKFLOW: "ReactiveChain",
    contract.AGGREGATOR_WORKFLOW: "Aggregator",
    contract.DEAD_LETTER_WORKFLOW: "DeadLetterEntry",
    contract.VOTE_WORKFLOW: "Vote",
    contract.AGENT_MONITOR_WORKFLOW: "AgentMonitor",
    contract.CHAIN_RUN_WORKFLOW: "ChainRun",
    contract.EVENT_SIGNAL: "event",
    contract.CHAIN_EVENT_SIGNAL: "chain_event",
    contract.RERUN_SIGNAL: "rerun",
    contract.RECORDED_SIGNAL: "recorded",
    contract.ATTACH_SIGNAL: "attach",
    contract.DETACH_SIGNAL: "detach",
    contract.CLOSE_SIGNAL: "close",
    contract.RUN_OUTCOME_SIGNAL: "run_outcome",
    contract.STATE_QUERY: "state",
    contract.TIMELINE_QUERY: "timeline",
    contract.ENTRY_QUERY: "entry",
    contract.REPLAY_UPDATE: "replay",
    contract.ARCHIVE_UPDATE: "archive",
    contract.RUN_AGENT_ACTIVITY: "run_agent",
    contract.RUN_AGENTS_ACTIVITY: "run_agents",
    contract.PARK_DEAD_LETTER_ACTIVITY: "park_dead_letter",
    contract.REDELIVER_ACTIVITY: "redeliver",
    contract.DECLARED_AGENT_ACTIVITY: "declared_agent",
    contract.STORED_EVENT_ACTIVITY: "stored_event",
    contract.CHAIN_EVENTS_ACTIVITY: "chain_events",
    contract.CHAIN_RUNNING_ACTIVITY: "chain_running",
    contract.READ_AGENT_HEALTH_ACTIVITY: "read_agent_health",
    contract.PUBLISH_AGENT_HEALTH_ACTIVITY: "publish_agent_health",
    contract.UPDATE_CALLER_ACTIVITY: "update_caller",
    contract.AGENT_HEALTH_EVENT: "AgentHealthEvent",
    contract.SAGA_RECORD_MEMO: "saga_state",
    contract.AGGREGATOR_RECORD_MEMO: "aggregator_state",
    contract.DEAD_LETTER_SUMMARY_MEMO: "summary",
    contract.VOTE_RECORD_MEMO: "vote_state",
    contract.AGENT_LEDGER_WORKFLOW: "AgentLedger",
    contract.LEDGER_QUERY: "ledger",
    contract.REPORT_OUTCOME_UPDATE: "report_outcome",
    contract.CLAIM_PROBE_UPDATE: "claim_probe",
    contract.REPORT_STATS_UPDATE: "report_stats",
    contract.ACQUIRE_PERMIT_UPDATE: "acquire_permit",
    contract.RELEASE_PERMIT_UPDATE: "release_permit",
}


def test_wire_names_are_the_recorded_strings() -> None:
    """Renaming any of these strands running workflows and breaks the recorded histories."""
    assert list(WIRE_NAMES) == list(WIRE_NAMES.values())
    assert [key.name for key in contract.SEARCH_ATTRIBUTES] == [
        "CorrelationId",
        "CoordPattern",
        "CoordStatus",
        "CoordFailureType",
        "CoordEventType",
        "CoordTopic",
        "CoordAgents",
        "CoordRewindOf",
    ]


@pytest.mark.parametrize(
    ("workflow_class", "name", "signals", "queries", "updates"),
    [
        (Saga, contract.SAGA_WORKFLOW, {None}, {contract.STATE_QUERY}, set()),
        (
            ReactiveChain,
            contract.CHAIN_WORKFLOW,
            {
                contract.EVENT_SIGNAL,
                contract.RERUN_SIGNAL,
                contract.RECORDED_SIGNAL,
                contract.ATTACH_SIGNAL,
                contract.DETACH_SIGNAL,
                contract.CLOSE_SIGNAL,
                contract.RUN_OUTCOME_SIGNAL,
                None,  # any other signal: parked (`park_unknown_signal`, `ParksUnknownSignals`)
            },
            {contract.STATE_QUERY, contract.TIMELINE_QUERY},
            {contract.PUBLISH_UPDATE},
        ),
        (ChainRun, contract.CHAIN_RUN_WORKFLOW, {None}, set(), set()),
        (
            Aggregator,
            contract.AGGREGATOR_WORKFLOW,
            {contract.EVENT_SIGNAL, contract.CHAIN_EVENT_SIGNAL, None},
            {contract.STATE_QUERY},
            set(),
        ),
        (
            DeadLetterEntry,
            contract.DEAD_LETTER_WORKFLOW,
            {None},
            {contract.ENTRY_QUERY},
            {contract.REPLAY_UPDATE, contract.ARCHIVE_UPDATE},
        ),
        (
            TaskGraph,
            contract.PLAN_WORKFLOW,
            {contract.MEMBER_SENT_SIGNAL, None},
            {contract.STATE_QUERY, contract.PROGRESS_QUERY},
            {contract.APPROVE_UPDATE, contract.ADD_TASKS_UPDATE},
        ),
        (Vote, contract.VOTE_WORKFLOW, {None}, {contract.STATE_QUERY}, set()),
        (AgentMonitor, contract.AGENT_MONITOR_WORKFLOW, {None}, {contract.STATE_QUERY}, set()),
        (
            AgentLedger,
            contract.AGENT_LEDGER_WORKFLOW,
            {None},  # parked by an activity on its coordinator queue (`ledger_home`)
            {contract.LEDGER_QUERY},
            {
                contract.REPORT_OUTCOME_UPDATE,
                contract.CLAIM_PROBE_UPDATE,
                contract.REPORT_STATS_UPDATE,
                contract.ACQUIRE_PERMIT_UPDATE,
                contract.RELEASE_PERMIT_UPDATE,
            },
        ),
    ],
)
def test_workflows_are_registered_under_the_contracts_names(
    workflow_class: type, name: str, signals: set[str], queries: set[str], updates: set[str]
) -> None:
    definition = workflow._Definition.must_from_class(workflow_class)
    assert definition.name == name
    assert set(definition.signals) == signals
    assert set(definition.queries) == queries
    assert set(definition.updates) == updates


def test_a_ledgers_activities_go_to_its_deployments_coordinator_queue() -> None:
    """The ledgers' worker runs no activity: a ledger parks on its coordinator queue, which
    is its own queue for one started there before ledgers had a queue of their own."""
    assert contract.ledger_home(contract.ledger_task_queue("staging")) == "staging"
    assert contract.ledger_home(contract.ledger_task_queue()) == contract.DEFAULT_TASK_QUEUE
    assert contract.ledger_home("staging") == "staging"


TYPED_BY_REFERENCE = {contract.REPLAY_UPDATE, contract.ARCHIVE_UPDATE, contract.ADD_TASKS_UPDATE}
"""Updates a client calls by typed reference: named by their methods, undescribed."""


def test_every_handler_says_what_it_takes_in_the_ui() -> None:
    from coord.worker import WORKFLOWS

    for workflow_class in WORKFLOWS:
        definition = workflow._Definition.must_from_class(workflow_class)
        described = {name: handler.description for name, handler in definition.signals.items()}
        described |= {name: handler.description for name, handler in definition.queries.items()}
        described |= {
            name: handler.description
            for name, handler in definition.updates.items()
            if name not in TYPED_BY_REFERENCE
        }
        for name, description in described.items():
            expected = contract.HANDLER_TEXT[name or contract.UNKNOWN_SIGNAL]
            assert description == expected, (workflow_class.__name__, name)


@pytest.mark.parametrize(
    ("activity_fn", "name"),
    [
        (AgentActivities.run_agent, contract.RUN_AGENT_ACTIVITY),
        (AgentActivities.run_agents, contract.RUN_AGENTS_ACTIVITY),
        (DeadLetterActivities.park, contract.PARK_DEAD_LETTER_ACTIVITY),
        (DeadLetterActivities.redeliver, contract.REDELIVER_ACTIVITY),
        (DeadLetterActivities.declared_agent, contract.DECLARED_AGENT_ACTIVITY),
        (DeadLetterActivities.stored_event, contract.STORED_EVENT_ACTIVITY),
        (ChainLookback.chain_events, contract.CHAIN_EVENTS_ACTIVITY),
        (ChainLookback.chain_running, contract.CHAIN_RUNNING_ACTIVITY),
        (PlanProgressReader.plan_progress, contract.PLAN_PROGRESS_ACTIVITY),
        (UpdateCallers.update_caller, contract.UPDATE_CALLER_ACTIVITY),
        (AgentMonitorActivities.read_agent_health, contract.READ_AGENT_HEALTH_ACTIVITY),
        (AgentMonitorActivities.publish_agent_health, contract.PUBLISH_AGENT_HEALTH_ACTIVITY),
        (AgentRouter.choose_agent, contract.CHOOSE_AGENT_ACTIVITY),
        (AgentRouter.choose_agents, contract.CHOOSE_AGENTS_ACTIVITY),
    ],
)
def test_activities_are_registered_under_the_contracts_names(
    activity_fn: Callable[..., Any], name: str
) -> None:
    assert activity._Definition.must_from_callable(activity_fn).name == name


def test_workflow_ids_are_built_and_read_back() -> None:
    assert contract.saga_workflow_id("deploy-1") == "saga-deploy-1"
    assert contract.saga_id_of("saga-deploy-1") == "deploy-1"
    chain_id = contract.chain_workflow_id("story-1")
    assert chain_id == "chain-story-1" and contract.is_chain_workflow_id(chain_id)
    assert contract.correlation_id_of_chain(chain_id) == "story-1"
    assert contract.chain_run_workflow_id(chain_id, 7) == "chain-story-1/run-7"
    assert contract.correlation_id_of_chain("chain-story-1/run-7") == "story-1"
    assert contract.correlation_of_target("chain-story-1/run-7") == "story-1", "a run's letter"
    assert not contract.is_chain_workflow_id("saga-deploy-1")
    assert contract.aggregator_workflow_id("phase1") == "aggregator-phase1"
    assert contract.aggregator_workflow_id("phase1", "story-1") == "aggregator-phase1~story-1"
    assert contract.as_aggregator_workflow_id("phase1") == "aggregator-phase1"
    assert contract.as_aggregator_workflow_id("aggregator-phase1") == "aggregator-phase1"
    assert contract.dead_letter_workflow_id("0123abcd") == "dlq-0123abcd"
    assert contract.vote_workflow_id("release-7") == "vote-release-7"
    assert contract.vote_id_of("vote-release-7") == "release-7"
    assert contract.as_vote_workflow_id("release-7") == "vote-release-7"
    assert contract.as_vote_workflow_id("vote-release-7") == "vote-release-7"
    assert contract.agent_ledger_workflow_id("agent-x") == "ledger-agent-x"
    assert contract.agent_monitor_workflow_id("coordinator") == "agent-monitor-coordinator"


def test_ids_of_two_parts_are_unambiguous() -> None:
    """Two user-chosen parts joined by a character no identifier holds: the pairs that `-`
    made one id stay apart, and no single identifier reads as a pair."""
    assert contract.scoped_id("a-b", "c") != contract.scoped_id("a", "b-c")
    aggregator = contract.aggregator_workflow_id
    assert aggregator("a-b", "c") != aggregator("a", "b-c")
    assert aggregator("a-b") != aggregator("a", "b")
    assert re.fullmatch(IDENTIFIER, "a-b.c:d_e")
    assert not re.fullmatch(IDENTIFIER, contract.scoped_id("a", "b"))
    assert re.fullmatch(SCOPED_IDENTIFIER, contract.scoped_id("a-b", "c"))
    assert not re.fullmatch(SCOPED_IDENTIFIER, "a~b~c")


def test_pattern_clause_and_coordination_attributes() -> None:
    assert contract.pattern_clause(contract.Pattern.DLQ) == "CoordPattern = 'dlq'"
    values = contract.coordination_attributes(
        contract.Pattern.SAGA, correlation_id="c", status="pending"
    )
    assert {key.name: value for key, value in values.items()} == {
        "CorrelationId": "c",
        "CoordPattern": "saga",
        "CoordStatus": "pending",
    }
    rewound = contract.coordination_attributes(
        contract.Pattern.PLAN, correlation_id="c", status="running", rewind_of="o@e-1"
    )
    assert {key.name: value for key, value in rewound.items()}["CoordRewindOf"] == "o@e-1"
    assert list(rewound)[-1] == contract.REWIND_OF


def test_failures_are_retried_unless_retrying_cannot_help() -> None:
    assert contract.failure(FailureType.TEMPORARY_FAILURE, "busy").non_retryable is False
    assert contract.failure(FailureType.INVALID_PAYLOAD, "bad").non_retryable is True
    assert contract.failure(FailureType.UNAUTHORIZED, "no").non_retryable is True
    refused = contract.failure(FailureType.UNKNOWN_AGENT, "who?", non_retryable=True)
    assert (refused.type, refused.non_retryable) == ("unknown_agent", True)
    later = contract.failure(FailureType.TEMPORARY_FAILURE, "429", retry_after=timedelta(1))
    assert later.next_retry_delay == timedelta(1)
    assert RetryConfig().no_retry_on == ["invalid_payload", "unauthorized"]


def activity_failed_with(cause: BaseException) -> ActivityError:
    """What a workflow catches: the activity's failure, with what it raised as its cause."""
    error = ActivityError(
        "Activity task failed",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type=contract.RUN_AGENT_ACTIVITY,
        activity_id="1",
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    error.__cause__ = cause
    return error


def test_failure_type_of_what_an_agent_raised_or_a_workflow_caught() -> None:
    unauthorized = ApplicationError("x", type="unauthorized")
    timeout = TimeoutError("late", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    for raised, kind in [
        (unauthorized, "unauthorized"),
        (ApplicationError("x"), "ApplicationError"),
        (timeout, "timeout"),
        (KeyError("k"), "KeyError"),
    ]:
        assert contract.failure_type_of(raised) == kind
        assert contract.failure_type_of(activity_failed_with(raised)) == kind


def test_a_failure_carries_its_details_and_its_innermost_message() -> None:
    error = contract.failure(FailureType.SAGA_FAILED, "step 2 failed", {"saga_id": "s"})
    assert error.details == ({"saga_id": "s"},) and error.non_retryable is False
    caught = activity_failed_with(RuntimeError("agent said no"))
    assert contract.failure_message(caught) == "agent said no"


def test_a_run_no_worker_took_names_its_agent_and_queue_when_its_failure_does() -> None:
    """The server's own words name neither; a run's failure names both (`unserved_words`)."""
    server = TimeoutError(
        "activity ScheduleToStart timeout",
        type=TimeoutType.SCHEDULE_TO_START,
        last_heartbeat_details=[],
    )
    assert contract.failure_message(activity_failed_with(server)) == (
        contract.AGENT_UNAVAILABLE_MESSAGE
    )
    words = contract.unserved_words("nobody", "agent-nobody", timedelta(seconds=60))
    assert words == "no worker took agent 'nobody' on its queue 'agent-nobody' within 60s"
    named = TimeoutError(words, type=TimeoutType.SCHEDULE_TO_START, last_heartbeat_details=[])
    caught = activity_failed_with(named)
    assert contract.failure_type_of(caught) == FailureType.AGENT_UNAVAILABLE
    assert contract.failure_message(caught) == (
        f"agent unavailable: {words}; {contract.START_A_WORKER}"
    )


@pytest.mark.parametrize(
    ("failure_type", "action"),
    [
        ("temporary_failure", "Retry later"),
        ("target_unavailable", "Retry later"),
        ("invalid_payload", "Fix and replay"),
        ("compensation_failed", "Fix and replay"),
        ("budget_exceeded", "Raise the budget or archive"),
        ("timeout", "Investigate"),
        ("causation_loop", "Investigate"),
        ("SomethingAnAgentMadeUp", "Investigate"),
    ],
)
def test_dlq_action_by_failure_type(failure_type: str, action: str) -> None:
    assert contract.dlq_action(failure_type) == action


def test_the_contract_imports_no_worker_or_workflow_code() -> None:
    """The pure layer: clients and models import it without the worker or the sandbox."""
    probe = (
        "import sys, coord.models.wire.contract; "
        "print(sorted(m for m in sys.modules if m.startswith(('temporalio.worker', "
        "'temporalio.workflow', 'temporalio.client', 'coord.'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    expected = "['coord._lazy', 'coord.models', 'coord.models.wire', 'coord.models.wire.contract']"
    assert loaded.strip() == expected, "the package's lazy loader, and the contract alone"


WIRE_CALLS = {
    "execute_activity",
    "start_activity",
    "signal",
    "query",
    "execute_update",
    "start_update",
    "start_workflow",
    "execute_workflow",
    "park",
    "failure",
}
"""Calls whose first argument is a name on the wire (an activity, signal, query, update, workflow
type, or failure type): in production code it comes from the contract, never a string literal."""
WIRE_KEYWORDS = {
    "name": {"defn", "signal", "query", "update"},
    "type": {"ApplicationError"},
    "start_signal": None,
    "failure_type": None,
}
"""Keyword arguments that are names on the wire, in these calls (None: in any call)."""
PRODUCTION = ["activities", "infra", "models", "starter", "workflows", "worker.py"]


def called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else None


def names_the_wire(keyword: ast.keyword, called: str | None) -> bool:
    if keyword.arg not in WIRE_KEYWORDS:
        return False
    calls = WIRE_KEYWORDS[keyword.arg]
    return calls is None or called in calls


def literal_wire_names(path: Path) -> list[str]:
    """Each string literal `path` passes where a name on the wire goes."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        called = called_name(node)
        arguments = [node.args[0]] if called in WIRE_CALLS and node.args else []
        arguments += [k.value for k in node.keywords if names_the_wire(k, called)]
        found += [
            f"{path}:{argument.lineno}: {called}({argument.value!r})"
            for argument in arguments
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str)
        ]
    return found


def test_production_code_names_the_wire_only_through_the_contract() -> None:
    root = Path(__file__).parent.parent
    files = [
        path
        for entry in PRODUCTION
        for path in ((root / entry).rglob("*.py") if (root / entry).is_dir() else [root / entry])
        if path.name != "contract.py"
    ]
    assert [found for path in files for found in literal_wire_names(path)] == []
