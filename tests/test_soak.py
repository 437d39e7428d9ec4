"""The Feature Deployment saga under load, on the real dev server (`make soak`; not in
`make test`: two hundred sagas take a minute or more on two cores).

- Two hundred sagas at once, one in ten failing at `DeployToProduction` by its own input: the
  healthy ones complete, the failing ones compensate as the table says, and no breaker
  opens (a business failure says nothing about the agent's health).
- The same two hundred with `DeployToProduction` truly unhealthy for 20 s (every call hangs
  until its 2 s timeout): its breaker opens, the other agents' stay closed, and the runs turned
  away wait at the breaker, without spending their attempts, until the agent is back: they all
  complete. The few sagas that used up their attempts on the agent's timeouts before the breaker
  opened compensate: the agent failed them, nobody else did. Sagas that never call it, started
  once its hanging calls fill the worker, complete while it is still down."""

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from coord.activities.kinds.demo import register_demo_agents
from coord.infra.ledgers import read_ledger
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentFn, AgentRegistry
from coord.models.mesh.demo import FEATURE_DEPLOYMENT_AGENTS
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.contract import FailureType, agent_task_queue
from coord.starter import api
from coord.worker import build_worker
from tests.conftest import FEATURE_DEPLOYMENT

pytestmark = pytest.mark.soak

SAGAS = 200
FAILING_EVERY = 10
UNDO_ORDER = ["RollbackProduction", "RemoveFromStaging"]
IN_FLIGHT = timedelta(seconds=5)
"""A run that had started before the breaker opened can still time out after (2 s), and the
workers' view of the ledger is a second old at most."""


def sagas(task_queue: str, production: dict[str, Any]) -> list[SagaSpec]:
    """The saga, SAGAS times; `production` overrides its DeployToProduction step."""
    document = yaml.safe_load(FEATURE_DEPLOYMENT.read_text())
    document["steps"][4].update(production)
    run = uuid.uuid4().hex[:6]
    specs = []
    for n in range(SAGAS):
        failing = n % FAILING_EVERY == 0
        inject = {"fail": ["DeployToProduction"]} if failing else {}
        specs.append(
            SagaSpec.model_validate(
                {**document, "saga_id": f"load-{run}-{n}", "input": {"n": n, "inject": inject}}
            )
        )
    return specs


BYSTANDERS = 20
HANGING = 50
"""Calls of the unhealthy agent hanging at once before the bystanders start."""
DOWN_FOR = 20.0


def bystanders() -> list[SagaSpec]:
    """Sagas of the four steps before DeployToProduction, which they never call."""
    document = yaml.safe_load(FEATURE_DEPLOYMENT.read_text())
    document["steps"] = document["steps"][:4]
    run = uuid.uuid4().hex[:6]
    return [
        SagaSpec.model_validate({**document, "saga_id": f"bystander-{run}-{n}"})
        for n in range(BYSTANDERS)
    ]


async def run_all(client: Client, task_queue: str, specs: list[SagaSpec]) -> list[SagaState]:
    handles = await asyncio.gather(*(api.start_saga(client, s, queue=task_queue) for s in specs))
    return list(
        await asyncio.wait_for(asyncio.gather(*(api.saga_outcome(h) for h in handles)), 900)
    )


async def breakers(client: Client, task_queue: str) -> dict[str, list[str]]:
    """Each Feature Deployment agent's breaker transitions, as `from->to`."""
    states = {
        agent: await read_ledger(client, agent_task_queue(agent, task_queue))
        for agent in FEATURE_DEPLOYMENT_AGENTS
    }
    return {
        agent: [f"{t.from_state}->{t.to_state}" for t in state.transitions]
        for agent, state in states.items()
    }


def report(title: str, states: list[SagaState], started: float) -> None:
    counts = Counter(state.status.value for state in states)
    print(f"\n{title}: {dict(counts)} in {time.monotonic() - started:.1f}s")


async def test_one_in_ten_failing_by_its_own_input_fails_nobody_else(
    client: Client, task_queue: str
) -> None:
    specs = sagas(task_queue, {"retry": {"max_retries": 1, "initial_delay": "200ms"}})
    started = time.monotonic()
    async with build_worker(client, task_queue, register_demo_agents(AgentRegistry())):
        states = await run_all(client, task_queue, specs)
        transitions = await breakers(client, task_queue)
    report("own failures", states, started)
    failing = [s for n, s in enumerate(states) if n % FAILING_EVERY == 0]
    healthy = [s for n, s in enumerate(states) if n % FAILING_EVERY != 0]
    assert [s.status for s in healthy] == [SagaStatus.COMPLETED] * len(healthy)
    assert [s.status for s in failing] == [SagaStatus.COMPENSATED] * len(failing)
    assert all([c.compensate for c in s.compensations] == UNDO_ORDER for s in failing)
    assert transitions == {agent: [] for agent in FEATURE_DEPLOYMENT_AGENTS}


class Outage:
    """DeployToProduction while the test says it is down: every call hangs (heartbeating)
    until Temporal times it out."""

    def __init__(self, agent: AgentFn) -> None:
        self.agent = agent
        self.down = True
        self.calls_while_down = 0

    async def __call__(
        self, event: EventEnvelope, context: AgentContext
    ) -> Mapping[str, Any] | None:
        if self.down:
            self.calls_while_down += 1
            while True:
                context.heartbeat()
                await asyncio.sleep(0.2)
        return await self.agent(event, context)


def with_outage(outage_of: str) -> tuple[AgentRegistry, Outage]:
    demo = register_demo_agents(AgentRegistry())
    outage = Outage(demo.get(outage_of))
    registry = AgentRegistry()
    for name in demo:
        registry.register(name)(outage if name == outage_of else demo.get(name))
    return registry, outage


async def test_an_unhealthy_agent_opens_its_breaker_and_runs_wait_for_it(
    client: Client, task_queue: str
) -> None:
    production = {"timeout": "2s", "retry": {"max_retries": 3, "initial_delay": "1s"}}
    specs = [
        spec.model_copy(update={"input": {"n": n}})
        for n, spec in enumerate(sagas(task_queue, production))
    ]
    registry, outage = with_outage("DeployToProduction")
    started = time.monotonic()
    async with build_worker(client, task_queue, registry):
        running = asyncio.ensure_future(run_all(client, task_queue, specs))
        while outage.calls_while_down < HANGING:
            await asyncio.sleep(0.1)
        passing = asyncio.ensure_future(run_all(client, task_queue, bystanders()))
        begun = time.monotonic()
        await asyncio.wait([passing], timeout=started + DOWN_FOR - time.monotonic())
        passed_while_down = passing.done()
        print(f"\nbystanders done: {passed_while_down}, in {time.monotonic() - begun:.1f}s")
        await asyncio.sleep(max(0.0, started + DOWN_FOR - time.monotonic()))  # the outage
        outage.down = False
        states = await running
        passed = await passing
        transitions = await breakers(client, task_queue)
        ledger = await read_ledger(client, agent_task_queue("DeployToProduction", task_queue))
    report("outage of DeployToProduction", states, started)
    for t in ledger.transitions:
        print(f"  {t.at:%H:%M:%S.%f} {t.from_state} -> {t.to_state}: {t.reason}")
    opened = next(t.at for t in ledger.transitions if t.to_state == "open")
    waited = [s for s in states if any(d.reason == "circuit_open" for d in s.detours)]
    failed = [s for s in states if s.status != SagaStatus.COMPLETED]
    print(f"calls while down: {outage.calls_while_down}; sagas that waited: {len(waited)}")
    assert transitions["DeployToProduction"][-1] == "half_open->closed"
    others = {agent: t for agent, t in transitions.items() if agent != "DeployToProduction"}
    assert others == {agent: [] for agent in others}, "no other agent's breaker moved"
    assert waited and all(s.status == SagaStatus.COMPLETED for s in waited)
    for state in failed:  # out of attempts on the agent's own timeouts, before it opened
        assert state.status == SagaStatus.COMPENSATED, state.failure_reason
        production_failed = next(e for e in state.events if e.event == "ProductionFailed")
        assert production_failed.payload["error"]["type"] == FailureType.TIMEOUT, state
        failed_at = production_failed.time
        assert failed_at <= opened + IN_FLIGHT, "ran out of attempts before the breaker opened"
    assert len(failed) <= SAGAS // 20
    assert passed_while_down, "sagas that never call the agent waited for its outage"
    assert all(s.status == SagaStatus.COMPLETED for s in passed)
