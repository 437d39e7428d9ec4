"""The steps of `run_agent` one at a time (activities/mesh/run_agent.py): admit and guard against
an agent's real ledger on the dev server; resolve, run, result_of, keep and report_failure with
no server, inside the SDK's activity environment where a step reads its activity."""

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from coord.activities.mesh.breakers import Breakers
from coord.activities.mesh.pools import AgentPools
from coord.activities.mesh.result_refs import ResultStore
from coord.activities.mesh.run_agent import (
    Resolved,
    admit,
    guard,
    report_failure,
    resolve,
    result_of,
    run,
)
from coord.activities.mesh.run_tally import RunCounter
from coord.infra.ledgers import read_ledger
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import (
    AgentContext,
    AgentProgress,
    AgentRegistry,
    AgentRequest,
    AgentResult,
)
from coord.models.mesh.config import PythonAgent, ShellAgent
from coord.models.mesh.ledger import BreakerConfig
from coord.models.mesh.results import ResultReference
from coord.models.mesh.retry import RunBudget
from coord.models.mesh.runs import GateRefusal, RetryJitter, retry_delay
from coord.models.wire.contract import (
    FailureType,
    Health,
    agent_ledger_workflow_id,
    agent_task_queue,
    failure,
)
from coord.worker import build_worker


def request(agent: str = "echo", **fields: Any) -> AgentRequest:
    return AgentRequest(agent=agent, event=EventEnvelope.new("Work", "/test"), **fields)


def environment(activity_id: str = "run-1", **info: Any) -> ActivityEnvironment:
    """An activity environment whose run started now (the SDK's default started in 1970)."""
    env = ActivityEnvironment()
    env.info = replace(env.info, activity_id=activity_id, started_time=datetime.now(UTC), **info)
    return env


async def echo(event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
    return {"key": context.idempotency_key, "inputs": dict(context.inputs)}


def declared(name: str, **fields: Any) -> AgentRegistry:
    """A registry with the python agent `name` (the `echo` function), declared with `fields`."""
    registry = AgentRegistry()
    declaration = PythonAgent(kind="python", callable="tests.agents:unused", **fields)
    registry.register(name, "python", declaration)(echo)
    return registry


def unique_agent() -> str:
    return f"agent-{uuid.uuid4().hex[:8]}"


def tally(sent: AgentRequest) -> RunCounter:
    """The attempt's tally, as `run_agent` starts it."""
    return RunCounter(sent.agent, sent.budget, before=sent.attempts_before)


# admit: the pool's permit, from the agent's ledger


async def test_admit_without_pools_or_a_pool_of_its_own_sends_the_ledger_nothing(
    client: Client, task_queue: str
) -> None:
    agent = unique_agent()
    pools = AgentPools(client, task_queue, declared(agent))
    async with admit(None, request(agent)), admit(pools, request(agent)):
        pass
    ledger = client.get_workflow_handle(
        agent_ledger_workflow_id(agent_task_queue(agent, task_queue))
    )
    with pytest.raises(RPCError) as raised:
        await ledger.describe()
    assert raised.value.status == RPCStatusCode.NOT_FOUND, "no max_concurrent: no ledger started"


async def test_admit_holds_a_permit_for_the_run_and_turns_the_next_away_when_none_is_free(
    client: Client, task_queue: str
) -> None:
    agent = unique_agent()
    pools = AgentPools(client, task_queue, declared(agent, max_concurrent=1))
    queue = agent_task_queue(agent, task_queue)
    entered: list[str] = []

    async def second_run() -> None:
        async with admit(pools, request(agent)):
            entered.append("second")

    async def first_run() -> int | None:
        async with admit(pools, request(agent)):
            entered.append("first")
            second = environment("run-2", start_to_close_timeout=timedelta(seconds=2))
            with pytest.raises(ApplicationError) as refused:
                await second.run(second_run)  # waits at most half its time limit
            assert refused.value.type == FailureType.POOL_FULL
            pool = (await read_ledger(client, queue)).pool
            return pool.in_use if pool else None

    async with build_worker(client, task_queue, AgentRegistry(), only=[]):  # serves the ledger
        in_use = await environment("run-1", start_to_close_timeout=timedelta(seconds=30)).run(
            first_run
        )
        after = (await read_ledger(client, queue)).pool
    assert in_use == 1 and entered == ["first"], "the second run never entered"
    assert after is not None and (after.in_use, after.waiting) == (0, 0), "both gave theirs back"


# guard: the breaker, judged and told to the ledger


async def test_guard_reports_a_counted_failure_and_turns_the_next_run_away_while_open(
    client: Client, task_queue: str
) -> None:
    agent = unique_agent()
    breakers = Breakers(client, task_queue, declared(agent, breaker=BreakerConfig(consecutive=1)))
    down = failure(FailureType.TEMPORARY_FAILURE, "refused", health=Health.CONNECTION)
    called: list[str] = []

    async def failing_run() -> None:
        async with guard(breakers, request(agent)):
            called.append("first")
            raise down

    async def next_run() -> None:
        async with guard(breakers, request(agent)):
            called.append("second")

    async with build_worker(client, task_queue, AgentRegistry(), only=[]):
        with pytest.raises(ApplicationError) as failed:
            await environment("run-1").run(failing_run)
        assert failed.value is down, "the guard judges the failure and lets it through"
        ledger = await read_ledger(client, agent_task_queue(agent, task_queue))
        with pytest.raises(ApplicationError) as refused:
            await environment("run-2").run(next_run)
        await breakers.close()
    assert ledger.breaker == "open", "the run ended once the ledger had its failure"
    assert refused.value.type == FailureType.CIRCUIT_OPEN
    assert called == ["first"], "the agent was not called while the breaker was open"


async def test_guard_without_breakers_lets_every_run_through() -> None:
    async with guard(None, request()):
        pass


# resolve: the agent and its inputs


async def test_resolve_finds_the_agent_by_name_and_reads_referenced_inputs_as_data() -> None:
    results = ResultStore()
    stored = await results.kept(AgentResult(agent="first", data={"blob": "x" * 100}), limit=10)
    assert stored.reference is not None
    inputs = {"first": {"result_ref": stored.reference.model_dump()}, "plain": 1}
    resolved = await resolve(declared("echo"), results, request(inputs=inputs))
    assert resolved.agent is echo
    assert resolved.inputs == {"first": {"blob": "x" * 100}, "plain": 1}


async def test_resolve_refuses_an_unknown_name_a_missing_input_and_an_inline_kind_not_allowed() -> (
    None
):
    results = ResultStore()
    with pytest.raises(ApplicationError) as unknown:
        await resolve(declared("echo"), results, request("nobody"))
    missing = {"first": {"result_ref": ResultReference(sha256="0" * 64, bytes=1).model_dump()}}
    with pytest.raises(ApplicationError) as unreadable:
        await resolve(declared("echo"), results, request(inputs=missing))
    inline = ShellAgent(kind="shell", argv=["true"])
    with pytest.raises(ApplicationError) as refused:
        await resolve(declared("echo"), results, request("inline", config=inline))
    assert (unknown.value.type, unknown.value.non_retryable) == (FailureType.UNKNOWN_AGENT, True)
    assert unreadable.value.type == FailureType.INVALID_PAYLOAD and "inputs.first" in str(
        unreadable.value
    )
    assert (refused.value.type, refused.value.non_retryable) == (
        FailureType.AGENT_NOT_ALLOWED,
        True,
    )


# run: the kind's function, told of its run, within its time limit


async def test_run_tells_the_agent_its_run_and_sends_its_progress_from_a_thread() -> None:
    async def reporting(event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
        await asyncio.to_thread(context.progress, "Reading the sources")
        return {"key": context.idempotency_key, "attempt": context.attempt}

    env = environment("run-7")
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)

    async def attempt() -> Any:
        sent = request()
        return await run(Resolved(reporting, {}), sent, tally(sent))

    output = await env.run(attempt)
    assert output == {"key": "test/run-7", "attempt": 1}
    assert beats == [(AgentProgress(progress="Reading the sources"),)]


async def test_run_ends_an_agent_past_the_runs_time_limit_as_its_own_timeout() -> None:
    async def hanging(event: EventEnvelope, context: AgentContext) -> dict[str, Any]:
        await asyncio.sleep(60)
        return {}

    async def attempt() -> Any:
        counted = request(budget=RunBudget(max_retries=3))
        return await run(Resolved(hanging, {}), counted, tally(counted))

    env = environment(start_to_close_timeout=timedelta(seconds=2))
    with pytest.raises(ApplicationError) as timed_out:
        await asyncio.wait_for(env.run(attempt), 30)
    assert timed_out.value.type == FailureType.TIMEOUT
    assert "ran past the run's time limit of 2s" in timed_out.value.message


# keep: the output as the result, large data by reference


def test_result_of_shapes_the_output_and_refuses_one_that_does_not_validate() -> None:
    registry = declared("echo", publishes=["Done"])
    output = {"answer": 42, "metadata": {"quality_score": 0.9}}
    result = result_of(registry, request(), output, 12.34, 2)
    assert result.data == {"answer": 42} and result.may_publish == ["Done"]
    assert result.metadata == {"quality_score": 0.9, "duration_ms": 12.3, "attempt": 2}
    with pytest.raises(ApplicationError) as invalid:
        result_of(registry, request(), {"publish": "not a list"}, 1.0, 1)
    assert (invalid.value.type, invalid.value.non_retryable) == (FailureType.INVALID_PAYLOAD, True)


async def test_keep_stores_only_data_over_the_limit() -> None:
    results = ResultStore()
    small = AgentResult(agent="echo", data={"a": 1})
    assert await results.kept(small, limit=1000) is small
    assert await results.kept(small, limit=None) is small
    large = await results.kept(AgentResult(agent="echo", data={"blob": "x" * 2000}), limit=1000)
    assert large.data == {} and large.reference is not None and large.reference.bytes > 2000


# report: what the workflow is told of a failed attempt


async def report(error: Exception, sent: AgentRequest, **info: Any) -> ApplicationError:
    """What report_failure raises for `error`, in an activity environment with `info`."""

    async def attempt() -> None:
        report_failure(error, sent, tally(sent))

    with pytest.raises(ApplicationError) as raised:
        await environment(**info).run(attempt)
    return raised.value


async def test_report_classifies_the_agents_failure_with_its_attempt_and_retry_on() -> None:
    crash = RuntimeError("boom")
    told = await report(crash, request())
    assert (told.type, told.non_retryable, told.details) == (
        "RuntimeError",
        False,
        ({"attempt": 1},),
    )
    assert told.__cause__ is crash
    outside = await report(crash, request(retry_on=[FailureType.TIMEOUT]))
    assert outside.non_retryable, "a type outside a non-empty retry_on is not retried"
    spent = await report(crash, request(budget=RunBudget(max_retries=0)))
    assert spent.non_retryable, "the run's retries are spent"


async def test_report_spreads_the_retry_by_the_requests_jitter() -> None:
    policy = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=3)
    jitter = RetryJitter(kind="full", seed=7)
    told = await report(RuntimeError("boom"), request(jitter=jitter), retry_policy=policy)
    expected = retry_delay(1, jitter, initial=policy.initial_interval, coefficient=3, maximum=None)
    assert told.next_retry_delay == expected
    plain = await report(RuntimeError("boom"), request(), retry_policy=policy)
    assert plain.next_retry_delay is None, "no jitter, no budget: the server's backoff"


async def test_report_hands_a_gates_refusal_back_or_lets_it_be_retried_here() -> None:
    full = failure(FailureType.POOL_FULL, "no permit", retry_after=timedelta(seconds=3))
    returned = await report(full, request(gates_return=True, attempts_before=2))
    assert (returned.type, returned.non_retryable) == (FailureType.POOL_FULL, True)
    assert GateRefusal.of(returned.details[0]) == GateRefusal(attempt=3, retry_after_s=3.0)
    assert returned.__cause__ is None
    retried = await report(full, request(budget=RunBudget(max_retries=0)))
    assert retried is full, "retried by the server as it came, no failure of the agent's"
