"""What a plan's agents are sent: a task's run gets the task's input as its event's payload and
its dependencies' results keyed by id; a reviewer or verifier gets what was asked of the task
and its result. A result stored by reference travels as its reference (`run_agent` resolves it
to the data), so no request carries a large result twice."""

from typing import Any

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentRequest
from coord.models.mesh.tiers import TASK_KIND_EFFORT
from coord.models.plan.records import TaskBook
from coord.models.plan.spec import PlanSpec, PlanTask
from coord.models.plan.team import TeamPost


class TaskRequests:
    """The requests of one plan's agent activities, from its spec and its records."""

    def __init__(self, spec: PlanSpec, book: TaskBook, post: TeamPost | None = None) -> None:
        self._spec, self._book = spec, book
        self._post = post or TeamPost()

    def agent_request(
        self, task: PlanTask, round: int, workflow_id: str, extra: dict[str, Any] | None = None
    ) -> AgentRequest:
        """What `run_agent` gets for a task's run: the task's input as the event's payload,
        the results of its dependencies keyed by id (a reference where one was stored by
        reference), and what a round adds (`extra`: a fix round's review notes). A team
        member's run is handed the messages to its member not handed over before."""
        agent = self._book.record(task.id).agent
        inputs = {**self.dependency_results(task), **(extra or {})}
        key = f"{workflow_id}/{task.id}/{round}"
        request = self._request(task, agent, f"{task.id}Requested", workflow_id, key, inputs)
        request.result_limit = self._spec.result_limit
        request.effort = TASK_KIND_EFFORT[task.kind] if task.kind else None
        if task.member is not None:
            request.messages = self._post.deliver(task.member)
        return request

    def reviewer_request(
        self,
        task: PlanTask,
        reviewer: str,
        activity_id: str,
        workflow_id: str,
        inputs: dict[str, Any],
    ) -> AgentRequest:
        """What a reviewer or verifier gets: the task's input (what was asked of it) as the
        event's payload, and its result in `inputs` (see `coord.models.plan.gates`)."""
        key = f"{workflow_id}/{activity_id}"
        return self._request(task, reviewer, f"{task.id}ReviewRequested", workflow_id, key, inputs)

    def _request(
        self,
        task: PlanTask,
        agent: str,
        event_type: str,
        workflow_id: str,
        idempotency_key: str,
        inputs: dict[str, Any],
    ) -> AgentRequest:
        event = EventEnvelope.new(
            event_type,
            workflow_id,
            payload=task.input,
            correlation_id=self._spec.correlation_id,
            priority=task.priority,
        )
        return AgentRequest(
            agent=agent,
            event=event,
            retry_on=task.retry.retry_on,
            config=self._spec.agents.get(agent),
            idempotency_key=idempotency_key,
            inputs=inputs,
            scratchpad=self._spec.shared_scratchpad(),
            rewind_of=self._spec.rewind.of.search_value() if self._spec.rewind else None,
        )

    def dependency_results(self, task: PlanTask) -> dict[str, Any]:
        return {dependency: self.result_input(dependency) for dependency in task.depends_on}

    def result_input(self, task_id: str) -> dict[str, Any]:
        """A task's result as an agent's input: its data, or its reference where it was stored
        by reference (`run_agent` resolves it to the data)."""
        record = self._book.record(task_id)
        if record.result_ref is not None:
            return record.result_ref.as_input()
        return record.result or {}
