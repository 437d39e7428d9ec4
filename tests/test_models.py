"""The shared models: the envelope, durations, retry mapping and spec errors."""

import builtins
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coord.models.aggregator.spec import AggregatorState
from coord.models.chain.spec import ChainState
from coord.models.events.envelope import EventEnvelope, Priority, new_event_id
from coord.models.mesh.retry import RetryConfig
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.durations import parse_duration
from coord.models.wire.specs import SpecError, parse_model

SEED_EVENT = {
    "event": {
        "id": "evt-20251129-143000-abc123",
        "type": "TaskCompletedEvent",
        "source": "/backend-architect",
        "timestamp": "2025-11-29T14:30:00Z",
        "version": "1.0",
        "correlation_id": "project-xyz-123",
        "causation_id": "evt-previous-id",
    },
    "payload": {"task_id": "T1", "status": "completed"},
    "routing": {"topic": "project.tasks", "partition_key": "project-xyz", "priority": "normal"},
}


def test_seed_envelope_round_trips() -> None:
    envelope = EventEnvelope.model_validate(SEED_EVENT)
    assert envelope.model_dump(mode="json")["event"]["timestamp"] == "2025-11-29T14:30:00Z"
    assert envelope.routing.priority is Priority.NORMAL


def test_envelope_fills_id_timestamp_and_partition_key() -> None:
    envelope = EventEnvelope.new("UserStoryApproved", "/product", correlation_id="story-1")
    assert re.fullmatch(r"evt-\d{8}-\d{6}-[0-9a-f]{12}", envelope.event.id)
    assert envelope.event.timestamp.tzinfo is UTC
    assert envelope.routing.partition_key == "story-1"


@pytest.mark.parametrize(
    "path",
    [
        ("event", "id"),
        ("event", "type"),
        ("event", "source"),
        ("event", "correlation_id"),
        ("event", "causation_id"),
        ("routing", "topic"),
        ("routing", "partition_key"),
    ],
)
def test_an_event_header_field_past_500_characters_is_refused_naming_it(
    path: tuple[str, str],
) -> None:
    """Its type, topic and correlation become keyword search attributes (2,048 bytes)."""
    part, field = path
    long = {**SEED_EVENT, part: {**SEED_EVENT[part], field: "T" * 501}}
    with pytest.raises(
        SpecError, match=rf"^event: {part}\.{field}: String should have at most 500"
    ):
        parse_model(EventEnvelope, long, "event")
    fits = {**SEED_EVENT, part: {**SEED_EVENT[part], field: "T" * 500}}
    assert parse_model(EventEnvelope, fits, "event")


def test_an_event_id_is_made_without_importing_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    """`strftime` imports `time` at every call: in a workflow's sandbox each import goes
    through the sandbox's importer, which made the most of an event id's cost. The id names
    the same second as `strftime` would."""
    imported: list[str] = []
    real_import = builtins.__import__

    def counting(name: str, *args: Any, **kwargs: Any) -> Any:
        imported.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", counting)
    before = datetime.now(UTC).replace(microsecond=0)
    event_id = new_event_id()
    after = datetime.now(UTC)
    monkeypatch.undo()
    assert imported == []
    stamp = datetime.strptime(event_id[4:19], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    assert before <= stamp <= after and re.fullmatch(r"evt-\d{8}-\d{6}-[0-9a-f]{12}", event_id)


def test_naive_and_offset_timestamps_become_utc() -> None:
    data = {"event": {"type": "T", "source": "/s", "timestamp": "2025-11-29T16:30:00+02:00"}}
    assert EventEnvelope.model_validate(data).event.timestamp == datetime(
        2025, 11, 29, 14, 30, tzinfo=UTC
    )


def test_unknown_priority_is_rejected_naming_the_field() -> None:
    data = {**SEED_EVENT, "routing": {"priority": "urgent"}}
    with pytest.raises(SpecError, match=r"event: routing\.priority: Input should be"):
        parse_model(EventEnvelope, data, "event")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(minutes=90)),
        ("500ms", timedelta(milliseconds=500)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


def test_seed_retry_configuration_maps_onto_a_temporal_retry_policy() -> None:
    policy = RetryConfig.model_validate(
        {
            "max_retries": 3,
            "backoff_type": "exponential",
            "initial_delay": "1s",
            "max_delay": "30s",
            "retry_on": ["timeout", "temporary_failure"],
            "no_retry_on": ["invalid_payload", "unauthorized"],
        }
    ).to_retry_policy()
    assert policy.maximum_attempts == 4
    assert policy.initial_interval == timedelta(seconds=1)
    assert policy.backoff_coefficient == 2.0
    assert policy.maximum_interval == timedelta(seconds=30)
    assert policy.non_retryable_error_types == ["invalid_payload", "unauthorized"]
    assert RetryConfig(backoff_type="fixed").to_retry_policy().backoff_coefficient == 1.0
    assert RetryConfig(max_retries=None).to_retry_policy().maximum_attempts == 0


def test_spec_errors_name_the_field_and_the_problem() -> None:
    raw = {"saga_id": "x", "steps": [{"name": "A"}, {"name": "B", "retry": {"max_retries": -1}}]}
    with pytest.raises(SpecError) as error:
        parse_model(SagaSpec, raw, "spec.yaml")
    assert str(error.value).startswith("spec.yaml: steps[1].retry.max_retries: Input should be")


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        ([], "steps: List should have at least 1 item"),
        ([{"name": "A"}, {"name": "A"}], "steps: step names must be unique, repeated: A"),
        (
            [{"name": "A", "pivot": True}, {"name": "B", "pivot": True}],
            "steps: at most one step can be the pivot",
        ),
        ([{"name": "A", "colour": "red"}], "steps[0].colour: Extra inputs are not permitted"),
    ],
)
def test_invalid_saga_specs(steps: list[dict[str, object]], problem: str) -> None:
    with pytest.raises(SpecError, match=re.escape(problem)):
        parse_model(SagaSpec, {"saga_id": "x", "steps": steps}, "spec")


def test_step_defaults_come_from_its_name() -> None:
    step = SagaSpec.model_validate({"saga_id": "x", "steps": [{"name": "Build"}]}).steps[0]
    assert (step.agent, step.on_success, step.on_failure) == (
        "Build",
        "BuildSucceeded",
        "BuildFailed",
    )


def test_each_run_record_names_its_search_attributes_for_start_and_upsert() -> None:
    """A run's first record gives the attributes its start sets, a later one those it upserts."""

    def named(values: dict[Any, str]) -> dict[str, str]:
        return {key.name: value for key, value in values.items()}

    saga = SagaState(saga_id="deploy-1")
    assert named(saga.search_attributes()) == {
        "CorrelationId": "deploy-1",
        "CoordPattern": "saga",
        "CoordStatus": "pending",
    }
    compensated = saga.model_copy(update={"correlation_id": "c", "status": SagaStatus.COMPENSATED})
    assert named(compensated.search_attributes())["CorrelationId"] == "c"
    assert named(compensated.search_attributes())["CoordStatus"] == "compensated"
    chain = ChainState(correlation_id="story-1", spec="user-story")
    assert named(chain.search_attributes()) == {
        "CorrelationId": "story-1",
        "CoordPattern": "chain",
        "CoordStatus": "running",
    }
    assert named(AggregatorState(aggregator_id="phase1").search_attributes()) == {
        "CorrelationId": "phase1",
        "CoordPattern": "aggregator",
        "CoordStatus": "waiting",
    }
