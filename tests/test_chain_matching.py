"""Matching on its own (no server): which runs a recorded event queues (subscriptions, filters,
joins), what it sends (forwards to listeners, the status an alert sets) and reruns."""

from coord.models.chain.spec import ChainStatus, RerunRequest
from coord.models.wire.contract import CHAIN_EVENT_SIGNAL, EVENT_SIGNAL
from coord.models.wire.versions import LIFECYCLE_NOTICES_PATCH
from tests.chain_models import (
    FixedRun,
    event,
    forwards,
    new_model,
    parkings,
    status_changes,
    take,
)


def test_a_join_waits_for_all_its_events_and_a_filter_selects() -> None:
    model = new_model()
    approved = event("Approved")
    take(model, approved)
    model.runs.start_next()
    plain = event("Planned", cause=approved.event.id, ui="false")
    take(model, plain)
    assert not model.runs.queued(), "the designer's filter does not match; the join waits"
    assert model.snapshot().waiting == ["coder waits for Designed"]
    take(model, event("Planned", cause=approved.event.id, ui="true"))
    _, designer = model.runs.start_next()
    assert designer.agent == "designer"
    designed = event("Designed", cause=approved.event.id)
    take(model, designed)
    _, coder = model.runs.start_next()
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
    assert len(model.record.queue) == 1
    state = model.record.state
    assert state.filter_errors == 1 and state.last_filter_error is not None
    assert state.last_filter_error.startswith(f"event {missing.event.id}: filter ")


def test_an_alert_pauses_the_chain_and_its_resolution_resumes_it_each_sent_as_status() -> None:
    model = new_model()
    alert = event("Alert", topic="project.alerts", severity="high")
    take(model, alert)
    [paused] = status_changes(model.outbox.take())
    assert paused.attributes == model.status_attributes()
    assert set(paused.attributes.values()) == {"c1", "chain", "paused"}
    assert model.record.state.pause_reason == f"Alert ({alert.event.id})"
    take(model, event("AlertResolved"))
    [resumed] = status_changes(model.outbox.take())
    assert "running" in resumed.attributes.values()
    assert model.record.state.status == ChainStatus.RUNNING


def test_a_resolution_while_running_pauses_only_in_runs_recorded_before_notices() -> None:
    resolution = event("AlertResolved", topic="project.alerts", severity="high")
    model = new_model()
    assert not model.matching.apply_alerts(resolution, resolutions_never_pause=True)
    assert model.matching.apply_alerts(resolution, resolutions_never_pause=False)
    assert model.record.state.status == ChainStatus.PAUSED


def test_listeners_get_each_recorded_event_but_the_chains_lifecycle_notices() -> None:
    model = new_model()
    model.attach("agg-1")
    model.attach("agg-1")
    approved = event("Approved")
    take(model, approved)
    [forward] = forwards(model.outbox.take())
    assert (forward.envelope, forward.signal, forward.listeners) == (
        approved,
        CHAIN_EVENT_SIGNAL,
        ("agg-1",),
    )
    take(model, event("EventDeadLettered", cause=approved.event.id))
    assert forwards(model.outbox.take()) == []
    take(model, event("Approved", correlation_id="other"))
    assert forwards(model.outbox.take()) == [], "a rejected event is not forwarded"


def test_runs_recorded_before_notices_forward_everything_as_event() -> None:
    model = new_model(FixedRun(before={LIFECYCLE_NOTICES_PATCH}))
    model.attach("agg-1")
    take(model, event("EventDeadLettered"))
    [forward] = forwards(model.outbox.take())
    assert forward.signal == EVENT_SIGNAL


def test_a_rerun_replays_the_event_with_the_failed_runs_key() -> None:
    model = new_model()
    approved = event("Approved")
    take(model, approved)
    fixed = event("Approved", cause=approved.event.id)
    request = RerunRequest(subscription="planner", event=fixed, idempotency_key="key-1")
    model.rerun(request)
    _, first = model.runs.start_next()
    _, replay = model.runs.start_next()
    assert (first.trigger.event.id, replay.idempotency_key) == (approved.event.id, "key-1")
    assert model.record.depths[fixed.event.id] == 0, "a replay takes its event's depth"
    model.outbox.take()
    model.rerun(RerunRequest(subscription="nobody", event=fixed))
    [letter] = parkings(model.outbox.take())
    assert letter.failure_type == "invalid_rerun" and letter.details.get("event") == fixed
