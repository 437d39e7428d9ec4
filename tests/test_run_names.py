"""A plan, vote or aggregator is named by its own id or by its workflow id (`plan-<plan_id>`).
An id that itself starts with the prefix (`plan-42`) reads both ways; it names the run whose own
id it is when there is one, else the workflow id it spells."""

import asyncio
import uuid

from temporalio.client import Client

from coord.models.aggregator.spec import AggregatorStatus
from coord.models.plan.spec import PlanSpec
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import eventually, phase1


def small_plan(plan_id: str) -> PlanSpec:
    return PlanSpec.model_validate(
        {"plan_id": plan_id, "tasks": [{"id": "api", "agent": "backend-architect"}]}
    )


async def run_plans(client: Client, task_queue: str, *plan_ids: str) -> None:
    handles = [await api.start_plan(client, small_plan(p), queue=task_queue) for p in plan_ids]
    await asyncio.wait_for(asyncio.gather(*(api.plan_outcome(h) for h in handles)), 60)


async def test_a_plan_id_that_starts_with_the_prefix_names_its_own_plan(
    client: Client, task_queue: str
) -> None:
    short = uuid.uuid4().hex[:8]
    prefixed, both = f"plan-{short}", f"plan-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue):
        # `short` is named `plan-<short>` by its workflow id; `plan-<short>` is nobody's own id.
        # `both` and `both`'s suffix are both plans: `both` names the one whose own id it is.
        await run_plans(client, task_queue, short, both, both.removeprefix("plan-"))
        ids = {
            name: (await api.plan_state(client, name)).plan_id
            for name in (short, prefixed, both, f"plan-{both}", both.removeprefix("plan-"))
        }
    assert ids == {
        short: short,
        prefixed: short,
        both: both,
        f"plan-{both}": both,
        both.removeprefix("plan-"): both.removeprefix("plan-"),
    }


async def test_an_aggregator_id_that_starts_with_the_prefix_is_cancelled_by_it(
    client: Client, task_queue: str
) -> None:
    spec = phase1(aggregator_id=f"aggregator-{uuid.uuid4().hex[:8]}")
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)
        assert (await api.aggregator_state(client, spec.aggregator_id)).aggregator_id == (
            spec.aggregator_id
        )
        assert await api.cancel_aggregator(client, spec.aggregator_id) == handle.id
        assert handle.id == f"aggregator-{spec.aggregator_id}"

        async def cancelled() -> bool:
            state = await api.aggregator_state(client, spec.aggregator_id)
            return state.status == AggregatorStatus.CANCELLED

        await eventually(cancelled)
