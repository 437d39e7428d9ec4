"""Demo agents: the seed's Feature Deployment saga steps and its user-story chain roles.

Failures are injected per run from the event payload, deterministically, under `inject`:
`fail` (agents that fail every attempt), `flaky` ({agent: n}, fail the first n attempts),
`slow` ({agent: seconds}, heartbeat that long first), `error_type` (the failure type raised,
`temporary_failure` by default)."""

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from coord.models.agents import AgentContext, AgentFn, AgentRegistry
from coord.models.contract import FailureType
from coord.models.envelope import EventEnvelope

FEATURE_DEPLOYMENT_AGENTS: Mapping[str, str] = {
    "BuildArtifact": "artifact built",
    "RunTests": "unit tests passed",
    "DeployToStaging": "deployed to staging",
    "RunE2ETests": "end-to-end tests passed",
    "DeployToProduction": "deployed to production",
    "RemoveFromStaging": "staging deployment removed (or was never there)",
    "RollbackProduction": "production rolled back (or was never changed)",
}

USER_STORY_AGENTS: Mapping[str, str] = {
    "product-strategist": "user story refined",
    "backend-architect": "API designed: 12 endpoints, 5 schemas",
    "ux-designer": "wireframes drawn",
    "test-engineer": "tests planned and run",
    "python-pro": "backend implemented",
    "database-specialist": "schema designed",
    "frontend-specialist": "frontend implemented",
}
CARRIED_FIELDS = ("feature", "story", "inject")


async def _apply_injection(inject: Mapping[str, Any], context: AgentContext) -> None:
    delay = float(inject.get("slow", {}).get(context.agent, 0))
    for _ in range(int(delay * 10)):
        await asyncio.sleep(0.1)
        activity.heartbeat()
    failing = context.agent in inject.get("fail", [])
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


def register_demo_agents(registry: AgentRegistry) -> AgentRegistry:
    for name, summary in {**FEATURE_DEPLOYMENT_AGENTS, **USER_STORY_AGENTS}.items():
        registry.register(name)(_demo_agent(summary))
    return registry
