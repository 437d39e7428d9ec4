"""What flows through a saga: earlier results into each step, the undone step's outcome into its
compensation, the saga events into the saga record and the correlation's chain, and
idempotency keys unique to the saga run and step."""

import asyncio

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.models.chain.spec import ChainSpec
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.starter import api
from coord.worker import build_worker
from tests.agents import RecordingAgents
from tests.conftest import feature_deployment
from tests.helpers import STEPS, failing_at, wait_until
from tests.workers import COORD, run, server_env

SEED_SUCCESS_EVENTS = ["ArtifactBuilt", "TestsPassed", "StagingDeployed", "E2EPassed"]


async def run_recorded(
    client: Client, task_queue: str, spec: SagaSpec, agents: RecordingAgents
) -> SagaState:
    async with build_worker(client, task_queue, agents.registry()):
        handle = await api.start_saga(client, spec, queue=task_queue)
        return await asyncio.wait_for(api.saga_outcome(handle), timeout=60)


async def test_each_step_receives_the_results_of_the_steps_before_it(
    client: Client, task_queue: str
) -> None:
    agents = RecordingAgents()
    state = await run_recorded(client, task_queue, feature_deployment(), agents)
    assert state.status == SagaStatus.COMPLETED
    outputs = agents.outputs()
    for index, step in enumerate(STEPS):
        earlier = {name: outputs[name] for name in STEPS[:index]}
        assert agents.last(step).context.inputs == {"steps": earlier}


async def test_compensations_receive_the_result_or_the_failure_of_the_step_they_undo(
    client: Client, task_queue: str
) -> None:
    agents = RecordingAgents()
    state = await run_recorded(client, task_queue, failing_at("DeployToProduction"), agents)
    assert state.status == SagaStatus.COMPENSATED
    staging = agents.outputs()["DeployToStaging"]
    assert staging is not None
    assert agents.last("RemoveFromStaging").context.inputs == {
        "undoes": {"step": "DeployToStaging", "result": staging}
    }
    assert agents.last("RollbackProduction").context.inputs == {
        "undoes": {
            "step": "DeployToProduction",
            "failure": {
                "type": "temporary_failure",
                "message": "temporary_failure: DeployToProduction failed (injected, attempt 2)",
            },
        }
    }
    rollback = agents.outputs()["RollbackProduction"]
    assert rollback is not None
    assert rollback["undid"] == {"step": "DeployToProduction", "failure": "temporary_failure"}
    remove = agents.outputs()["RemoveFromStaging"]
    assert remove is not None and remove["undid"] == {
        "step": "DeployToStaging",
        "ref": staging["ref"],
    }


def release_chain() -> ChainSpec:
    """A chain that reacts to the saga's `ProductionDeployed`."""
    return ChainSpec.model_validate(
        {
            "name": "release",
            "triggers": ["ProductionDeployed"],
            "terminal_event": "ReleaseAnnounced",
            "subscriptions": [
                {
                    "agent": "product-strategist",
                    "events": "ProductionDeployed",
                    "publishes": {"on_success": "ReleaseAnnounced"},
                }
            ],
        }
    )


async def test_saga_events_reach_the_correlation_chain_and_the_saga_record(
    client: Client, task_queue: str
) -> None:
    spec = feature_deployment()
    async with build_worker(client, task_queue):
        chain = await api.start_chain(
            client, release_chain(), spec.correlation_id, queue=task_queue
        )
        state = await api.saga_outcome(await api.start_saga(client, spec, queue=task_queue))
        await asyncio.wait_for(chain.result(), timeout=60)
        timeline = await api.correlation_events(client, spec.correlation_id)
    saga_events = [*SEED_SUCCESS_EVENTS, "ProductionDeployed"]
    assert [e.event for e in state.events] == saga_events
    assert [e.agent for e in state.events] == [f"/{step}" for step in STEPS]
    assert [e.event_id for e in state.events] == [c.event_id for c in state.completed_steps]
    assert [e.event for e in timeline] == [*saga_events, "ReleaseAnnounced"]
    assert timeline[:5] == [
        entry.model_copy(update={"seq": chained.seq, "position": chained.position})
        for entry, chained in zip(state.events, timeline[:5], strict=True)
    ]
    assert timeline[-1].causation_id == state.events[-1].event_id
    times = [e.time for e in timeline]
    assert times == sorted(times)


async def test_a_failed_saga_records_the_seed_failure_and_compensation_events(
    client: Client, task_queue: str
) -> None:
    spec = failing_at("DeployToProduction")
    state = await run_recorded(client, task_queue, spec, RecordingAgents())
    assert [e.event for e in state.events] == [
        *SEED_SUCCESS_EVENTS,
        "ProductionFailed",
        "RollbackAll",
        "RemoveStaging",
    ]
    failed = state.events[4]
    assert failed.payload["error"]["type"] == "temporary_failure"
    assert [e.causation_id for e in state.events[1:]] == [e.event_id for e in state.events[:-1]]
    history = await api.saga_handle(client, spec.saga_id).fetch_history()
    sent = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
    assert sum(event.event_type == sent for event in history.events) == 0  # no chain: none sent


async def test_a_local_saga_sends_its_chain_each_event_after_the_one_before_it_landed(
    client: Client, task_queue: str
) -> None:
    """Its agents run locally, so it makes several events in one workflow task (its steps run
    ahead together, then its compensations): each is signalled only once the one before it
    reached the chain, so the chain's log holds them in the saga's order."""
    spec = failing_at("DeployToProduction")
    agents = RecordingAgents()
    async with build_worker(client, task_queue, agents.registry()):
        chain = await api.start_chain(
            client, release_chain(), spec.correlation_id, queue=task_queue
        )
        state = await api.saga_outcome(await api.start_saga(client, spec, queue=task_queue))
        timeline = await api.correlation_events(client, spec.correlation_id)
        await chain.cancel()
    assert state.status == SagaStatus.COMPENSATED
    assert [e.event_id for e in timeline] == [e.event_id for e in state.events]
    history = await api.saga_handle(client, spec.saga_id).fetch_history()
    sent = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
    landed = EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED
    signals = [e.event_type for e in history.events if e.event_type in (sent, landed)]
    assert signals == [sent, landed] * len(state.events)


async def test_coord_events_shows_the_saga_events_when_no_chain_runs(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    spec = failing_at("RunE2ETests")
    await run_recorded(client, task_queue, spec, RecordingAgents())
    env = server_env(dev_env, task_queue)
    code, table, err = await run(COORD, "events", spec.correlation_id, env=env)
    assert code == 0, err
    code, followed, err = await run(COORD, "events", spec.correlation_id, "--follow", env=env)
    assert code == 0, err
    assert followed == table
    rows = [[cell.strip() for cell in line.split(" | ")] for line in table.splitlines()[2:]]
    assert [(row[1], row[2], row[3]) for row in rows] == [
        ("ArtifactBuilt", "/BuildArtifact", spec.correlation_id),
        ("TestsPassed", "/RunTests", spec.correlation_id),
        ("StagingDeployed", "/DeployToStaging", spec.correlation_id),
        ("E2EFailed", "/RunE2ETests", spec.correlation_id),
        ("RemoveStaging", "/RemoveFromStaging", spec.correlation_id),
    ]


async def test_idempotency_keys_are_unique_per_saga_run_and_step_and_stable_across_retries(
    client: Client, task_queue: str
) -> None:
    spec = failing_at("DeployToProduction", flaky={"RunTests": 1})
    spec.input["inject"]["fail"].append("RollbackProduction")
    spec.continue_on_compensation_error = True
    first, second = RecordingAgents(), RecordingAgents()
    await run_recorded(client, task_queue, spec, first)
    await run_recorded(client, task_queue, spec, second)
    run_id = (await api.saga_handle(client, spec.saga_id).describe()).run_id
    keys = {run.agent: run.context.idempotency_key for run in second.runs}
    base = f"{spec.workflow_id}/{run_id}"
    assert keys["DeployToStaging"] == f"{base}/DeployToStaging"
    assert keys["RemoveFromStaging"] == f"{base}/DeployToStaging/undo"
    assert keys["RollbackProduction"] == f"{base}/DeployToProduction/undo"
    retried = [run for run in second.runs if run.agent == "RunTests"]
    assert [run.context.attempt for run in retried] == [1, 2]
    assert len({run.context.idempotency_key for run in retried}) == 1
    per_run = [{run.context.idempotency_key for run in agents.runs} for agents in (first, second)]
    assert len(per_run[0]) == len(per_run[1]) == 7  # five steps, two compensations
    assert not per_run[0] & per_run[1]
    async with build_worker(client, task_queue):

        async def both_parked() -> bool:
            return len(await api.dlq_entries(client, queue=task_queue)) == 2

        await wait_until(both_parked)
        rows = await api.dlq_entries(client, queue=task_queue)
        parked = [await api.dlq_entry(client, row.entry_id) for row in rows]
    rollbacks = {
        run.context.idempotency_key
        for agents in (first, second)
        for run in agents.runs
        if run.agent == "RollbackProduction"
    }
    assert {entry.idempotency_key for entry in parked} == rollbacks
    assert all(entry.inputs["undoes"]["step"] == "DeployToProduction" for entry in parked)
