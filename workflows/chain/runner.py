"""Starting a chain's agent runs and votes: in the chain (the fast path, through
`start_agent_run` like every workflow's agent runs) or handed to a `ChainRun` of their own, and
taking the outcome a `ChainRun` signals back. What each outcome publishes or parks is the
model's (`ChainRuns`, which answers the run lifecycle)."""

import asyncio
from functools import partial

from temporalio import workflow
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from coord.models.chain.model import ChainModel
    from coord.models.chain.run import ChainRunInput, RunOutcome
    from coord.models.chain.spec import AgentRun, Subscription
    from coord.models.mesh.agents import AgentRequest
    from coord.models.mesh.assignment import Assignment
    from coord.models.mesh.lifecycle import RunFailure
    from coord.models.mesh.runs import RunDetour
    from coord.models.vote.spec import VoteSpec, VoteState
    from coord.models.wire.contract import (
        AGENTS,
        CHAIN_RUN_WORKFLOW,
        FailureType,
        agent_search_values,
        chain_run_workflow_id,
        chain_workflow_id,
        failure_message,
        failure_type_of,
    )
    from coord.models.wire.sizes import json_size
    from coord.models.wire.specs import SpecError
    from coord.models.wire.versions import AGENTS_ATTRIBUTE_PATCH
    from coord.workflows._runtime import metrics
    from coord.workflows._runtime.agent_runs import (
        Placements,
        assign_agent,
        declared_settings,
        start_agent_run,
    )
    from coord.workflows._runtime.child_votes import VOTE_FAILED, hold_vote, vote_failure
    from coord.workflows._runtime.common import attempts
    from coord.workflows.chain.boundary import Outbound


class ChainRunner:
    """Dispatches the model's queued runs and reports each one's stages to it."""

    def __init__(self, model: ChainModel, outbound: Outbound) -> None:
        self._model = model
        self._outbound = outbound
        self._announced: list[str] | None = None
        self._placements = Placements(local=False)
        """Where the chain's agents run, asked of its worker at its first run here: on the
        chain's own queue when its worker serves them (never as local activities)."""

    def dispatch(self) -> None:
        while self._model.pacing.dispatchable():
            seq, run = self._model.runs.start_next()
            metrics.chain_run_dispatched(run.agent)
            voting = self._model.spec.subscription(run.subscription).vote is not None
            run_work = self._run_vote if voting else self._run_agent
            asyncio.create_task(run_work(seq, run))  # noqa: RUF006 - tracked in the model

    async def _run_agent(self, seq: int, run: AgentRun) -> None:
        """The agent picked (by capability), its `on_start` published, then the agent run here
        (the fast path, and every run recorded before the hand-over), or handed to a `ChainRun`
        when its subscription says so or the chain is due to continue as new."""
        runs = self._model.runs
        subscription = self._model.spec.subscription(run.subscription)
        retry_policy = subscription.retry.to_retry_policy()
        try:
            try:
                await self._assign(run, subscription)
                runs.run_started(seq, workflow.now())
                request = runs.agent_request(run)
                if self._model.pacing.hands_over_run(subscription):
                    await self._hand_over(seq, self._run_input(seq, run, request=request))
                    return
                await self._outbound.fan_out.room(json_size(request))
                await self._placements.learn(self._model.spec.served_agents())
                settings = declared_settings(
                    subscription,
                    f"{run.agent} ← {run.trigger.event.type}",
                    inline_agents=self._model.spec.agents,
                    room=self._outbound.fan_out.room,
                    placements=self._placements,
                )
                result = await start_agent_run(request, settings, partial(self._detoured, run))
            except ActivityError as error:
                failed = RunFailure(
                    type=failure_type_of(error),
                    message=failure_message(error),
                    attempts=attempts(error, retry_policy),
                )
                runs.run_failed(seq, workflow.now(), failed)
                await self._outbound.park_now()
                return
            runs.run_succeeded(seq, workflow.now(), result)
            self._outbound.flush()
        finally:
            runs.finish(seq)

    async def _run_vote(self, seq: int, run: AgentRun) -> None:
        """A vote subscription's run: a `Vote` on the event's payload, counted as a run and
        handed to a `ChainRun` (runs recorded before held it here, and continue-as-new waited
        for it); its outcome is published. One that gives no outcome (its proposal refused,
        failed, or cancelled on its own) is published as the failure event and parked like a
        failed agent run, to be run again by a `rerun`."""
        runs = self._model.runs
        failed: tuple[str, str]
        try:
            runs.run_started(seq, workflow.now())
            try:
                vote = runs.vote_spec(run)
                if self._model.pacing.hands_over:
                    await self._hand_over(seq, self._run_input(seq, run, vote=vote))
                    return
                await self._outbound.fan_out.room(json_size(vote))
                outcome: VoteState = await hold_vote(vote, run.subscription)
            except SpecError as error:
                failed = (FailureType.INVALID_PAYLOAD, str(error))
            except VOTE_FAILED as error:
                failed = vote_failure(error)
            else:
                runs.run_succeeded(seq, workflow.now(), outcome)
                self._outbound.flush()
                return
            runs.run_failed(seq, workflow.now(), RunFailure(type=failed[0], message=failed[1]))
            await self._outbound.park_now()
        finally:
            runs.finish(seq)

    def take_outcome(self, outcome: RunOutcome) -> None:
        """A run handed to a `ChainRun` is over (this run or an earlier one of the chain handed
        it over): its detours and outcome are taken as a run's here would be; one naming no
        run in flight (sent twice, or by someone else) is rejected and parked."""
        run = self._model.runs.landed(outcome)
        if run is not None:
            for detoured in outcome.detours:
                self._detoured(run, detoured.detour, detoured.assignment)
            self._model.runs.take_outcome(outcome, workflow.now())
        self._outbound.flush()

    def _run_input(
        self,
        seq: int,
        run: AgentRun,
        *,
        request: AgentRequest | None = None,
        vote: VoteSpec | None = None,
    ) -> ChainRunInput:
        """What the run's `ChainRun` starts with. The chain's id comes from its correlation id
        (its input), not from where the run executes, so that its commands (the `ChainRun`'s
        id) are the same wherever its history is replayed."""
        summary = f"{run.agent} ← {run.trigger.event.type}" if request else run.subscription
        return ChainRunInput(
            chain_id=chain_workflow_id(self._model.record.state.correlation_id),
            seq=seq,
            subscription=self._model.spec.subscription(run.subscription),
            summary=summary,
            inline_agents=self._model.spec.agents,
            request=request,
            vote=vote,
        )

    async def _hand_over(self, seq: int, run_input: ChainRunInput) -> None:
        """The run goes to a `ChainRun` (abandoned when this run closes, so it outlives a
        continue-as-new), in flight from now, within the workflow task's budget of commands;
        continue-as-new waits only for its start. A `ChainRun` of this number already running
        (a chain reset) is the same run: its outcome will come."""
        self._model.runs.hand_over(seq)
        try:
            started = run_input.model_dump(mode="json")
            await self._outbound.fan_out.room(json_size(started))
            await workflow.start_child_workflow(
                CHAIN_RUN_WORKFLOW,
                started,
                id=chain_run_workflow_id(run_input.chain_id, seq),
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                static_summary=run_input.summary,
            )
        except WorkflowAlreadyStartedError:
            workflow.logger.warning("chain run already started", extra={"seq": seq})
        finally:
            self._model.runs.confirmed(seq)

    def _detoured(self, run: AgentRun, detour: RunDetour, assignment: Assignment | None) -> None:
        """A run that waited for its agent or went elsewhere: in the chain's record; a run
        that went to another agent publishes as that agent."""
        self._model.runs.run_detoured(run, detour, assignment)
        workflow.set_current_details(self._model.details())
        if assignment is not None:
            self.announce_agents()

    async def _assign(self, run: AgentRun, subscription: Subscription) -> None:
        """A run of a subscription naming capabilities goes to the agent picked for it (before
        its `on_start`, which names the agent); recorded in the chain's state."""
        assignment = await assign_agent(subscription.route, subscription.name)
        if assignment is not None:
            self._model.runs.run_assigned(run, assignment)
            workflow.set_current_details(self._model.details())
            self.announce_agents()

    def announce_agents(self) -> None:
        """`CoordAgents`, where the agent monitor finds the chains to tell of an agent's health:
        the agents its subscriptions name, and those recently picked for its runs by capability
        (upserted when one is new). Runs recorded before named none."""
        if not workflow.patched(AGENTS_ATTRIBUTE_PATCH):
            return
        picked = [each.assignment.agent for each in self._model.record.state.assignments]
        agents = agent_search_values([*self._model.spec.served_agents(), *picked])
        if agents != self._announced:
            self._announced = agents
            workflow.upsert_search_attributes([AGENTS.value_set(agents)])
