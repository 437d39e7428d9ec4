"""What the chain's model tests share (no server): a spec, events, the run a model is tested in
(`FixedRun`: a fixed clock and history, every patch in unless told) and the way the workflow
hands it events (`take`)."""

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from coord.models.chain.boundary import Forward, Parking, Send, StatusChanged, Undecodable
from coord.models.chain.intake import TaskShare
from coord.models.chain.model import ChainModel
from coord.models.chain.spec import ChainInput, ChainSpec
from coord.models.events.envelope import EventEnvelope, Priority

WORKFLOW_ID = "chain-c1"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class FixedRun:
    """The model's `RunContext` in a test: `at`, a history `length` long, and the patches the
    run was recorded `before` (all others are in); every patch asked is noted in `asked`, every
    signal text decoded in `decoded`."""

    at: datetime = NOW
    length: int = 10
    suggested: bool = False
    before: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)
    decoded: list[str] = field(default_factory=list)

    def now(self) -> datetime:
        return self.at

    def history_length(self) -> int:
        return self.length

    def continue_as_new_suggested(self) -> bool:
        return self.suggested

    def patched(self, patch: str) -> bool:
        self.asked.append(patch)
        return patch not in self.before

    def decode(self, text: str) -> EventEnvelope | Undecodable:
        """What the workflow's decoding gives (its reason worded apart)."""
        self.decoded.append(text)
        try:
            return EventEnvelope.model_validate_json(text)
        except ValueError as error:
            return Undecodable(f"event: {error.__class__.__name__}", text)


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


def new_model(run: FixedRun | None = None, **overrides: Any) -> ChainModel:
    chain_input = ChainInput(spec=spec(**overrides), correlation_id="c1")
    return ChainModel(chain_input, WORKFLOW_ID, run or FixedRun())


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


def take(model: ChainModel, envelope: EventEnvelope) -> str:
    """An event handed to the model as the workflow hands it one: into the queue, then taken
    in. Says what became of it: recorded, duplicate or rejected."""
    assert not model.intake.waiting(), "the event taken is the one given"
    before = model.record.state.model_copy()
    model.receive(envelope)
    model.take_next(TaskShare())
    state = model.record.state
    if state.events_seen > before.events_seen:
        return "recorded"
    return "duplicate" if state.duplicates > before.duplicates else "rejected"


def parkings(sends: list[Send]) -> list[Parking]:
    return [send for send in sends if isinstance(send, Parking)]


def forwards(sends: list[Send]) -> list[Forward]:
    return [send for send in sends if isinstance(send, Forward)]


def status_changes(sends: list[Send]) -> list[StatusChanged]:
    return [send for send in sends if isinstance(send, StatusChanged)]


def accounted(model: ChainModel) -> bool:
    state = model.record.state
    return state.received == state.events_seen + state.duplicates + state.rejected_count
