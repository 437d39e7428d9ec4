"""Demo agents: the Feature Deployment saga steps, its user-story chain roles, and the
workers, reviewer and verifiers of the coordinator-mode plan (examples/plan-seed003.yaml).

Failures are injected per run from the event payload, deterministically, under `inject`:
`fail` (agents, or plan tasks, that fail every attempt), `flaky` ({agent: n}, fail the first n
attempts), `slow` ({agent: seconds}, heartbeat that long first), `error_type` (the failure type
raised, `temporary_failure` by default), and for plans `reject` (reviewers and verifiers that
find fault with a task's first result, and pass it once it was fixed with their notes)."""

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentFn, AgentRegistry
from coord.models.mesh.config import AgentDeclarationBase
from coord.models.mesh.demo import (
    CARRIED_FIELDS,
    FEATURE_DEPLOYMENT_AGENTS,
    PLAN_REVIEWERS,
    PLAN_WORKERS,
    USER_STORY_AGENTS,
)
from coord.models.plan.gates import REVIEW_NOTES_INPUT
from coord.models.plan.spec import parse_activity_id
from coord.models.wire.contract import FailureType

PLAN_STEP_SECONDS = 1.0


def _plan_task() -> str | None:
    """The plan task the running activity is for, when it is one (from its activity id)."""
    key = parse_activity_id(activity.info().activity_id)
    return key.task if key is not None else None


async def _apply_injection(
    inject: Mapping[str, Any], context: AgentContext, task: str | None = None
) -> None:
    delay = float(inject.get("slow", {}).get(context.agent, 0))
    for _ in range(int(delay * 10)):
        await asyncio.sleep(0.1)
        context.heartbeat()
    failing = bool({context.agent, task} & set(inject.get("fail", [])))
    flaky = context.attempt <= int(inject.get("flaky", {}).get(context.agent, 0))
    if failing or flaky:
        raise ApplicationError(
            f"{context.agent} failed (injected, attempt {context.attempt})",
            type=str(inject.get("error_type", FailureType.TEMPORARY_FAILURE)),
        )


def _undone(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A compensation says what it undid: the step's `ref`, or how the step failed."""
    undoes = inputs.get("undoes")
    if undoes is None:
        return {}
    if "result" in undoes:
        return {"undid": {"step": undoes["step"], "ref": undoes["result"].get("ref")}}
    return {"undid": {"step": undoes["step"], "failure": undoes["failure"]["type"]}}


def _demo_agent(summary: str) -> AgentFn:
    async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        await _apply_injection(event.payload.get("inject", {}), context)
        digest = hashlib.sha256(context.idempotency_key.encode()).hexdigest()[:8]
        carried = {k: event.payload[k] for k in CARRIED_FIELDS if k in event.payload}
        return {"summary": summary, "ref": digest, **carried, **_undone(context.inputs)}

    return agent


def _plan_worker(summary: str, steps: tuple[str, ...]) -> AgentFn:
    """Reports each step as its progress, then answers with what it used: the `ref` of each
    dependency's result, and the notes of the review it fixed."""

    async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        inject = event.payload.get("inject", {})
        for step in steps:
            context.progress(step)
            await asyncio.sleep(PLAN_STEP_SECONDS)
        await _apply_injection(inject, context, _plan_task())
        notes = context.inputs.get(REVIEW_NOTES_INPUT, [])
        used = {
            task: result.get("ref")
            for task, result in context.inputs.items()
            if task != REVIEW_NOTES_INPUT and isinstance(result, Mapping)
        }
        digest = hashlib.sha256(context.idempotency_key.encode()).hexdigest()[:8]
        faults = [note.get("notes", "") for note in notes if not note.get("passed")]
        fixed = {"fixed": faults} if notes else {}
        return {"summary": summary, "ref": digest, "used": used, **fixed}

    return agent


def _plan_reviewer(fault: str) -> AgentFn:
    """Passes a result, unless told to reject (`inject.reject` names it) a result nobody fixed
    yet: then it fails it with its notes. Answers `{"passed": bool, "notes": str}`."""

    async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        result = context.inputs.get("result", {})
        inject = event.payload.get("inject", {})
        context.progress(f"Reviewing {context.inputs.get('task', 'the result')}")
        await _apply_injection(inject, context)
        if context.agent in inject.get("reject", []) and not result.get("fixed"):
            return {"passed": False, "notes": fault}
        return {"passed": True, "notes": "no findings"}

    return agent


REPORTS_PROGRESS = AgentDeclarationBase(execution="remote")
"""The demo plan's workers and reviewers: they take seconds and report their progress, which
only an activity task's heartbeats carry (a local run sends none), so they run as activity
tasks; the saga's and chain's demo agents answer at once and run locally."""


def register_demo_agents(registry: AgentRegistry) -> AgentRegistry:
    for name, summary in {**FEATURE_DEPLOYMENT_AGENTS, **USER_STORY_AGENTS}.items():
        registry.register(name)(_demo_agent(summary))
    for name, (summary, steps) in PLAN_WORKERS.items():
        registry.register(name, declaration=REPORTS_PROGRESS)(_plan_worker(summary, steps))
    for name, fault in PLAN_REVIEWERS.items():
        registry.register(name, declaration=REPORTS_PROGRESS)(_plan_reviewer(fault))
    return registry
