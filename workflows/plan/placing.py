"""Where a plan's agents run, asked of its worker, and whether its correlation's chain runs
(`PlanPlacing`): one local activity as the plan's tasks are known, and one more for the agents
of tasks added while it runs. The plan's lifecycle events wait for the chain's answer: a plan
without a running chain sends it nothing (`ChainAnnouncements.hold`)."""

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.plan.model import PlanModel
    from coord.models.plan.spec import PlanTask
    from coord.models.wire.versions import (
        PLAN_ASKS_ITS_CHAIN_PATCH,
        PLAN_LOCAL_RUNS_PATCH,
        PLAN_PLACES_ADDED_AGENTS_PATCH,
    )
    from coord.workflows._runtime.agent_runs import Placements
    from coord.workflows._runtime.announcements import ChainAnnouncements
    from coord.workflows._runtime.patches import patched


class PlanPlacing:
    """A plan's placements (`placements`, None for runs recorded before PLAN_LOCAL_RUNS_PATCH,
    which ran every agent as an activity task). Made as the run begins: from then on its
    events are held until `place` learns whether the chain runs (PLAN_ASKS_ITS_CHAIN_PATCH)."""

    def __init__(self, announcements: ChainAnnouncements) -> None:
        self._announcements = announcements
        self._asks_chain = patched(PLAN_ASKS_ITS_CHAIN_PATCH)
        if self._asks_chain:
            announcements.hold()
        self.placements: Placements | None = None

    async def place(self, model: PlanModel) -> Placements | None:
        """Where the plan's agents run, asked once its tasks are known: the short in-process
        agents its worker serves run as local activities, every other agent where the plan's
        `dispatch` says, as before; the same question asks whether the correlation's chain
        runs, which releases the plan's events (or drops them)."""
        if patched(PLAN_LOCAL_RUNS_PATCH):
            self.placements = Placements(only_local=True)
            chain_of = model.spec.correlation_id if self._asks_chain else None
            await self.placements.learn((agent for _, agent in model.spec.agents_named()), chain_of)
        if self._asks_chain:
            chain_runs = self.placements.chain_runs if self.placements is not None else None
            self._announcements.chain_known(chain_runs)
        return self.placements

    async def place_added(self, tasks: list[PlanTask]) -> bool:
        """Asks where the agents of tasks added while the plan runs run, those not asked about
        yet, before the tasks join the plan (PLAN_PLACES_ADDED_AGENTS_PATCH); whether it
        asked (the plan may have moved on meanwhile)."""
        if self.placements is None or not patched(PLAN_PLACES_ADDED_AGENTS_PATCH):
            return False
        await self.placements.learn(agent for task in tasks for _, agent in task.agents_named(""))
        return True
