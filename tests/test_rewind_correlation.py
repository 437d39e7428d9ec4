"""A whole correlation rewound on the real dev server: its chain, an aggregator and a vote at
work at the rewind point are copied with the slots and ballots they held just before it; the
copies finish with what is sent again and what their agents make anew, no agent that ran
before the point is asked again, and the original is untouched."""

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client

from coord.models.aggregator.spec import AggregatorSpec, AggregatorStatus
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.vote.spec import VOTE_REQUESTED, VoteSpec, VoteStatus
from coord.models.wire import contract
from coord.models.wire.specs import read_document
from coord.starter import api
from coord.starter.api.rewind_patterns import attached
from coord.worker import build_worker
from tests.conftest import ROOT
from tests.helpers import eventually
from tests.test_cli import USER_STORY

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
