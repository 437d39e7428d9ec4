"""A saga terminated (an operator's `temporal workflow terminate`, the server past a limit) or
timed out (an execution timeout its starter set) keeps no record of its own; its `state` query's
says how it ended. Read after it ended in the middle of a workflow task (its first, or one
running its local agents), it is not queried: a replay up to its end would run that task's work
on, calling local agents again, or find no task to answer from; its record says how it ended."""

import asyncio

from temporalio.client import Client
from temporalio.exceptions import ApplicationError, TerminatedError, TimeoutError, TimeoutType

from coord.models.saga.spec import SagaState, SagaStatus
from coord.starter import api
from coord.starter.api.sagas import ended_by
from coord.worker import build_worker
from tests.agents import RecordingAgents
from tests.conftest import feature_deployment
from tests.helpers import STEPS, wait_until


async def test_a_saga_terminated_while_its_local_agents_ran_is_read_without_running_them(
    client: Client, task_queue: str
) -> None:
    spec = feature_deployment()
    spec.input["inject"] = {"slow": {"RunTests": 2}}
    agents = RecordingAgents()
    async with build_worker(client, task_queue, agents.registry()):
        handle = await api.start_saga(client, spec, queue=task_queue)

        async def testing() -> bool:
            return any(run.agent == "RunTests" for run in agents.runs)

        await wait_until(testing)
        await handle.terminate(reason="operator stop")

        async def batch_ended() -> bool:  # the batch in flight runs on to its end in the worker
            return len(agents.runs) == len(STEPS)

        await wait_until(batch_ended)
        ran = len(agents.runs)
        state = await asyncio.wait_for(api.saga_state(client, spec.saga_id), 30)
        outcome = await asyncio.wait_for(api.saga_outcome(handle, client), 30)
    assert len(agents.runs) == ran, "reading it ran no agent again"
    assert state == outcome
    assert (state.saga_id, state.correlation_id) == (spec.saga_id, spec.correlation_id)
    assert state.status == SagaStatus.FAILED
    assert state.failure_reason == (
        "terminated: operator stop (during a workflow task: its steps are not read, which "
        "would run them again); nothing was compensated"
    )


async def test_a_saga_terminated_before_its_first_workflow_task_is_read_without_a_worker(
    client: Client, task_queue: str
) -> None:
    """No worker ever took it up, and none runs to read it: nothing ran, as its record says."""
    spec = feature_deployment()
    handle = await api.start_saga(client, spec, queue=task_queue)  # no worker polls the queue
    await handle.terminate(reason="never mind")
    state = await asyncio.wait_for(api.saga_state(client, spec.saga_id), 10)
    assert state.status == SagaStatus.FAILED
    assert state.failure_reason is not None
    assert state.failure_reason.startswith("terminated: never mind (during a workflow task")
    assert state.completed_steps == [] and state.compensations == []


def test_a_sagaended_by_says_how() -> None:
    """Terminated, or past an execution timeout its starter set (the saga fits its runs'
    timeouts into it, so it rarely gets there): failed, saying how, nothing compensated."""
    terminated = ended_by(TerminatedError("operator stop"))
    timeout = TimeoutError("timed out", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    timed_out = ended_by(timeout)
    assert terminated == "terminated: operator stop"
    assert timed_out == "timed out: the run passed its execution timeout"
    assert ended_by(ApplicationError("saga_failed")) is None, "a failure carries its record"
    state = SagaState(saga_id="s").cut_short("terminated: operator stop")
    assert state.status == SagaStatus.FAILED
    assert state.failure_reason == "terminated: operator stop; nothing was compensated"
