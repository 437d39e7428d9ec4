"""Test agents: the demo agents plus hooks that let a test hold a step or record attempts."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from temporalio import activity

from coord.activities.demo import FEATURE_DEPLOYMENT_AGENTS, register_demo_agents
from coord.models.agents import AgentContext, AgentRegistry
from coord.models.envelope import EventEnvelope


@dataclass
class GatedAgents:
    """Each agent waits until the test releases it, so a test can look at every stage."""

    names: Iterable[str] = tuple(FEATURE_DEPLOYMENT_AGENTS)
    started: dict[str, asyncio.Event] = field(default_factory=dict)
    released: dict[str, asyncio.Event] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.names:
            self.started[name] = asyncio.Event()
            self.released[name] = asyncio.Event()

    def registry(self) -> AgentRegistry:
        """The gated agents, and the demo agents for every other name."""
        registry = AgentRegistry()
        for name in self.names:
            registry.register(name)(self._agent(name))
        demo = register_demo_agents(AgentRegistry())
        for name in demo:
            if name not in registry:
                registry.register(name)(demo.get(name))
        return registry

    def _agent(self, name: str) -> Any:
        async def agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
            self.started[name].set()
            while not self.released[name].is_set():
                activity.heartbeat()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.released[name].wait(), timeout=0.2)
            return {"agent": name}

        return agent

    async def wait_started(self, name: str) -> None:
        await asyncio.wait_for(self.started[name].wait(), timeout=20)


@dataclass
class AttemptRecorder:
    """Fails the first `failures` attempts and records the server's clock at each one (the
    time-skipping server's own clock, since its backoff timers skip ahead of the wall)."""

    failures: int
    clock: Callable[[], Awaitable[datetime]]
    started: list[datetime] = field(default_factory=list)

    def registry(self) -> AgentRegistry:
        registry = register_demo_agents(AgentRegistry())
        registry.register("Flaky")(self._agent)
        return registry

    async def _agent(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        self.started.append(await self.clock())
        if context.attempt <= self.failures:
            raise RuntimeError(f"transient failure on attempt {context.attempt}")
        return {"attempts": context.attempt}
