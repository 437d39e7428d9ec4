"""Every activity a workflow calls, as a typed reference: its wire name (the contract's) with its
argument and result types together, so a call site never repeats a `result_type=` by hand and
the worker registers each activity under the name its callers use.

It sits above the pattern rooms because the types it names live in them."""

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from coord.models.dlq.letter import AgentLookup, DeadLetter, DeclaredAgent, Redelivery
from coord.models.events.delivery import Delivery
from coord.models.events.envelope import EventEnvelope
from coord.models.events.log import LogSegment
from coord.models.mesh.agents import AgentRequest, AgentResult
from coord.models.mesh.assignment import Assignment, CapabilityRoute
from coord.models.mesh.batches import LocalBatch, LocalBatchOutcomes
from coord.models.mesh.monitor import HealthPublication, HealthRead, HealthReading
from coord.models.mesh.placement import (
    ChainPlacementAsk,
    Placement,
    PlacementAnswer,
    PlacementAsk,
)
from coord.models.plan.report import ScratchpadWrite
from coord.models.plan.spec import ActivityProgress, PlanSpec, UpdateCaller
from coord.models.wire import contract

__all__ = [
    "AGENT_SERVED",
    "CHAIN_EVENTS",
    "CHAIN_RUNNING",
    "CHECK_PLAN_AGENTS",
    "CHOOSE_AGENT",
    "CHOOSE_AGENTS",
    "DECLARED_AGENT",
    "PARK_DEAD_LETTER",
    "PLACE_AGENTS",
    "PLACE_AGENTS_WITH_CHAIN",
    "PLANNING_CATALOGUE",
    "PLAN_PROGRESS",
    "PUBLISH_AGENT_HEALTH",
    "READ_AGENT_HEALTH",
    "REDELIVER",
    "RUN_AGENT",
    "RUN_AGENTS",
    "STORED_EVENT",
    "UPDATE_CALLER",
    "WRITE_LOG_SEGMENT",
    "WRITE_SCRATCHPAD",
    "ActivityRef",
]

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


@dataclass(frozen=True)
class ActivityRef(Generic[ArgT, ResultT]):
    """An activity's name with the types of its one argument and its result. The types are
    type forms (`list[Assignment | None]` too), so they are kept as `Any` at run time; the
    generic parameters carry them for the type checker."""

    name: str
    argument: Any
    result: Any


RUN_AGENT: ActivityRef[AgentRequest, AgentResult] = ActivityRef(
    contract.RUN_AGENT_ACTIVITY, AgentRequest, AgentResult
)
RUN_AGENTS: ActivityRef[LocalBatch, LocalBatchOutcomes] = ActivityRef(
    contract.RUN_AGENTS_ACTIVITY, LocalBatch, LocalBatchOutcomes
)
PARK_DEAD_LETTER: ActivityRef[DeadLetter, str] = ActivityRef(
    contract.PARK_DEAD_LETTER_ACTIVITY, DeadLetter, str
)
REDELIVER: ActivityRef[Redelivery, None] = ActivityRef(
    contract.REDELIVER_ACTIVITY, Redelivery, None
)
DECLARED_AGENT: ActivityRef[AgentLookup, DeclaredAgent] = ActivityRef(
    contract.DECLARED_AGENT_ACTIVITY, AgentLookup, DeclaredAgent
)
STORED_EVENT: ActivityRef[str, EventEnvelope] = ActivityRef(
    contract.STORED_EVENT_ACTIVITY, str, EventEnvelope
)
CHAIN_EVENTS: ActivityRef[str, list[EventEnvelope]] = ActivityRef(
    contract.CHAIN_EVENTS_ACTIVITY, str, list[EventEnvelope]
)
PLAN_PROGRESS: ActivityRef[str, list[ActivityProgress]] = ActivityRef(
    contract.PLAN_PROGRESS_ACTIVITY, str, list[ActivityProgress]
)
PLANNING_CATALOGUE: ActivityRef[str, dict[str, list[str]]] = ActivityRef(
    contract.PLANNING_CATALOGUE_ACTIVITY, str, dict[str, list[str]]
)
CHECK_PLAN_AGENTS: ActivityRef[PlanSpec, str | None] = ActivityRef(
    contract.CHECK_PLAN_AGENTS_ACTIVITY, PlanSpec, str | None
)
UPDATE_CALLER: ActivityRef[UpdateCaller, str] = ActivityRef(
    contract.UPDATE_CALLER_ACTIVITY, UpdateCaller, str
)
WRITE_SCRATCHPAD: ActivityRef[ScratchpadWrite, list[str]] = ActivityRef(
    contract.WRITE_SCRATCHPAD_ACTIVITY, ScratchpadWrite, list[str]
)
CHOOSE_AGENT: ActivityRef[CapabilityRoute, Assignment] = ActivityRef(
    contract.CHOOSE_AGENT_ACTIVITY, CapabilityRoute, Assignment
)
CHOOSE_AGENTS: ActivityRef[list[CapabilityRoute], list[Assignment | None]] = ActivityRef(
    contract.CHOOSE_AGENTS_ACTIVITY, list[CapabilityRoute], list[Assignment | None]
)
AGENT_SERVED: ActivityRef[str, bool] = ActivityRef(contract.AGENT_SERVED_ACTIVITY, str, bool)
CHAIN_RUNNING: ActivityRef[str, bool] = ActivityRef(contract.CHAIN_RUNNING_ACTIVITY, str, bool)
PLACE_AGENTS: ActivityRef[PlacementAsk, dict[str, Placement]] = ActivityRef(
    contract.PLACE_AGENTS_ACTIVITY, PlacementAsk, dict[str, Placement]
)
PLACE_AGENTS_WITH_CHAIN: ActivityRef[ChainPlacementAsk, PlacementAnswer] = ActivityRef(
    contract.PLACE_AGENTS_WITH_CHAIN_ACTIVITY, ChainPlacementAsk, PlacementAnswer
)
READ_AGENT_HEALTH: ActivityRef[HealthRead, HealthReading] = ActivityRef(
    contract.READ_AGENT_HEALTH_ACTIVITY, HealthRead, HealthReading
)
PUBLISH_AGENT_HEALTH: ActivityRef[HealthPublication, Delivery] = ActivityRef(
    contract.PUBLISH_AGENT_HEALTH_ACTIVITY, HealthPublication, Delivery
)
WRITE_LOG_SEGMENT: ActivityRef[LogSegment, None] = ActivityRef(
    contract.WRITE_LOG_SEGMENT_ACTIVITY, LogSegment, None
)
