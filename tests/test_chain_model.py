"""The chain's bookkeeping on its own (no server): intake, timeline, matching, the run queue,
alerts, accounting and the carry across continue-as-new."""

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from coord.models.chain.model import (
    SEEN_WINDOW,
    TIMELINE_WINDOW,
    ChainModel,
    ParkDetails,
    Parking,
    Rejection,
)
from coord.models.chain.run import RunFailure, RunOutcome, noted
from coord.models.chain.spec import ChainInput, ChainSpec, ChainStatus, RerunRequest
from coord.models.events.envelope import EventEnvelope, Priority
from coord.models.mesh.agents import AgentResult, PublishRequest
from coord.models.mesh.runs import MAX_DETOURS, RunDetour

WORKFLOW_ID = "chain-c1"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def spec(**overrides: Any) -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "story",
            "triggers": ["Approved"],
            "subscriptions": [
                {
                    "agent": "planner",
                    "events": "Approved",
                    "publishes": {"on_success": "Planned", "on_failure": "PlanFailed"},
                },
                {
                    "agent": "coder",
                    "events": ["Planned", "Designed"],
                    "join": "all",
                    "publishes": {"on_start": "Coding", "on_success": "Done"},
                },
                {
                    "agent": "designer",
                    "events": "Planned",
                    "filter": "ui=true",
                    "publishes": {"on_success": "Designed"},
                },
            ],
            "terminal_event": "Done",
            "max_concurrency": 2,
            **overrides,
        }
    )


def new_model(**overrides: Any) -> ChainModel:
    chain_input = ChainInput(spec=spec(**overrides), correlation_id="c1")
    return ChainModel.begin(chain_input, WORKFLOW_ID)


def event(
    type: str,
    *,
    cause: str | None = None,
    correlation_id: str | None = "c1",
    priority: Priority = Priority.NORMAL,
    topic: str | None = None,
    **payload: Any,
) -> EventEnvelope:
    return EventEnvelope.new(
        type,
        "/test",
        payload=payload,
        correlation_id=correlation_id,
        causation_id=cause,
        priority=priority,
        topic=topic,
    )


def take(model: ChainModel, envelope: EventEnvelope) -> Any:
    """What the workflow does with an event it drains from the inbox, minus the sending."""
    admission = model.admit(envelope)
    if isinstance(admission, Rejection):
        model.reject(admission, NOW, envelope=envelope, parked=True)
    elif admission == "recorded":
        model.apply_alerts(envelope, resolutions_never_pause=True)
        model.match(envelope, NOW)
    return admission


def accounted(model: ChainModel) -> bool:
    state = model.state
    return state.received == state.events_seen + state.duplicates + state.rejected_count


def test_an_event_is_recorded_once_and_queues_the_runs_it_completes() -> None:
    model = new_model()
    approved = event("Approved")
    assert take(model, approved) == "recorded"
    assert take(model, approved) == "duplicate"
    assert [row.event for row in model.timeline] == ["Approved"]
    assert model.state.events_seen == 1 and model.state.duplicates == 1
    seq, run = model.start_next()
    assert (run.agent, run.causes) == ("planner", [approved.event.id])
    assert run.idempotency_key == f"{WORKFLOW_ID}/planner/{approved.event.id}"
    assert model.running and not model.queue
    model.finish(seq)
    assert not model.running
    assert accounted(model)


def test_an_event_without_correlation_takes_the_chains_and_a_foreign_one_is_rejected() -> None:
    model = new_model()
    unscoped = event("Approved", correlation_id=None)
    assert take(model, unscoped) == "recorded"
    assert unscoped.event.correlation_id == "c1"
    foreign = event("Approved", correlation_id="other")
    rejection = model.admit(foreign)
    assert isinstance(rejection, Rejection) and rejection.kind == "foreign_correlation"
    assert "correlation_id 'other' is not this chain's ('c1')" in rejection.reason


def test_a_causation_loop_is_rejected_naming_its_path() -> None:
    model = new_model(max_causation_depth=2)
    first = event("Approved")
    second = event("Planned", cause=first.event.id)
    third = event("Designed", cause=second.event.id)
    for envelope in (first, second, third):
        assert take(model, envelope) == "recorded"
    fourth = event("Done", cause=third.event.id)
    rejection = model.admit(fourth)
    assert isinstance(rejection, Rejection)
    assert (rejection.kind, rejection.depth) == ("causation_loop", 3)
    assert rejection.reason.endswith("path: Done ← Designed ← Planned ← Approved")


def test_a_lifecycle_notice_carries_the_depth_of_an_event_the_chain_forgot() -> None:
    model = new_model()
    notice = event("EventDeadLettered", cause="evt-forgotten", causation_depth=5)
    assert model.depth(notice) == 6
    assert model.depth(event("Planned", cause="evt-forgotten", causation_depth=5)) == 0


def test_a_rejection_is_counted_kept_in_a_window_and_parked() -> None:
    model = new_model()
    envelope = event("Approved", cause="evt-x")
    letter = model.reject(
        Rejection("chain_closing", "closing", 4), NOW, envelope=envelope, parked=True
    )
    details = ParkDetails(event=envelope, raw=None, causation_depth=4)
    assert letter == Parking("chain_closing", "closing", details)
    assert model.depths[envelope.event.id] == 4
    for n in range(30):
        model.reject(Rejection("invalid_envelope", f"bad {n}"), NOW, raw={"n": n}, parked=False)
    state = model.state
    assert state.rejected_count == 31 and state.dead_lettered == 1
    assert len(state.rejected) == 20 and state.rejected[-1].reason == "bad 29"
    assert accounted(model)


def test_a_join_waits_for_all_its_events_and_a_filter_selects() -> None:
    model = new_model()
    approved = event("Approved")
    take(model, approved)
    model.start_next()
    plain = event("Planned", cause=approved.event.id, ui="false")
    take(model, plain)
    assert len(model.queue) == 0, "the designer's filter does not match; the join waits"
    assert model.snapshot().waiting == ["coder waits for Designed"]
    take(model, event("Planned", cause=approved.event.id, ui="true"))
    _, designer = model.start_next()
    assert designer.agent == "designer"
    designed = event("Designed", cause=approved.event.id)
    take(model, designed)
    _, coder = model.start_next()
    assert coder.agent == "coder"
    assert coder.causes == [plain.event.id, designed.event.id]
    assert set(coder.inputs) == {"Planned", "Designed"}


def test_a_filter_that_fails_does_not_match_and_is_counted() -> None:
    model = new_model(
        subscriptions=[{"agent": "a", "events": "Approved", "filter": "payload.level > 1"}],
        terminal_event=None,
    )
    missing = event("Approved")
    take(model, missing)
    take(model, event("Approved", level=2))
    assert len(model.queue) == 1
    assert model.state.filter_errors == 1
    assert model.state.last_filter_error is not None
    assert model.state.last_filter_error.startswith(f"event {missing.event.id}: filter ")


def test_runs_leave_the_queue_by_priority_then_arrival() -> None:
    model = new_model(max_concurrency=10)
    low = event("Approved", priority=Priority.LOW)
    normal = event("Approved")
    critical = event("Approved", priority=Priority.CRITICAL)
    for envelope in (low, normal, critical):
        take(model, envelope)
    order = [model.start_next()[1].trigger.event.id for _ in range(3)]
    assert order == [critical.event.id, normal.event.id, low.event.id]


def test_dispatch_is_bounded_by_concurrency_and_held_by_an_alert() -> None:
    model = new_model()
    for _ in range(3):
        take(model, event("Approved"))
    seq, _ = model.start_next()
    model.start_next()
    assert not model.can_dispatch(), "max_concurrency 2"
    model.finish(seq)
    assert model.can_dispatch()
    alert = event("Alert", topic="project.alerts", severity="high")
    assert take(model, alert) == "recorded"
    assert model.snapshot().status == ChainStatus.PAUSED
    assert model.state.pause_reason == f"Alert ({alert.event.id})"
    assert not model.can_dispatch()
    assert model.apply_alerts(event("AlertResolved"), resolutions_never_pause=True)
    assert model.snapshot().status == ChainStatus.RUNNING and model.can_dispatch()


def test_a_resolution_while_running_pauses_only_in_runs_recorded_before_notices() -> None:
    resolution = event("AlertResolved", topic="project.alerts", severity="high")
    model = new_model()
    assert not model.apply_alerts(resolution, resolutions_never_pause=True)
    assert model.apply_alerts(resolution, resolutions_never_pause=False)
    assert model.state.status == ChainStatus.PAUSED


def test_a_run_publishes_its_events_into_the_inbox_caused_by_its_trigger() -> None:
    model = new_model()
    approved = event("Approved", priority=Priority.HIGH)
    take(model, approved)
    _, run = model.start_next()
    model.run_started(run)
    notes = [PublishRequest(type="Note", payload={})]
    result = AgentResult(agent="planner", data={"plan": 1}, publish=notes, may_publish=None)
    assert model.refused_types(run, result) == set(), "no list declared: as before the rule"
    model.run_succeeded(run, result)
    published = model.take_inbox()
    assert [e.event.type for e in published] == ["Planned", "Note"]
    assert all(e.event.causation_id == approved.event.id for e in published)
    assert published[0].payload == {"plan": 1}
    assert published[0].routing.priority == Priority.HIGH
    assert model.agent_request(run).idempotency_key == run.idempotency_key


def planner_result(*types: str, may_publish: list[str] | None) -> AgentResult:
    publish = [PublishRequest(type=t, payload={"n": i}) for i, t in enumerate(types)]
    return AgentResult(agent="planner", publish=publish, may_publish=may_publish)


def test_an_agent_publishes_only_the_types_its_subscription_or_declaration_allows() -> None:
    model = new_model()
    model._spec.subscriptions[0].publishes.events = ["Note"]
    approved = event("Approved")
    take(model, approved)
    _, run = model.start_next()
    result = planner_result("Note", "Approved", "Planned", "Memo", may_publish=["Memo"])
    refused = model.refused_types(run, result)
    assert refused == {"Approved"}, "declared: events, on_* types and the declaration's"
    rejections = model.run_succeeded(run, result, refused)
    published = model.take_inbox()
    assert [e.event.type for e in published] == ["Planned", "Note", "Planned", "Memo"]
    [(rejection, envelope)] = rejections
    assert rejection.kind == "publish_not_allowed"
    assert envelope.event.type == "Approved" and envelope.payload == {"n": 1}
    assert envelope.event.causation_id == approved.event.id
    assert rejection.depth == 1, "counted from the run's trigger"
    assert "planner (subscription planner) may not publish Approved" in rejection.reason
    assert "it may publish Memo, Note, PlanFailed, Planned" in rejection.reason
    letter = model.reject(rejection, NOW, envelope=envelope, parked=True)
    assert letter is not None and letter.failure_type == "publish_not_allowed"
    state = model.snapshot()
    assert (state.received, state.rejected_count, state.dead_lettered) == (2, 1, 1)
    assert state.rejected[-1].event_id == envelope.event.id


def test_an_agent_declared_without_a_list_is_held_by_its_kind() -> None:
    model = new_model()
    take(model, event("Approved"))
    _, run = model.start_next()
    llm = planner_result("Note", "Planned", may_publish=[])
    assert model.refused_types(run, llm) == {"Note"}, "an llm agent: declared types only"
    python = planner_result("Note", may_publish=None)
    assert model.refused_types(run, python) == set(), "python, shell, http: as before"
    unsaid = AgentResult.model_validate({"agent": "planner", "publish": [{"type": "Note"}]})
    assert model.refused_types(run, unsaid) == {"Note"}, "a worker that does not say: held"


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
    model = new_model()
    approved = event("Approved")
    take(model, approved)
    _, run = model.start_next()
    letter = model.run_failed(run, "agent_error", "boom", 3)
    assert letter.message == "planner failed on Approved: boom"
    assert letter.details == {
        "event": run.trigger,
        "target_agent": "planner",
        "attempt_count": 3,
        "replay": "rerun",
        "idempotency_key": run.idempotency_key,
        "inputs": run.inputs,
        "causation_depth": 0,
    }
    assert [e.event.type for e in model.inbox] == ["PlanFailed"]
    assert model.state.dead_lettered == 1


def test_a_rerun_replays_the_event_with_the_failed_runs_key() -> None:
    model = new_model()
    approved = event("Approved")
    take(model, approved)
    fixed = event("Approved", cause=approved.event.id)
    request = RerunRequest(subscription="planner", event=fixed, idempotency_key="key-1")
    assert model.rerun(request) is None
    _, first = model.start_next()
    _, replay = model.start_next()
    assert (first.trigger.event.id, replay.idempotency_key) == (approved.event.id, "key-1")
    assert model.depths[fixed.event.id] == 0, "a replay takes the depth of the event it replays"
    unknown = model.rerun(RerunRequest(subscription="nobody", event=fixed))
    assert isinstance(unknown, Rejection) and unknown.kind == "invalid_rerun"


def test_queued_runs_of_an_ended_chain_are_parked_in_queue_order() -> None:
    model = new_model()
    take(model, event("Alert", topic="project.alerts", severity="high"))
    low = event("Approved", priority=Priority.LOW)
    high = event("Approved", priority=Priority.HIGH)
    take(model, low)
    take(model, high)
    assert model.close_idle()
    model.end()
    assert model.state.status == ChainStatus.IDLE_CLOSED
    letters = model.take_queued()
    assert [letter.details.get("event") for letter in letters] == [high, low]
    assert [letter.details.get("replay") for letter in letters] == ["run_agent", "run_agent"]
    assert letters[0].message.endswith("the chain ended idle_closed while it was queued")
    assert model.state.dead_lettered == 2 and not model.queue


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
    letters = {letter.details.get("target_agent"): letter for letter in model.take_queued()}
    replays = {agent: letter.details.get("replay") for agent, letter in letters.items()}
    assert replays == {"planner": "run_agent", "approve": "rerun", "sql": "rerun"}
    assert letters["approve"].message.startswith("approve on Approved never ran")


def test_the_chain_finishes_after_its_terminal_event_once_idle() -> None:
    model = new_model()
    take(model, event("Approved"))
    assert not model.finished(outbound=0)
    seq, _ = model.start_next()
    take(model, event("Done"))
    assert model.state.terminal_seen
    assert not model.finished(outbound=0), "a run is still running"
    model.finish(seq)
    assert not model.finished(outbound=1), "a send is still under way"
    assert model.finished(outbound=0)
    model.end()
    assert model.state.status == ChainStatus.COMPLETED


def test_a_closing_chain_finishes_with_runs_left_only_when_paused() -> None:
    model = new_model()
    take(model, event("Approved"))
    model.closing = True
    assert not model.finished(outbound=0)
    model.state.status = ChainStatus.PAUSED
    assert model.finished(outbound=0)
    model.end()
    assert model.state.status == ChainStatus.CLOSED


def test_the_timeline_and_the_seen_ids_stay_within_their_windows() -> None:
    model = new_model()
    for _ in range(2 * SEEN_WINDOW + 1):
        take(model, event("Unrelated"))
    assert len(model.timeline) <= 2 * TIMELINE_WINDOW
    assert len(model.depths) <= 2 * SEEN_WINDOW
    assert model.timeline[-1].seq == model.seq
    assert accounted(model)


def test_the_carry_round_trips_and_is_trimmed() -> None:
    model = new_model()
    for _ in range(TIMELINE_WINDOW + 50):
        take(model, event("Unrelated"))
    approved = event("Approved", priority=Priority.HIGH)
    take(model, approved)
    take(model, event("Approved", priority=Priority.LOW))
    model.attach("agg-1")
    model.inbox.append(event("Planned"))
    carried = model.carry()
    assert carried.carried is not None and len(carried.carried.timeline) == TIMELINE_WINDOW
    assert carried.carried.state.queued == 2 and carried.carried.state.listeners == ["agg-1"]
    again = ChainInput.model_validate_json(carried.model_dump_json())
    resumed = ChainModel.begin(again, WORKFLOW_ID)
    assert resumed.seq == model.seq and resumed.listeners == ["agg-1"]
    assert [e.event.type for e in resumed.inbox] == ["Planned"]
    assert take(resumed, approved) == "duplicate"
    assert resumed.start_next()[1].trigger.event.id == approved.event.id
    assert resumed.state.received == model.state.received + 1


def test_the_status_attributes_follow_the_pause() -> None:
    model = new_model()
    take(model, event("Alert", topic="project.alerts", severity="high"))
    assert set(model.status_attributes().values()) == {"c1", "chain", "paused"}


def test_a_run_handed_over_is_carried_in_flight_and_taken_once() -> None:
    model = new_model(max_concurrency=1)
    take(model, event("Approved"))
    take(model, event("Approved"))
    seq, run = model.start_next()
    model.hand_over(seq)
    assert model.running, "continue-as-new waits until the ChainRun is confirmed started"
    model.confirmed(seq)
    model.finish(seq)
    assert not model.running, "a run in flight does not hold continue-as-new"
    assert not model.can_dispatch(), "but it keeps its slot"
    assert model.snapshot().running == ["planner ← Approved"]
    assert not model.finished(0) and not model.close_idle()
    carried = ChainModel.begin(
        ChainInput.model_validate(model.carry().model_dump(mode="json")), WORKFLOW_ID
    )
    assert carried.in_flight == {seq: run} and carried.snapshot().running == ["planner ← Approved"]
    assert carried.landed(seq) == run
    assert carried.landed(seq) is None, "an outcome is taken once"
    assert carried.can_dispatch()


def test_a_run_outcome_is_exactly_one_of_result_vote_or_failure() -> None:
    assert RunOutcome(seq=3, failure=RunFailure(failure_type="timeout", message="late")).failure
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
