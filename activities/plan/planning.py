"""What a plan's planner is told and how its graph is checked, on the worker: the agents it
may give tasks to (the worker's catalogue: every agent declared to it, with its capabilities),
and the planned graph's agents checked by the one rule every spec is checked by where it enters
(`coord.models.checks.check_agents`), so a planned graph meets the check a written one meets
in `coord plan start`."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from temporalio import activity

from coord.models import calls as refs
from coord.models.checks import agent_problems
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.config import WorkerSettings
from coord.models.mesh.declared import unknown_agent
from coord.models.plan.spec import PlanSpec


class PlanningActivities:
    def __init__(self, registry: AgentRegistry) -> None:
        self._registry = registry

    @activity.defn(name=refs.PLANNING_CATALOGUE.name)
    async def planning_catalogue(self, plan: str) -> dict[str, list[str]]:
        """Every agent declared to this worker (`plan` names who asks, for the logs) and the
        capabilities each offers."""
        activity.logger.info("planning catalogue", extra={"plan": plan})
        return {name: list(capabilities) for name, capabilities in self._registry.catalogue.items()}

    @activity.defn(name=refs.CHECK_PLAN_AGENTS.name)
    async def check_plan_agents(self, spec: PlanSpec) -> str | None:
        """The graph's first agent problem (`tasks[1].agent: ...`), or None. Its planner is
        not checked: it has answered, from wherever it is served."""
        graph = spec.model_copy(update={"planner": None})
        return next(agent_problems(graph, Catalogued(self._registry)), None)


@dataclass(frozen=True)
class Catalogued:
    """The agents declared to the worker, served here or not (`coord worker --only` serves
    some; a plan's runs go to each agent's own queue, served wherever it is)."""

    registry: AgentRegistry

    @property
    def settings(self) -> WorkerSettings:
        return self.registry.settings

    @property
    def catalogue(self) -> Mapping[str, Sequence[str]]:
        return self.registry.catalogue

    def unknown(self, name: str) -> str:
        return unknown_agent(name, self.registry.catalogue)

    def __contains__(self, name: object) -> bool:
        return name in self.registry.catalogue
