"""The chain's runs on their own (no server): the queue and its dispatch, hand-over and the run
lifecycle every pattern's model answers, and what each outcome publishes or parks."""

from typing import Any

import pytest
from pydantic import ValidationError

from coord.models.chain.model import ChainModel
from coord.models.chain.run import RunFailure as ChainRunFailure
from coord.models.chain.run import RunOutcome, noted
from coord.models.chain.spec import AgentRun, ChainInput, ChainSpec, ChainStatus
from coord.models.events.envelope import Priority
from coord.models.mesh.agents import AgentResult, PublishRequest
from coord.models.mesh.attempts import AttemptTime
from coord.models.mesh.lifecycle import RunFailure, RunLifecycle
from coord.models.mesh.runs import MAX_DETOURS, RunDetour
from coord.models.vote.spec import VoteState, VoteStatus
from coord.models.wire.versions import PUBLISH_RULE_PATCH
from tests.chain_models import (
    NOW,
    WORKFLOW_ID,
    FixedRun,
    event,
    new_model,
    parkings,
    spec,
    take,
)


def test_the_chains_runs_answer_the_run_lifecycle() -> None:
    model = new_model()
    lifecycle: RunLifecycle[int, AgentResult | VoteState, AgentRun] = model.runs
    take(model, event("Approved"))
    seq, run = model.runs.start_next()
    lifecycle.run_started(seq, NOW)
    assert list(lifecycle.running()) == [run]
    lifecycle.run_succeeded(seq, NOW, AgentResult(agent="planner", data={"plan": 1}))
    model.runs.finish(seq)
    assert list(lifecycle.running()) == []
    assert [e.event.type for e in model.record.inbox] == ["Planned"]


def test_an_event_is_recorded_once_and_queues_the_runs_it_completes() -> None:
    model = new_model()
    approved = event("Approved")
    assert take(model, approved) == "recorded"
    assert take(model, approved) == "duplicate"
    seq, run = model.runs.start_next()
    assert (run.agent, run.causes) == ("planner", [approved.event.id])
    assert run.idempotency_key == f"{WORKFLOW_ID}/planner/{approved.event.id}"
    assert model.runs.holds() and not model.runs.queued()
    model.runs.finish(seq)
    assert not model.runs.holds()


def test_runs_leave_the_queue_by_priority_then_arrival() -> None:
    model = new_model(max_concurrency=10)
    low = event("Approved", priority=Priority.LOW)
    normal = event("Approved")
    critical = event("Approved", priority=Priority.CRITICAL)
    for envelope in (low, normal, critical):
        take(model, envelope)
    order = [model.runs.start_next()[1].trigger.event.id for _ in range(3)]
    assert order == [critical.event.id, normal.event.id, low.event.id]


def test_dispatch_is_bounded_by_concurrency_and_held_by_an_alert() -> None:
    model = new_model()
    for _ in range(3):
        take(model, event("Approved"))
    seq, _ = model.runs.start_next()
    model.runs.start_next()
    assert not model.runs.can_dispatch(), "max_concurrency 2"
    model.runs.finish(seq)
    assert model.runs.can_dispatch()
    take(model, event("Alert", topic="project.alerts", severity="high"))
    assert model.snapshot().status == ChainStatus.PAUSED
    assert not model.runs.can_dispatch()


def test_a_run_publishes_its_events_into_the_queue_caused_by_its_trigger() -> None:
    model = new_model()
    approved = event("Approved", priority=Priority.HIGH)
    take(model, approved)
    seq, run = model.runs.start_next()
    model.runs.run_started(seq, NOW)
    notes = [PublishRequest(type="Note", payload={})]
    result = AgentResult(agent="planner", data={"plan": 1}, publish=notes, may_publish=None)
    assert model.outcomes.refused_types(run, result) == set(), "no list declared: as before"
    model.runs.run_succeeded(seq, NOW, result)
    published = model.record.inbox
    assert [e.event.type for e in published] == ["Planned", "Note"]
    assert all(e.event.causation_id == approved.event.id for e in published)
    assert published[0].payload == {"plan": 1}
    assert published[0].routing.priority == Priority.HIGH
    assert model.runs.agent_request(run).idempotency_key == run.idempotency_key
    assert model.outbox.take() == []


def planner_result(*types: str, may_publish: list[str] | None) -> AgentResult:
    publish = [PublishRequest(type=t, payload={"n": i}) for i, t in enumerate(types)]
    return AgentResult(agent="planner", publish=publish, may_publish=may_publish)


def publishing_model(run: FixedRun | None = None) -> ChainModel:
    chain = spec()
    chain.subscriptions[0].publishes.events = ["Note"]
    return ChainModel(ChainInput(spec=chain, correlation_id="c1"), WORKFLOW_ID, run or FixedRun())


def test_an_agent_publishes_only_the_types_its_subscription_or_declaration_allows() -> None:
    model = publishing_model()
    approved = event("Approved")
    take(model, approved)
    seq, run = model.runs.start_next()
    result = planner_result("Note", "Approved", "Planned", "Memo", may_publish=["Memo"])
    refused = model.outcomes.refused_types(run, result)
    assert refused == {"Approved"}, "declared: events, on_* types and the declaration's"
    model.runs.run_succeeded(seq, NOW, result)
    published = model.record.inbox
    assert [e.event.type for e in published] == ["Planned", "Note", "Planned", "Memo"]
    [letter] = parkings(model.outbox.take())
    assert letter.failure_type == "publish_not_allowed"
    envelope = letter.details.get("event")
    assert envelope is not None and envelope.event.type == "Approved"
    assert envelope.payload == {"n": 1} and envelope.event.causation_id == approved.event.id
    assert letter.details.get("causation_depth") == 1, "counted from the run's trigger"
    assert "planner (subscription planner) may not publish Approved" in letter.message
    assert "it may publish Memo, Note, PlanFailed, Planned" in letter.message
    state = model.snapshot()
    assert (state.received, state.rejected_count, state.dead_lettered) == (2, 1, 1)
    assert state.rejected[-1].event_id == envelope.event.id


def test_a_run_recorded_before_the_publish_rule_publishes_everything() -> None:
    run = FixedRun(before={PUBLISH_RULE_PATCH})
    model = publishing_model(run)
    take(model, event("Approved"))
    seq, _ = model.runs.start_next()
    model.runs.run_succeeded(seq, NOW, planner_result("Approved", may_publish=[]))
    assert [e.event.type for e in model.record.inbox] == ["Planned", "Approved"]
    assert model.outbox.take() == [] and PUBLISH_RULE_PATCH in run.asked


def test_an_agent_declared_without_a_list_is_held_by_its_kind() -> None:
    model = new_model()
    take(model, event("Approved"))
    _, run = model.runs.start_next()
    llm = planner_result("Note", "Planned", may_publish=[])
    assert model.outcomes.refused_types(run, llm) == {"Note"}, "an llm agent: declared only"
    python = planner_result("Note", may_publish=None)
    assert model.outcomes.refused_types(run, python) == set(), "python, shell, http: as before"
    unsaid = AgentResult.model_validate({"agent": "planner", "publish": [{"type": "Note"}]})
    assert model.outcomes.refused_types(run, unsaid) == {"Note"}, "a worker that does not say"


def test_publishes_as_a_list_declares_the_agents_own_events() -> None:
    chain = spec()
    data = chain.model_dump(mode="json")
    data["subscriptions"][2]["publishes"] = ["Designed", "Sketched"]
    listed = ChainSpec.model_validate(data).subscriptions[2].publishes
    assert listed.events == ["Designed", "Sketched"] and listed.on_success == []
    assert listed.allowed(None) == {"Designed", "Sketched"}
    assert chain.subscriptions[0].publishes.allowed(None) is None
    assert chain.subscriptions[0].publishes.allowed(["X"]) == {"Planned", "PlanFailed", "X"}


def test_a_failed_run_publishes_its_failure_and_is_parked_for_a_rerun() -> None:
    """Parked with its attempts as its worker reported them, which date the letter."""
    model = new_model()
    take(model, event("Approved"))
    seq, run = model.runs.start_next()
    times = {
        n: AttemptTime(attempt=n, started_at=NOW, ended_at=NOW, type="agent_error")
        for n in (1, 2, 3)
    }
    failed = RunFailure(type="agent_error", message="boom", attempts=3, times=times)
    model.runs.run_failed(seq, NOW, failed)
    [letter] = parkings(model.outbox.take())
    assert letter.message == "planner failed on Approved: boom"
    assert letter.details == {
        "event": run.trigger,
        "target_agent": "planner",
        "attempt_count": 3,
        "failed_attempts": times,
        "replay": "rerun",
        "idempotency_key": run.idempotency_key,
        "inputs": run.inputs,
        "causation_depth": 0,
    }
    assert [e.event.type for e in model.record.inbox] == ["PlanFailed"]
    assert model.record.state.dead_lettered == 1


VOTING: dict[str, Any] = {
    "subscriptions": [
        {
            "name": "approve",
            "events": "Approved",
            "vote": {"voters": ["a", "b", "c"]},
            "publishes": {"on_success": "Go", "on_failure": "Stop"},
        }
    ],
    "terminal_event": None,
}


def test_a_vote_ends_as_a_result_its_record_published_decided_or_not() -> None:
    model = new_model(**VOTING)
    take(model, event("Approved", deploy="1.2"))
    take(model, event("Approved", deploy="1.3"))
    for status in (VoteStatus.DECIDED, VoteStatus.REJECTED):
        seq, run = model.runs.start_next()
        vote = model.runs.vote_spec(run)
        model.runs.run_succeeded(seq, NOW, VoteState(vote_id=vote.vote_id, status=status))
    go, stop = model.record.inbox
    assert (go.event.type, stop.event.type) == ("Go", "Stop")
    assert go.payload["status"] == "decided" and "error" in stop.payload
    assert model.outbox.take() == [], "a vote that ended is no failure: nothing parked"


def test_a_run_handed_over_is_carried_in_flight_and_its_outcome_taken_once() -> None:
    model = new_model(max_concurrency=1)
    take(model, event("Approved"))
    take(model, event("Approved"))
    seq, run = model.runs.start_next()
    model.runs.hand_over(seq)
    assert model.runs.holds(), "continue-as-new waits until the ChainRun is confirmed started"
    model.runs.confirmed(seq)
    model.runs.finish(seq)
    assert not model.runs.holds(), "a run in flight does not hold continue-as-new"
    assert not model.runs.can_dispatch(), "but it keeps its slot"
    assert model.snapshot().running == ["planner ← Approved"]
    assert not model.finished(0) and not model.close_idle()
    carried = ChainModel(
        ChainInput.model_validate(model.carry().model_dump(mode="json")), WORKFLOW_ID, FixedRun()
    )
    assert carried.record.in_flight == {seq: run}
    assert carried.snapshot().running == ["planner ← Approved"]
    failed = ChainRunFailure(failure_type="timeout", message="late", attempts=2)
    outcome = RunOutcome(seq=seq, failure=failed)
    assert carried.runs.landed(outcome) == run
    carried.runs.take_outcome(outcome, NOW)
    [letter] = parkings(carried.outbox.take())
    assert (letter.failure_type, letter.details.get("attempt_count")) == ("timeout", 2)
    assert carried.runs.landed(outcome) is None, "an outcome is taken once"
    [refused] = parkings(carried.outbox.take())
    assert refused.failure_type == "invalid_run_outcome"
    assert refused.message == f"run_outcome: no run {seq} is in flight"
    assert carried.runs.can_dispatch()


def test_queued_runs_of_an_ended_chain_are_parked_in_queue_order() -> None:
    model = new_model()
    take(model, event("Alert", topic="project.alerts", severity="high"))
    low = event("Approved", priority=Priority.LOW)
    high = event("Approved", priority=Priority.HIGH)
    take(model, low)
    take(model, high)
    assert model.close_idle()
    model.end()
    assert model.record.state.status == ChainStatus.IDLE_CLOSED
    letters = model.runs.take_queued()
    assert [letter.details.get("event") for letter in letters] == [high, low]
    assert [letter.details.get("replay") for letter in letters] == ["run_agent", "run_agent"]
    assert letters[0].message.endswith("the chain ended idle_closed while it was queued")
    assert model.record.state.dead_lettered == 2 and not model.runs.queued()


def test_queued_runs_without_an_agent_of_their_own_are_parked_as_reruns() -> None:
    """A vote's or a capability's run names no agent a replay could run: it is parked as a
    `rerun` of its subscription (the chain decides again, while it runs)."""
    model = new_model(
        subscriptions=[
            {"agent": "planner", "events": "Approved"},
            {"name": "approve", "events": "Approved", "vote": {"voters": ["a", "b", "c"]}},
            {"capability": "sql", "events": "Approved"},
        ],
        terminal_event=None,
    )
    take(model, event("Alert", topic="project.alerts", severity="high"))
    take(model, event("Approved"))
    assert model.close_idle()
    model.end()
    letters = {letter.details.get("target_agent"): letter for letter in model.runs.take_queued()}
    replays = {agent: letter.details.get("replay") for agent, letter in letters.items()}
    assert replays == {"planner": "run_agent", "approve": "rerun", "sql": "rerun"}
    assert letters["approve"].message.startswith("approve on Approved never ran")


def test_a_run_outcome_is_exactly_one_of_result_vote_or_failure() -> None:
    failed = ChainRunFailure(failure_type="timeout", message="late")
    assert RunOutcome(seq=3, failure=failed).failure
    given: dict[str, Any]
    for given in ({}, {"result": {"agent": "a"}, "failure": {"failure_type": "x", "message": ""}}):
        with pytest.raises(ValidationError, match="exactly one of result, vote or failure"):
            RunOutcome.model_validate({"seq": 3, **given})


def test_a_runs_detours_come_back_merged_and_bounded() -> None:
    def waited(seconds: float) -> RunDetour:
        return RunDetour(
            at=NOW, agent="planner", reason="pool_full", action="waited", waited_s=seconds
        )

    detours = noted([], waited(1.5), None)
    detours = noted(detours, waited(2.0), None)
    assert [d.detour.waited_s for d in detours] == [3.5], "waits in a row add up"
    rerouted = RunDetour(at=NOW, agent="planner", reason="circuit_open", action="rerouted")
    detours = noted(detours, rerouted, None)
    assert [d.detour.action for d in detours] == ["waited", "rerouted"]
    for _ in range(3 * MAX_DETOURS):
        detours = noted(detours, rerouted, None)
    assert len(detours) == MAX_DETOURS
