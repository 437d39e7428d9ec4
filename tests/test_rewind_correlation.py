"""A whole correlation rewound on the real dev server: its chain, an aggregator and a vote at
work at the rewind point are copied with the slots and ballots they held just before it; the
copies finish with what is sent again and what their agents make anew, no agent that ran
before the point is asked again, and the original is untouched."""

import asyncio
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.activities.kinds.demo import register_demo_agents
from coord.models.aggregator.spec import AggregatorSpec, AggregatorStatus
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import AgentsFile, WorkerSettings
from coord.models.plan.spec import PlanStatus
from coord.models.saga.spec import SagaStatus
from coord.models.vote.spec import VOTE_REQUESTED, VoteSpec, VoteStatus
from coord.models.wire import contract
from coord.models.wire.specs import read_document
from coord.starter import api
from coord.starter.api.rewind_patterns import attached
from coord.starter.exits import ExitCode
from coord.worker import build_worker
from tests.conftest import ROOT, feature_deployment
from tests.helpers import eventually
from tests.test_cli import USER_STORY
from tests.test_rewind import FIXED, counted_plan, counting
from tests.workers import COORD, run, server_env

PHASE1 = ("APIDesignCompleted", "WireframeCompleted", "TestPlanCompleted")
STORY_AGENTS = (
    "backend-architect",
    "ux-designer",
    "test-engineer",
    "python-pro",
    "database-specialist",
    "frontend-specialist",
)


class Team:
    """Python agents that count their calls; `bob` answers once `bob_may_answer` is set."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.bob_may_answer = asyncio.Event()

    def registry(self) -> AgentRegistry:
        registry = AgentRegistry()
        for name in (*STORY_AGENTS, "alice", "bob"):
            registry.register(name)(self._agent(name))
        return registry

    def _agent(self, name: str) -> Any:
        async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
            self.calls[name] += 1
            if event.event.type != VOTE_REQUESTED:
                return {"by": name}
            if name == "bob":
                await self.bob_may_answer.wait()
            return {"approve": True, "reason": f"{name} agrees"}

        return agent


async def rows_of(client: Client, correlation_id: str) -> list[Any]:
    return [row async for row in api.read_log(client, correlation_id)]


async def test_a_correlation_rewound_copies_its_aggregator_and_vote_with_their_past(
    client: Client, task_queue: str
) -> None:
    original, copy = f"whole-{task_queue}", f"whole-copy-{task_queue}"
    team = Team()
    chain = ChainSpec.model_validate(read_document(USER_STORY))
    phase1 = read_document(ROOT / "examples" / "phase1-aggregator.yaml")
    # Without lookback: it hears only what its chain forwards once attached, so the copy's
    # slots before the point come from its past, not from reading the copy's chain.
    aggregator = AggregatorSpec.model_validate(
        {**phase1, "correlation_id": original, "lookback": False}
    )
    vote = VoteSpec(
        vote_id=f"release-{task_queue}",
        correlation_id=original,
        proposal={"release": "2.4.0"},
        voters=["alice", "bob"],
        at_least=2,
    )
    async with build_worker(client, task_queue, team.registry()):
        await api.start_chain(client, chain, original, queue=task_queue)
        await api.start_aggregator(client, aggregator, queue=task_queue)
        await attached(client, original, {aggregator.workflow_id})
        await api.start_vote(client, vote, queue=task_queue)

        async def alice_voted() -> bool:
            return any(
                r.event == "BallotCast" and r.payload.get("voter") == "alice"
                for r in await rows_of(client, original)
            )

        await eventually(alice_voted)
        story = EventEnvelope.new(
            "UserStoryApproved",
            "/product-strategist",
            payload={"story": "reset password"},
            correlation_id=original,
            topic="project.tasks",
        )
        await api.publish(client, story)

        async def phase1_in() -> bool:
            return {r.event for r in await rows_of(client, original)} >= set(PHASE1)

        await eventually(phase1_in)
        team.bob_may_answer.set()
        await asyncio.wait_for(api.chain_handle(client, original).result(), 60)
        decided = await api.vote_outcome(api.vote_handle(client, vote.vote_id))
        before = await rows_of(client, original)
        point = [r for r in before if r.event in PHASE1][1]  # the second of phase 1's three
        calls_before = Counter(team.calls)

        plan = await api.rewind_chain(
            client, original, to=point.event_id, copy_id=copy, queue=task_queue
        )
        ended = await asyncio.wait_for(api.chain_handle(client, copy).result(), 60)
        [aggregator_copy] = [c for c in plan.copies if c.pattern == "aggregator"]
        [vote_copy] = [c for c in plan.copies if c.pattern == "vote"]
        aggregated = api.aggregator_handle(client, aggregator_copy.copy_id)
        joined = await asyncio.wait_for(aggregated.result(), 60)
        voted = await api.vote_outcome(api.vote_handle(client, vote_copy.copy_id))
        after = await rows_of(client, original)
        described = await aggregated.describe()
        compared = await api.diff_correlations(client, original, copy)
    assert decided.status == VoteStatus.DECIDED
    assert ended.status == "completed"
    assert aggregator_copy.taken == 1, "one of phase 1's events was in before the point"
    assert joined.status == AggregatorStatus.COMPLETED and joined.correlation_id == copy
    assert joined.emitted is not None and joined.emitted.event.type == "Phase1CompletedEvent"
    assert vote_copy.taken == 1 and voted.status == VoteStatus.DECIDED
    assert [b.voter for b in voted.ballots] == ["alice", "bob"]
    asked_again = team.calls - calls_before
    assert asked_again["alice"] == 0, "alice's ballot was cast before the point"
    assert asked_again["bob"] == 1, "bob's came after: asked again"
    assert asked_again["backend-architect"] == asked_again["ux-designer"] == 0
    assert after == before, "the original is untouched"
    assert (
        described.typed_search_attributes.get(contract.REWIND_OF) == f"{original}@{point.event_id}"
    )
    outcomes = {(o.pattern, o.left, o.right) for o in compared.outcomes}
    assert ("aggregator", "completed", "completed") in outcomes
    assert ("vote", "decided", "decided") in outcomes


async def test_a_saga_of_the_correlation_is_rewound_to_its_step_at_the_point(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    original, copy = f"deploying-{task_queue}", f"deploying-fixed-{task_queue}"
    runs = tmp_path / "runs.log"
    first_three = ["BuildArtifact", "RunTests", "DeployToStaging"]
    agents = {name: {**counting(runs), "env": {"STEP": name}} for name in first_three}
    failing = {"inject": {"fail": ["DeployToProduction"], "error_type": "invalid_payload"}}
    saga = feature_deployment(input=failing, agents=agents, correlation_id=original)
    chain = ChainSpec.model_validate(read_document(USER_STORY))
    fixed = AgentsFile.model_validate({"agents": {"DeployToProduction": FIXED}}).agents
    allowing = register_demo_agents(AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("aggregator_id: nope\n")
    env = server_env(dev_env, task_queue)
    async with build_worker(client, task_queue, allowing):
        await api.start_chain(client, chain, original, queue=task_queue)
        failed = await api.saga_outcome(await api.start_saga(client, saga, queue=task_queue))
        before = await rows_of(client, original)
        refused = await run(
            COORD, "rewind", original, "--to", "StagingDeployed", "--as", copy,
            "--spec", f"nope={unknown}", env=env,
        )  # fmt: skip
        plan = await api.rewind_chain(
            client, original, to="StagingDeployed", copy_id=copy, agents=fixed, queue=task_queue
        )
        [saga_copy] = plan.copies
        copied = api.saga_handle(client, contract.saga_id_of(saga_copy.copy_id))
        fixed_saga = await api.saga_outcome(copied)
        after = await rows_of(client, original)
        rows = await rows_of(client, copy)
    assert failed.status == SagaStatus.COMPENSATED
    assert refused[0] == ExitCode.REFUSED and "--spec: 'nope' names no chain" in refused[2]
    assert saga_copy.pattern == "saga" and saga_copy.taken == 2, "steps 1-2 came before"
    assert fixed_saga.status == SagaStatus.COMPLETED and fixed_saga.correlation_id == copy
    assert fixed_saga.completed_steps[:2] == failed.completed_steps[:2]
    assert runs.read_text().split() == [*first_three, "DeployToStaging"], "only step 3 re-ran"
    assert after == before, "the original is untouched"
    staged = [r for r in rows if r.event == "StagingDeployed"]
    assert len(staged) == 1, "the copy's own, never the original's re-delivered too"
    assert staged[0].event_id not in {r.event_id for r in before}


async def test_a_plan_of_the_correlation_is_rewound_to_its_tasks_at_the_point(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    original, copy = f"planning-{task_queue}", f"planning-fixed-{task_queue}"
    runs = tmp_path / "runs.log"
    spec = counted_plan(runs).model_copy(update={"correlation_id": original})
    chain = ChainSpec.model_validate(read_document(USER_STORY))
    document = spec.model_dump(mode="json")
    fixed = {**document, "agents": {**document["agents"], "builder": FIXED}}  # --spec PLAN=FILE
    allowing = register_demo_agents(AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    async with build_worker(client, task_queue, allowing):
        await api.start_chain(client, chain, original, queue=task_queue)
        failed = await api.plan_outcome(await api.start_plan(client, spec, queue=task_queue))

        async def announced_its_end() -> bool:
            return any(r.event == "PlanCompleted" for r in await rows_of(client, original))

        await eventually(announced_its_end)
        plan = await api.rewind_chain(
            client,
            original,
            to="TaskFailed",
            copy_id=copy,
            specs={spec.plan_id: fixed},
            queue=task_queue,
        )
        [plan_copy] = plan.copies
        fixed_plan = await api.plan_outcome(api.plan_handle(client, plan_copy.copy_id))
    assert failed.status != PlanStatus.COMPLETED
    assert plan_copy.pattern == "plan" and plan_copy.taken == 1, "research succeeded before"
    assert fixed_plan.status == PlanStatus.COMPLETED and fixed_plan.correlation_id == copy
    assert runs.read_text().split() == ["research", "ship"], "research ran once, in the original"
