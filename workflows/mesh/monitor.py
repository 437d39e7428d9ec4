"""The `AgentMonitor` workflow: one long-lived entity per deployment (id `agent-monitor-<queue>`, on
its coordinator queue), started by every `coord worker` that serves workflows, the first start
winning. Every few seconds it reads the agents' health from the server; each change between two
readings (`AgentMonitorState.observe`) is published as an `AgentHealthEvent` into the running
chains whose subscriptions use the agent. Its history stays short: it continues as new with its
state. Modelled on samples-python's safe_message_handlers entity: no handler may be running
when it continues as new."""

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.mesh.monitor import (
        READ_INTERVAL,
        AgentMonitorState,
        HealthPublication,
        HealthRead,
        HealthTransition,
    )
    from coord.models.wire.contract import (
        AGENT_MONITOR_WORKFLOW,
        HANDLER_TEXT,
        STATE_QUERY,
        FailureType,
        failure,
        failure_message,
    )
    from coord.models.wire.specs import SpecError
    from coord.models.wire.versions import PARKS_UNKNOWN_SIGNALS_PATCH
    from coord.workflows._runtime import calls
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.common import NO_INPUT, PlainInput, decode_input
    from coord.workflows._runtime.unknown_signals import ParksUnknownSignals

READ_TIMEOUT = timedelta(seconds=5)
READ_RETRY = RetryPolicy(maximum_attempts=2)
"""A reading that fails twice is skipped (the next comes an interval later), never the monitor's
failure: the agents' health is read again from scratch each time."""
PUBLISH_TIMEOUT = timedelta(seconds=30)
PUBLISH_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=10))
HISTORY_BUDGET = 1000
"""History events after which a run continues as new (a reading is about ten): a worker that
lost the run from its cache replays at most this much."""


@workflow.defn(name=AGENT_MONITOR_WORKFLOW, sandboxed=False)
class AgentMonitor(
    ParksUnknownSignals,
    kind="an agent monitor",
    patch=PARKS_UNKNOWN_SIGNALS_PATCH,
    asked=True,
    metaclass=SurplusStartArguments,
):
    """Not sandboxed, as every workflow of the project (`coord.infra.workflow_runner` says
    why): it imports only pure models."""

    @workflow.init
    def __init__(self, raw_state: PlainInput = NO_INPUT) -> None:
        """Started without input (a fresh monitor), or with the state a previous run carried."""
        self._input_error: str | None = None
        self._state = AgentMonitorState()
        if raw_state is NO_INPUT:
            return
        try:
            self._state = decode_input(AgentMonitorState, raw_state, "agent monitor state")
        except SpecError as error:
            self._input_error = str(error)

    @workflow.run
    async def run(self, raw_state: PlainInput = NO_INPUT) -> None:
        if self._input_error:
            raise failure(FailureType.INVALID_INPUT, self._input_error, non_retryable=True)
        while not self._continue_as_new_due():
            await self._observe()
            await workflow.sleep(READ_INTERVAL, summary="next reading")
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self._state)

    @workflow.query(name=STATE_QUERY, description=HANDLER_TEXT[STATE_QUERY])
    def state(self) -> AgentMonitorState:
        return self._state

    def _continue_as_new_due(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= HISTORY_BUDGET
        )

    async def _observe(self) -> None:
        """One reading, and every transition it shows published (the agents' at once)."""
        home = workflow.info().task_queue
        read = HealthRead(home=home, agents=self._state.watched(workflow.now()))
        try:
            reading = await calls.execute(
                refs.READ_AGENT_HEALTH,
                read,
                start_to_close_timeout=READ_TIMEOUT,
                retry_policy=READ_RETRY,
                summary="read agent health",
            )
        except ActivityError as error:
            workflow.logger.warning("agent health not read", extra={"error": str(error.cause)})
            return
        by_agent: dict[str, list[HealthTransition]] = {}
        for transition in self._state.observe(reading):
            by_agent.setdefault(transition.agent, []).append(transition)
        await asyncio.gather(*(self._publish_in_order(home, each) for each in by_agent.values()))

    async def _publish_in_order(self, home: str, transitions: list[HealthTransition]) -> None:
        """One agent's transitions, one after the other, so its chains get them in order."""
        for transition in transitions:
            await self._publish(home, transition)

    async def _publish(self, home: str, transition: HealthTransition) -> None:
        """Delivered to the chains using the agent; one that cannot be delivered after the
        retries is logged (the chains then learn the agent's state from the next transition)."""
        publication = HealthPublication(
            home=home, agent=transition.agent, event=transition.envelope()
        )
        summary = f"{transition.agent}: {transition.previous} → {transition.status}"
        try:
            delivery = await calls.execute(
                refs.PUBLISH_AGENT_HEALTH,
                publication,
                start_to_close_timeout=PUBLISH_TIMEOUT,
                retry_policy=PUBLISH_RETRY,
                summary=summary,
            )
        except ActivityError as error:
            failed = {"transition": summary, "error": failure_message(error)}
            workflow.logger.warning("AgentHealth event not delivered", extra=failed)
            return
        published = {"transition": summary, "chains": len(delivery.reached)}
        workflow.logger.info("AgentHealth event published", extra=published)
