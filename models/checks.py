"""Specs checked against the agents a registry serves, where a spec enters (the CLI, the API,
the worker, `coord validate`): the one rule every pattern's spec is held to, so it sits above the
pattern rooms."""

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from coord.models.chain.spec import ChainSpec
from coord.models.mesh.assignment import FallbackRoute, Routed, candidates, no_candidate_message
from coord.models.mesh.declared import KnownAgents
from coord.models.plan.spec import PlanSpec, PlanTask
from coord.models.saga.spec import SagaSpec
from coord.models.vote.spec import VoteSpec
from coord.models.wire.specs import SpecError

AgentSpec = ChainSpec | SagaSpec | PlanSpec | VoteSpec
"""The specs that run agents (an aggregator runs none)."""


def check_agents(source: object, spec: AgentSpec, registry: KnownAgents) -> None:
    """Agents are checked where a spec enters, by the rule the worker runs them by (the
    `run_agent` activity) against `registry`: a named agent is declared, an inline one is of a
    kind the registry's settings allow, capabilities asked for are offered (the rule of
    `choose_agent`); a `fallback` is held to the same rule, as the agent or capabilities it
    names (else the run would fail there only once its agent could not take it). A SpecError
    names the first that is not."""
    for problem in agent_problems(spec, registry):
        raise SpecError(f"{source}: {problem}")


def check_added_tasks(
    source: object, plan: PlanSpec, tasks: Sequence[Mapping[str, Any]], registry: KnownAgents
) -> None:
    """Tasks added to a running plan are held to the rule its spec was held to when it started:
    each agent they name is declared inline by the `plan` (its spec as started) or known to
    `registry`, and each capability they ask for is offered. Only the new tasks are checked (the
    plan's team and planner were, at its start); a request with a malformed task is left to the
    plan, which refuses it whole, naming the field."""
    try:
        added = [PlanTask.model_validate(task) for task in tasks]
    except ValidationError:
        return
    check_agents(
        source, plan.model_copy(update={"tasks": added, "team": {}, "planner": None}), registry
    )


def agent_problems(spec: AgentSpec, registry: KnownAgents) -> Iterator[str]:
    """Every agent problem of the spec (`field: problem`), in the order `check_agents` meets
    them: routes first, then the agents named, then the agents fallbacks name."""
    yield from _route_problems(spec, registry)
    for place, agent in [*_agents_named(spec), *_fallback_agents(spec)]:
        if not agent:  # none (a step without compensation), or picked by capability at run time
            continue
        if agent in spec.agents:
            if refusal := registry.settings.inline_refusal(agent, spec.agents[agent]):
                yield f"agents.{agent}: {refusal}"
        elif agent not in registry:
            inline = f"; declared inline: {', '.join(sorted(spec.agents))}" if spec.agents else ""
            yield f"{place}: {registry.unknown(agent)}{inline}"


def _routed(spec: AgentSpec) -> list[tuple[str, Routed]]:
    """The items that may name capabilities and a fallback, each with its place."""
    if isinstance(spec, SagaSpec):
        return [(f"steps[{i}]", step) for i, step in enumerate(spec.steps)]
    if isinstance(spec, ChainSpec):
        return [(f"subscriptions[{i}]", sub) for i, sub in enumerate(spec.subscriptions)]
    if isinstance(spec, PlanSpec):
        return [(f"tasks[{i}]", task) for i, task in enumerate(spec.tasks)]
    return []


def _route_problems(spec: AgentSpec, registry: KnownAgents) -> Iterator[str]:
    """Every item, and every fallback, naming capabilities has a candidate among the registry's
    agents."""
    for place, item in _routed(spec):
        asked: list[tuple[str, Routed | FallbackRoute]] = [(place, item)]
        if isinstance(item.fallback, FallbackRoute):
            asked.append((f"{place}.fallback", item.fallback))
        for where, routed in asked:
            route = routed.route
            if route is not None and not candidates(registry.catalogue, route.capabilities):
                field = "capability" if routed.capability is not None else "capabilities"
                problem = no_candidate_message(registry.catalogue, route.capabilities)
                yield f"{where}.{field}: {problem}"


def _fallback_agents(spec: AgentSpec) -> list[tuple[str, str]]:
    """Every agent a fallback names, with its field."""
    return [
        (f"{place}.fallback", item.fallback)
        for place, item in _routed(spec)
        if isinstance(item.fallback, str)
    ]


def _agents_named(spec: AgentSpec) -> list[tuple[str, str | None]]:
    """Every agent the spec runs, with the field that names it."""
    if isinstance(spec, PlanSpec | VoteSpec):
        return list(spec.agents_named())
    if isinstance(spec, SagaSpec):
        named = [(f"steps[{i}].agent", s.agent) for i, s in enumerate(spec.steps)]
        return named + [
            (f"steps[{i}].compensation", s.compensation) for i, s in enumerate(spec.steps)
        ]
    return list(spec.agents_named())
