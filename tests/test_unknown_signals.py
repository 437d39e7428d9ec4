"""A signal no handler takes (a misspelt `event`, one meant for another workflow) is parked with
what it carried, never left unread, and no workflow task fails for it: a chain or an
aggregator, which take events from outside, count and reject it too; a saga, a plan or a vote
that takes one in its first workflow task, which would otherwise end it there, ends only once
the signal is parked; a dead-letter entry parks one as another entry; an agent ledger, whose
worker runs no activity, parks one on its coordinator queue; a chain's run parks one by its
chain's correlation."""

import asyncio
import json
import uuid
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import RawValue, SearchAttributePair, TypedSearchAttributes

from coord.infra.dead_letters import park_dead_letter
from coord.infra.ledgers import LedgerClient
from coord.models.chain.spec import ChainSpec
from coord.models.dlq.letter import DlqSelection, EntrySummary
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.ledger import BreakerConfig, RunStats
from coord.models.vote.spec import VoteStatus
from coord.models.wire.contract import (
    COORD_PATTERN,
    COORD_STATUS,
    MEMBER_SENT_SIGNAL,
    PLAN_WORKFLOW,
    VOTE_WORKFLOW,
    agent_ledger_workflow_id,
    agent_task_queue,
)
from coord.models.wire.versions import (
    CHAIN_RUN_PARKS_UNKNOWN_SIGNALS_PATCH,
    LEDGER_PARKS_UNKNOWN_SIGNALS_PATCH,
)
from coord.starter import api
from coord.worker import build_worker
from tests.conftest import feature_deployment
from tests.helpers import (
    chain_run_handles,
    event,
    eventually,
    letter,
    parked,
    phase1,
    routing_spec,
    task_failures,
)
from tests.test_chain_dispatch import SLOW_SUBSCRIPTION, SlowAndFast
from tests.test_plan import PlanAgents, plan
from tests.test_plan import start as start_plan
from tests.test_vote import YES, Voters, vote


async def test_a_chain_parks_a_signal_it_has_no_handler_for(
    client: Client, task_queue: str
) -> None:
    correlation_id = f"typo-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        await handle.signal("evnt", {"event": {"type": "A"}})
        [entry] = await parked(client, task_queue, 1, DlqSelection(correlation_id=correlation_id))
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(handle.result(), 30)
        letter = await api.dlq_entry(client, entry.entry_id)
        failures = await task_failures(handle)
    assert (letter.failure_type, letter.target_workflow) == ("invalid_input", handle.id)
    assert letter.message == "signal 'evnt': a chain takes no such signal"
    assert letter.raw == [{"event": {"type": "A"}}]
    assert state.rejected_count == 1 and state.dead_lettered == 1
    assert failures == []


async def test_an_aggregator_parks_a_signal_it_has_no_handler_for(
    client: Client, task_queue: str
) -> None:
    spec = phase1()
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)
        await handle.signal("rerun", "not for an aggregator")
        [entry] = await parked(client, task_queue, 1)
        state = await api.aggregator_state(client, handle.id)
        letter = await api.dlq_entry(client, entry.entry_id)
        await handle.cancel()
        failures = await task_failures(handle)
    assert (letter.failure_type, letter.target_workflow) == ("invalid_input", handle.id)
    assert letter.message == "signal 'rerun': an aggregator takes no such signal"
    assert letter.raw == ["not for an aggregator"]
    assert state.received == 1 and state.rejected_count == 1
    assert failures == []


async def parked_for(client: Client, task_queue: str, target: str, among: int = 1) -> EntrySummary:
    """The one entry parked for `target`, once `among` entries are parked on the queue."""
    [entry] = [e for e in await parked(client, task_queue, among) if e.target_workflow == target]
    return entry


async def signalled_before_its_first_task(
    handle: WorkflowHandle[Any, Any],
    client: Client,
    task_queue: str,
    kind: str,
    registry: AgentRegistry | None = None,
) -> Any:
    """`handle`'s run, signalled `evnt` before any worker took its first task, then served
    (its agents: `registry`'s, else the default): its result comes and is returned, the signal
    parked (listed by the run's correlation), no workflow task failed."""
    await handle.signal("evnt", {"event": {"type": "A"}})
    async with build_worker(client, task_queue, registry):
        state = await asyncio.wait_for(handle.result(), 60)
        entry = await parked_for(client, task_queue, handle.id)
        letter = await api.dlq_entry(client, entry.entry_id)
    assert entry.correlation_id == state.correlation_id != ""
    assert letter.failure_type == "invalid_input"
    assert letter.message == f"signal 'evnt': {kind} takes no such signal"
    assert letter.raw == [{"event": {"type": "A"}}]
    assert await task_failures(handle) == []
    return state


async def test_a_saga_ending_in_its_first_task_parks_the_signal_first(
    client: Client, task_queue: str
) -> None:
    handle = await api.start_saga(client, feature_deployment(), queue=task_queue)
    await signalled_before_its_first_task(handle, client, task_queue, "a saga")


async def test_a_vote_parks_a_signal_it_has_no_handler_for(client: Client, task_queue: str) -> None:
    handle = await api.start_vote(client, vote(["alice"]), queue=task_queue)
    voters = Voters({"alice": YES}).registry()
    state = await signalled_before_its_first_task(handle, client, task_queue, "a vote", voters)
    assert state.status == VoteStatus.DECIDED


async def test_a_plan_parks_a_signal_it_has_no_handler_for(client: Client, task_queue: str) -> None:
    handle = await start_plan(client, task_queue, plan({"id": "t1"}))
    agents = PlanAgents().registry()
    state = await signalled_before_its_first_task(handle, client, task_queue, "a plan", agents)
    assert state.status == "completed"


async def test_a_dead_letter_entry_parks_a_signal_as_another_entry(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        first = await park_dead_letter(client, letter("chain-somewhere"), task_queue)
        entry = client.get_workflow_handle(first)
        await entry.signal("replay", {"payload": {}})
        second = await parked_for(client, task_queue, first, among=2)
        parked_signal = await api.dlq_entry(client, second.entry_id)
        failures = await task_failures(entry)
    assert parked_signal.message == "signal 'replay': a dead-letter entry takes no such signal"
    assert parked_signal.raw == [{"payload": {}}]
    assert failures == []


async def patches_asked(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The patch markers of the run's history, in order."""
    history = await handle.fetch_history()
    return [
        json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)["id"]
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]


async def test_an_agent_ledger_parks_a_signal_on_its_coordinator_queue_and_answers_on(
    client: Client, task_queue: str
) -> None:
    """The ledgers' worker runs no activity: the park goes to the deployment's coordinator
    queue. A ledger that takes no such signal asks nothing more (it is on every run's path)."""
    queue = agent_task_queue(f"typo-{uuid.uuid4().hex[:8]}", task_queue)
    ledger = LedgerClient(client, queue, task_queue, BreakerConfig(), worker="test")
    handle = client.get_workflow_handle(agent_ledger_workflow_id(queue))
    async with build_worker(client, task_queue):
        await ledger.stats(RunStats(succeeded=1))
        before = await patches_asked(handle)
        await handle.signal("report_stat", {"stats": {"succeeded": 1}})
        entry = await parked_for(client, task_queue, handle.id)
        letter = await api.dlq_entry(client, entry.entry_id)
        state = await ledger.stats(RunStats(succeeded=1))
        after = await patches_asked(handle)
        failures = await task_failures(handle)
    assert LEDGER_PARKS_UNKNOWN_SIGNALS_PATCH not in before
    assert LEDGER_PARKS_UNKNOWN_SIGNALS_PATCH in after
    assert (letter.failure_type, letter.target_workflow) == ("invalid_input", handle.id)
    assert letter.message == "signal 'report_stat': an agent ledger takes no such signal"
    assert letter.raw == [{"stats": {"succeeded": 1}}]
    assert state.runs == 2, "the ledger answers on"
    assert failures == []


async def test_a_chains_run_parks_a_signal_by_its_chains_correlation_and_ends_normally(
    client: Client, task_queue: str
) -> None:
    """A run handed over to a `ChainRun` of its own, signalled while its agent runs: the signal
    is parked, listed by the chain's correlation, and the run's outcome still reaches the
    chain."""
    agents = SlowAndFast()
    correlation_id = f"typo-{uuid.uuid4().hex[:8]}"
    spec = ChainSpec.model_validate(
        {
            "name": "handed-over",
            "triggers": ["Slow"],
            "alerts": None,
            "subscriptions": [{**SLOW_SUBSCRIPTION, "hand_over": True}],
        }
    )
    async with build_worker(client, task_queue, agents.registry()):
        chain = await api.start_chain(client, spec, correlation_id, queue=task_queue)
        await api.publish(client, event(correlation_id, "Slow"))
        await asyncio.wait_for(agents.slow_started.wait(), 60)
        [run] = await chain_run_handles(client, chain)
        await run.signal("run_outcom", {"seq": 1})
        selection = DlqSelection(correlation_id=correlation_id)
        [entry] = await parked(client, task_queue, 1, selection)
        letter = await api.dlq_entry(client, entry.entry_id)
        agents.slow_released.set()
        outcome = await asyncio.wait_for(run.result(), 60)

        async def slow_landed() -> bool:
            timeline = await api.chain_timeline(client, correlation_id)
            return "SlowDone" in {row.event for row in timeline}

        await eventually(slow_landed, timeout=60)
        await api.close_chain(client, correlation_id)
        state = await asyncio.wait_for(chain.result(), 60)
        failures = await task_failures(run)
    assert CHAIN_RUN_PARKS_UNKNOWN_SIGNALS_PATCH in await patches_asked(run)
    assert (letter.failure_type, letter.target_workflow) == ("invalid_input", run.id)
    assert letter.message == "signal 'run_outcom': a chain's run takes no such signal"
    assert letter.raw == [{"seq": 1}]
    assert outcome["result"] is not None and outcome["failure"] is None
    assert state.events_seen == 2, "Slow, and the run's SlowDone"
    assert failures == []


async def test_binary_input_to_no_handler_is_parked_as_its_text(
    client: Client, task_queue: str
) -> None:
    """Binary input (not UTF-8) decodes to bytes, which no record holds as JSON: its text is."""
    correlation_id = f"bin-{uuid.uuid4().hex[:8]}"
    binary = RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"\x00\xff\xfebin"))
    async with build_worker(client, task_queue):
        handle = await api.start_chain(client, routing_spec(), correlation_id, queue=task_queue)
        await handle.signal("evnt", binary)
        [entry] = await parked(client, task_queue, 1, DlqSelection(correlation_id=correlation_id))
        letter = await api.dlq_entry(client, entry.entry_id)
        await api.close_chain(client, correlation_id)
        await asyncio.wait_for(handle.result(), 30)
        failures = await task_failures(handle)
    assert letter.raw == ["\x00\ufffd\ufffdbin"]
    assert failures == []


MALFORMED_MEMBER_SENT = "member_sent: expected a mapping of fields, not a string"


async def test_a_plan_parks_the_member_messages_it_refuses(client: Client, task_queue: str) -> None:
    """`member_sent` is how a long-lived member's workflow posts; one that does not decode, or
    names no member of the plan, was logged and dropped."""
    agents = PlanAgents()
    handle = await start_plan(client, task_queue, plan({"id": "t1", "agent": "hold"}))
    from_no_member = {"member": "x", "seq": 1, "messages": [{"to": "y", "message": "z"}]}

    async def holding() -> bool:
        return "t1" in agents.holding

    async with build_worker(client, task_queue, agents.registry()):
        await eventually(holding)
        await handle.signal(MEMBER_SENT_SIGNAL, "garbage")
        await handle.signal(MEMBER_SENT_SIGNAL, from_no_member)
        entries = await parked(client, task_queue, 2)
        agents.released.set()
        state = await asyncio.wait_for(handle.result(), 60)
        letters = [await api.dlq_entry(client, entry.entry_id) for entry in entries]
    assert state.status == "completed" and state.messages.refused == []
    assert sorted((letter.message, letter.raw) for letter in letters) == [
        ("member_sent: 'x' is no long-lived member of this plan", from_no_member),
        (MALFORMED_MEMBER_SENT, "garbage"),
    ]
    assert {entry.correlation_id for entry in entries} == {state.correlation_id}
    assert await task_failures(handle) == []


async def test_a_refused_spec_is_found_as_failed_by_its_pattern(
    client: Client, task_queue: str
) -> None:
    """A plan or vote started as plain JSON carries no search attribute, and one a starter
    began carries `running` (or `voting`): refused, each is found failed by its pattern."""
    started = TypedSearchAttributes([SearchAttributePair(COORD_STATUS, "running")])
    runs = {
        "plan": (PLAN_WORKFLOW, {"plan_id": "refused"}, started),
        "vote": (VOTE_WORKFLOW, {"vote_id": "refused"}, TypedSearchAttributes.empty),
    }
    async with build_worker(client, task_queue):
        for pattern, (workflow, spec, attributes) in runs.items():
            handle: WorkflowHandle[Any, Any] = await client.start_workflow(
                workflow,
                spec,
                id=f"refused-{pattern}-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
                search_attributes=attributes,
            )
            with pytest.raises(WorkflowFailureError):
                await handle.result()
            found = (await handle.describe()).typed_search_attributes
            assert (found.get(COORD_PATTERN), found.get(COORD_STATUS)) == (pattern, "failed")
