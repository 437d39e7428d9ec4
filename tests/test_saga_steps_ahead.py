"""A saga whose steps all run locally runs their first attempts ahead, in order, in one local
activity: each step is handed the results of those before it as if it had run alone, each takes
its outcome in turn and goes on from there (a failed first attempt is retried on its own, and
the steps after it run ahead again), a batch ends before the pivot, and a cancel landing while a
batch runs is recorded when it ends, so that it still keeps the pivot from running."""

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentResult
from coord.models.mesh.batches import (
    BATCH_MARGIN,
    IN_ORDER_FOR,
    BatchedRun,
    LocalBatch,
    batch_timeout,
    goes_on_after,
    handed_on,
)
from coord.models.saga.ahead import steps_ahead, steps_to_pivot
from coord.models.saga.model import SagaModel
from coord.models.saga.spec import SagaStatus
from coord.starter import api
from coord.worker import build_worker
from tests.agents import RecordingAgents
from tests.conftest import feature_deployment
from tests.helpers import FAST_RETRY, STEPS, wait_until
from tests.test_agent_placement import (
    _history,
    _replays_from_every_task,
    local_activity_types,
    local_agent_runs,
)
from tests.test_saga_cancel import cancel_heard


def _begun(**overrides: Any) -> SagaModel:
    spec = feature_deployment(**overrides)
    model = SagaModel(spec.saga_id)
    model.begin(spec, workflow_id=spec.workflow_id, first_run_id="run-1")
    return model


def test_steps_made_ahead_are_the_requests_each_step_makes_once_those_before_succeeded() -> None:
    """The command of each step is caused by the success of the one before, under the id
    reserved for it; handed the results of the steps before, a request made ahead is the one the
    step makes when its turn comes."""
    model = _begun()
    ahead = steps_ahead(model, list(model.steps()))
    assert [run.step.name for run in ahead] == STEPS
    reserved = [model.made_ahead[model.step_key(run.step)][1] for run in ahead]
    assert ahead[0].request.event.event.causation_id is None
    for success_id, run in zip(reserved, ahead[1:], strict=False):
        assert run.request.event.event.causation_id == success_id
    results: dict[str, Any] = {}
    for run, success_id in zip(ahead, reserved, strict=True):
        retry = model.step_started(run.index, run.step)
        made = model.step_request(run.step, model.step_agent(run.step, None), retry)
        assert made == handed_on(run.request, results)
        data = {"done": run.step.name}
        assert model.step_succeeded(run.index, run.step, data, None).event.id == success_id
        results[run.step.name] = data
    assert model.made_ahead == {}, "each reserved id taken"


def test_steps_run_ahead_together_up_to_the_pivot_which_begins_the_next_batch() -> None:
    model = _begun()
    model.spec.steps[2].pivot = True
    assert [index for index, _ in steps_to_pivot(model, 1)] == [1, 2]
    assert [index for index, _ in steps_to_pivot(model, 3)] == [3, 4, 5]
    assert [index for index, _ in steps_to_pivot(model, 4)] == [4, 5]
    pivot, *after = steps_ahead(model, steps_to_pivot(model, 3))
    assert pivot.retry == pivot.step.retry, "the pivot's own retries"
    assert all(run.retry == run.step.retry.until_success() for run in after), "then until success"


def test_an_in_order_batch_takes_the_sum_of_its_runs_timeouts() -> None:
    model = _begun()
    runs = [
        BatchedRun(request=run.request, timeout_s=seconds)
        for run, seconds in zip(steps_ahead(model, list(model.steps())), (1.5, 2.0), strict=False)
    ]
    in_order = LocalBatch(runs=runs, in_order=True)
    assert batch_timeout(in_order) == timedelta(seconds=3.5) + BATCH_MARGIN
    assert batch_timeout(LocalBatch(runs=runs)) == timedelta(seconds=2) + BATCH_MARGIN


def test_a_batch_in_order_stops_after_a_result_it_cannot_hand_on() -> None:
    assert goes_on_after(AgentResult(agent="a", data={"x": 1}))
    used = AgentResult(agent="a", metadata={"usage": {"input_tokens": 3, "output_tokens": 1}})
    assert not goes_on_after(used), "the next run is sent what is left of a budget"


async def test_a_failed_first_attempt_is_retried_alone_and_the_steps_after_run_ahead_again(
    client: Client, task_queue: str
) -> None:
    """DeployToStaging fails its first attempt in the first batch: it is retried on its own,
    after its policy's wait, and the two steps after it run ahead in a second batch; every step
    is handed the results of all those before it, and the run replays from every task."""
    agents = RecordingAgents()
    spec = feature_deployment(input={"inject": {"flaky": {"DeployToStaging": 1}}})
    for step in spec.steps:
        step.retry = step.retry.model_validate(FAST_RETRY)
    async with build_worker(client, task_queue, agents.registry()):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    assert [step.name for step in state.completed_steps] == STEPS
    events = await _history(handle)
    kinds = [kind for kind in local_activity_types(events) if kind != "place_agents_with_chain"]
    assert kinds == ["run_agents", "run_agent", "run_agents"]
    assert local_agent_runs(events) == 1 + 3 + 1 + 2, "the placements, two batches, one retry"
    deploy = agents.last("DeployToProduction").context
    assert list(deploy.inputs["steps"]) == STEPS[:-1], "handed every result before it"
    assert deploy.inputs["steps"]["DeployToStaging"] == agents.outputs()["DeployToStaging"]
    causes = [row.causation_id for row in state.events]
    assert causes[1:] == [row.event_id for row in state.events[:-1]], "one causal line"
    await _replays_from_every_task(await handle.fetch_history())


async def test_a_batch_ends_after_the_step_that_takes_it_past_a_second(
    client: Client, task_queue: str
) -> None:
    """BuildArtifact takes longer than IN_ORDER_FOR: its batch ends with it (its outcome then
    recorded while the next batch runs), and the steps after it run ahead in another."""
    agents = RecordingAgents()
    slow = IN_ORDER_FOR.total_seconds() + 0.1
    spec = feature_deployment(input={"inject": {"slow": {"BuildArtifact": slow}}})
    async with build_worker(client, task_queue, agents.registry()):
        handle = await api.start_saga(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert state.status == SagaStatus.COMPLETED
    events = await _history(handle)
    kinds = [kind for kind in local_activity_types(events) if kind != "place_agents_with_chain"]
    assert len(kinds) >= 2 and set(kinds) == {"run_agents"}, kinds
    assert local_agent_runs(events) == 1 + len(STEPS), "the placements, each step once"


async def test_a_cancel_landing_while_steps_run_ahead_still_keeps_the_pivot_from_running(
    client: Client, task_queue: str
) -> None:
    """The pivot is the third step, so the first batch is the two steps before it. RunTests
    holds its batch past the workflow task's heartbeat (8 s), where the workflow hears the
    cancel: it is recorded when the batch ends, as landing during RunTests, and the stack is
    unwound; the pivot never ran."""
    running, release = asyncio.Event(), asyncio.Event()
    agents = RecordingAgents()

    async def slow_tests(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        running.set()
        await release.wait()
        return {"passed": True}

    spec = feature_deployment()
    spec.steps[2].pivot = True
    async with build_worker(client, task_queue, agents.registry({"RunTests": slow_tests}, "local")):
        handle = await api.start_saga(client, spec, queue=task_queue)
        await asyncio.wait_for(running.wait(), 30)
        await handle.cancel()
        await wait_until(partial(cancel_heard, handle), timeout=60)
        release.set()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 30)
    state = await api.saga_state(client, spec.saga_id)
    assert state.status == SagaStatus.COMPENSATED
    assert state.cancel is not None and state.cancel.effect == "unwind"
    assert state.cancel.during_step == 2
    assert [step.name for step in state.completed_steps] == STEPS[:2]
    assert "DeployToStaging" not in {run.agent for run in agents.runs}, "the pivot never ran"
