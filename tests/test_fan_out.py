"""Fan-outs within a byte budget per workflow task, on the real dev server: a plan's wave of forty
tasks with 110 KB inputs, a vote of forty voters on a 110 KB proposal, and a 110 KB event that
forty chain subscriptions take at once. Each 110 KB payload
stays under the payload store's threshold, so it travels inline; forty of them in one workflow
task are 4.4 MB, which the server refuses (the run is terminated, with no record). Paced, each
workflow task schedules at most the budget (`BYTES_PER_WORKFLOW_TASK`) and both complete with
their record."""

import asyncio
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from coord.infra.payload_store import DEFAULT_THRESHOLD
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import PythonAgent
from coord.models.plan.spec import PlanSpec, PlanStatus, TaskState
from coord.models.vote.spec import Choice, VoteSpec, VoteStatus
from coord.models.wire.sizes import BYTES_PER_WORKFLOW_TASK
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import event as new_event
from tests.helpers import run_chain, task_failures

WIDTH = 40
PADDING = "x" * (110 * 1024)
VOTERS = [f"voter-{i}" for i in range(WIDTH)]


def wide_chain(name: str, width: int, **settings: Any) -> ChainSpec:
    """A chain whose `width` subscriptions all take `Big`, each publishing `Done`, run by
    `worker`; `settings` are added to each (None drops one: `agent=None` for a vote)."""
    subscription = {"agent": "worker", "events": ["Big"], "publishes": {"on_success": "Done"}}
    subscription = {k: v for k, v in {**subscription, **settings}.items() if v is not None}
    subscriptions = [{"name": f"s{i}", **subscription} for i in range(width)]
    return ChainSpec.model_validate(
        {
            "name": name,
            "triggers": ["Big"],
            "max_concurrency": width,
            "alerts": None,
            "subscriptions": subscriptions,
        }
    )


def agents(*, remote: bool = False) -> AgentRegistry:
    """`worker` answers with the index of its task; every voter approves. `remote`: `worker`
    is declared `execution: remote`, so a chain or a plan runs it as activity tasks, whose inputs
    it paces (a local run's input never reaches the server)."""
    registry = AgentRegistry()
    declared = PythonAgent(kind="python", callable=f"{__name__}:agents", execution="remote")

    @registry.register("worker", "python", declared if remote else None)
    async def worker(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {"i": event.payload.get("i")}

    async def approve(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {"approve": True, "reason": f"read {len(event.payload['padding'])} bytes"}

    for voter in VOTERS:
        registry.register(voter)(approve)
    return registry


async def scheduled_bytes_per_task(client: Client, workflow_id: str) -> list[int]:
    """The input bytes of the activities and child workflows (a chain's `ChainRun`s) each
    workflow task started, task by task, in every run of the workflow (a chain continues as
    new)."""
    described = await client.get_workflow_handle(workflow_id).describe()
    run_id = described.raw_description.workflow_execution_info.first_run_id
    per_task: Counter[tuple[str, int]] = Counter()
    while run_id:
        run, run_id = client.get_workflow_handle(workflow_id, run_id=run_id), ""
        async for event in run.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled = event.activity_task_scheduled_event_attributes
                task = (run.run_id or "", scheduled.workflow_task_completed_event_id)
                per_task[task] += scheduled.input.ByteSize()
            if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
                child = event.start_child_workflow_execution_initiated_event_attributes
                task = (run.run_id or "", child.workflow_task_completed_event_id)
                per_task[task] += child.input.ByteSize()
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                attributes = event.workflow_execution_continued_as_new_event_attributes
                run_id = attributes.new_execution_run_id
    return list(per_task.values())


def within_the_budget(per_task: list[int], one: int = len(PADDING)) -> None:
    """More than the server takes in one workflow task in all, each workflow task within the
    budget (one input alone may pass it, by less than one input: `one` bytes)."""
    assert one < DEFAULT_THRESHOLD, "each payload travels inline"
    assert sum(per_task) > 4 * 1024 * 1024, "more than the server takes in one workflow task"
    assert max(per_task) <= BYTES_PER_WORKFLOW_TASK + one + 2048, per_task


async def test_a_wave_of_forty_tasks_with_110_kb_inputs_is_paced_and_completes(
    client: Client, task_queue: str
) -> None:
    tasks = [
        {"id": f"t{i}", "agent": "worker", "input": {"i": i, "padding": PADDING}}
        for i in range(WIDTH)
    ]
    spec = PlanSpec.model_validate(
        {"plan_id": f"wide-{uuid.uuid4().hex[:8]}", "max_workers": WIDTH, "tasks": tasks}
    )
    async with build_worker(client, task_queue, agents(remote=True), only=["worker"]):
        handle = await api.start_plan(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.plan_outcome(handle), 120)
        per_task = await scheduled_bytes_per_task(client, handle.id)
    assert state.status == PlanStatus.COMPLETED, state.summary
    assert [task.result for task in state.tasks] == [{"i": i} for i in range(WIDTH)]
    assert all(task.state == TaskState.SUCCEEDED for task in state.tasks)
    within_the_budget(per_task)
    assert await task_failures(handle) == []


async def wide_vote(client: Client, task_queue: str, voters: list[str]) -> list[int]:
    """A vote of `voters` on a 110 KB proposal, all to approve: decided with every ballot; the
    input bytes its workflow tasks scheduled, task by task."""
    spec = VoteSpec.model_validate(
        {
            "vote_id": f"wide-{len(voters)}-{uuid.uuid4().hex[:8]}",
            "proposal": {"padding": PADDING},
            "voters": voters,
            "at_least": len(voters),
        }
    )
    async with build_worker(client, task_queue, agents(), only=voters):
        handle = await api.start_vote(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.vote_outcome(handle), 120)
        per_task = await scheduled_bytes_per_task(client, handle.id)
    assert state.status == VoteStatus.DECIDED, state.summary
    assert sorted(ballot.voter for ballot in state.ballots) == sorted(voters)
    assert {ballot.choice for ballot in state.ballots} == {Choice.APPROVE}
    assert await task_failures(handle) == []
    return per_task


async def test_a_vote_of_forty_voters_on_a_110_kb_proposal_is_paced_and_decided(
    client: Client, task_queue: str
) -> None:
    within_the_budget(await wide_vote(client, task_queue, VOTERS))


async def test_a_vote_just_past_the_budget_starts_its_last_voter_in_the_next_task(
    client: Client, task_queue: str
) -> None:
    """Five ballots of 110 KB are just over the budget: four go out together, the fifth in the
    next workflow task (the smallest run a recorded history holds the pacing with)."""
    per_task = await wide_vote(client, task_queue, VOTERS[:5])
    assert [size // len(PADDING) for size in per_task] == [4, 1]


async def test_an_event_forty_subscriptions_take_is_paced_and_every_run_completes(
    client: Client, task_queue: str
) -> None:
    spec = wide_chain("wide", WIDTH)
    async with build_worker(client, task_queue, agents(remote=True), only=["worker"]):
        big = new_event("", "Big", blob=PADDING)
        state, timeline = await run_chain(client, task_queue, spec, [big])
        handle = api.chain_handle(client, state.correlation_id)
        per_task = await scheduled_bytes_per_task(client, handle.id)
    assert [entry.event for entry in timeline].count("Done") == WIDTH
    assert state.dead_lettered == 0
    within_the_budget(per_task)
    assert await task_failures(handle) == []
