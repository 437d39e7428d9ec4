"""A saga's steps run ahead: when every step runs locally, their first attempts run one after the
other in one local activity (coord.models.mesh.batches, in order), so each step's run is made
before the steps ahead of it have ended. Made here as each step would make it once those before
it succeeded, so that each step, when its turn comes, takes the outcome of the very request it
would have sent: its retries, its command event, caused by the success of the step before it
(whose event id is reserved here), and the results of the steps before it (those run in the same
batch are handed to it there, `batches.handed_on`).

A batch ends before the pivot: a cancel landing while a batch runs is heard when it ends, and
the pivot, the point of no return, must not have run by then."""

from collections.abc import Iterable
from dataclasses import dataclass

from coord.models.events.envelope import new_event_id
from coord.models.mesh.agents import AgentRequest
from coord.models.mesh.retry import RetryConfig
from coord.models.saga.model import SagaModel, saga_event
from coord.models.saga.spec import SagaStep

__all__ = ["StepAhead", "steps_ahead", "steps_to_pivot"]


@dataclass(frozen=True)
class StepAhead:
    """A step's run made before the steps ahead of it ended."""

    index: int
    step: SagaStep
    retry: RetryConfig
    request: AgentRequest


def steps_to_pivot(model: SagaModel, index: int) -> list[tuple[int, SagaStep]]:
    """The steps from `index` up to the next pivot after it, which is left out: those that may
    run ahead together."""
    steps = [(number, step) for number, step in model.steps() if number >= index]
    for count, (_, step) in enumerate(steps[1:], start=1):
        if step.pivot:
            return steps[:count]
    return steps


def steps_ahead(model: SagaModel, steps: Iterable[tuple[int, SagaStep]]) -> list[StepAhead]:
    """The runs of `steps` (named agents, no route) as each would be made once those before it
    have succeeded: retried until success after a pivot before it, its command caused by the
    success of the step before it. The model keeps each command and reserved id
    (`SagaModel.made_ahead`) until the step's turn comes."""
    ahead: list[StepAhead] = []
    forward = model.forward
    state = model.state
    cause = state.events[-1].event_id if state.events else None
    for index, step in steps:
        retry = step.retry.until_success() if forward else step.retry
        agent = model.step_agent(step, None)
        command = saga_event(state, f"{agent}Command", model.spec.input, caused_by=cause)
        success_id = new_event_id()
        model.made_ahead[model.step_key(step)] = (command, success_id)
        ahead.append(StepAhead(index, step, retry, model.step_request(step, agent, retry)))
        cause, forward = success_id, forward or step.pivot
    return ahead
