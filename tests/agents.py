"""Test agents: the demo agents plus hooks that let a test hold a step or record attempts, and
registries of declared agents run through the real `run_agent` activity."""

import asyncio
import contextlib
import json
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from coord.activities.kinds import agent_from_config
from coord.activities.kinds.demo import register_demo_agents
from coord.activities.mesh.run_agent import AgentActivities
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentFn, AgentRegistry, AgentRequest, AgentResult
from coord.models.mesh.config import AgentsFile, PythonAgent
from coord.models.mesh.demo import FEATURE_DEPLOYMENT_AGENTS, USER_STORY_AGENTS

Execution = Literal["local", "remote"]


@dataclass
class GatedAgents:
    """Each agent waits until the test releases it, so a test can look at every stage. Once
    released it answers `{"agent": name}`, or what `answers` gives for it; an agent in `failing`
    fails instead."""

    names: Iterable[str] = tuple(FEATURE_DEPLOYMENT_AGENTS)
    started: dict[str, asyncio.Event] = field(default_factory=dict)
    released: dict[str, asyncio.Event] = field(default_factory=dict)
    answers: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    failing: Collection[str] = ()

    def __post_init__(self) -> None:
        for name in self.names:
            self.started[name] = asyncio.Event()
            self.released[name] = asyncio.Event()

    def registry(self) -> AgentRegistry:
        """The gated agents, and the demo agents for every other name. A gated agent runs for as
        long as the test holds it, heartbeating: declared `execution: remote`, an activity task
        (a local activity is for short runs, and sends no heartbeats)."""
        registry = AgentRegistry()
        gated = PythonAgent(kind="python", callable="tests.agents:gated", execution="remote")
        for name in self.names:
            registry.register(name, "python", gated)(self._agent(name))
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
            if name in self.failing:
                raise ApplicationError(f"{name} failed", type="temporary_failure")
            return self.answers.get(name, {"agent": name})

        return agent

    async def wait_started(self, name: str) -> None:
        await asyncio.wait_for(self.started[name].wait(), timeout=20)


@dataclass
class AttemptRecorder:
    """Fails the first `failures` attempts and records each attempt's number. (How far apart
    they run is read from the workflow's retry timers: a time-skipping server fires those at
    once.)"""

    failures: int
    attempts: list[int] = field(default_factory=list)

    def registry(self) -> AgentRegistry:
        registry = register_demo_agents(AgentRegistry())
        registry.register("Flaky")(self._agent)
        return registry

    async def _agent(self, event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        self.attempts.append(context.attempt)
        if context.attempt <= self.failures:
            raise RuntimeError(f"transient failure on attempt {context.attempt}")
        return {"attempts": context.attempt}


PYTHON = "python3"


def registry(worker: dict[str, Any] | None = None, /, **agents: dict[str, Any]) -> AgentRegistry:
    """The agents given, declared as in a file whose `worker:` section is `worker`."""
    declared = AgentsFile.model_validate({"worker": worker or {}, "agents": agents})
    registry = AgentRegistry(declared.worker)
    for name, config in declared.agents.items():
        registry.register(name)(agent_from_config(name, config, declared.worker))
    return registry


async def run(
    registry: AgentRegistry, agent: str, payload: dict[str, Any] | None = None
) -> AgentResult:
    event = EventEnvelope.new("Work", "/test", payload=payload or {})
    return await ActivityEnvironment().run(
        AgentActivities(registry).run_agent, AgentRequest(agent=agent, event=event)
    )


async def failure_of(registry: AgentRegistry, agent: str) -> ApplicationError:
    with pytest.raises(ApplicationError) as raised:
        await run(registry, agent)
    return raised.value


async def gone(pid: int) -> None:
    async def poll() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), 10)


@dataclass
class AgentRun:
    agent: str
    context: AgentContext
    output: Mapping[str, Any] | None = None


@dataclass
class RecordingAgents:
    """The demo agents, each run recorded with its context and what it returned."""

    runs: list[AgentRun] = field(default_factory=list)

    def registry(
        self, replaced: Mapping[str, AgentFn] | None = None, execution: Execution | None = None
    ) -> AgentRegistry:
        """The demo agents, some `replaced` by the test's own, those declared with `execution`
        when given (`local`: a local activity of the workflow; `remote`: an activity task)."""
        demo = register_demo_agents(AgentRegistry())
        registry = AgentRegistry()
        declared = PythonAgent(kind="python", callable="tests.agents:replaced", execution=execution)
        for name in demo:
            agent = (replaced or {}).get(name)
            declaration = declared if agent is not None and execution is not None else None
            registry.register(name, "python", declaration)(
                self._recorded(name, agent or demo.get(name))
            )
        return registry

    def _recorded(self, name: str, agent: AgentFn) -> AgentFn:
        async def recorded(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
            run = AgentRun(name, context)
            self.runs.append(run)
            output = await agent(event, context)
            assert output is not None
            run.output = output
            return output

        return recorded

    def last(self, agent: str) -> AgentRun:
        return [run for run in self.runs if run.agent == agent][-1]

    def outputs(self) -> dict[str, Mapping[str, Any] | None]:
        return {run.agent: run.output for run in self.runs if run.output is not None}


DEMO = register_demo_agents(AgentRegistry())


async def keyed_demo_agent(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any] | None:
    """The demo agent of the run's name, as a python agent an agents file declares (with the
    `execution` a test needs); each attempt first notes its agent, attempt and idempotency key
    in the file the saga's input names (`keys`), if any."""
    keys = event.payload.get("keys")
    if keys:
        with open(keys, "a", encoding="utf-8") as noted:
            noted.write(f"{context.agent} {context.attempt} {context.idempotency_key}\n")
    return await DEMO.get(context.agent)(event, context)


def demo_agents_file(path: Path, execution: Execution) -> Path:
    """An agents file declaring the feature-deployment saga's and the user-story chain's agents
    `keyed_demo_agent`s, run as `execution` says."""
    declared = {
        name: {
            "kind": "python",
            "callable": "tests.agents:keyed_demo_agent",
            "execution": execution,
        }
        for name in (*FEATURE_DEPLOYMENT_AGENTS, *USER_STORY_AGENTS)
    }
    path.write_text(json.dumps({"agents": declared}))
    return path
