"""The rules for runs an agent cannot take, without a server: attempts carried over a gate
refusal, the wait's bound and spread, detours kept in a record, and retry jitter."""

from datetime import UTC, datetime, timedelta

import pytest

from coord.models.mesh.assignment import FallbackRoute
from coord.models.mesh.runs import (
    DEFAULT_AGENT_WAIT,
    GATE_SPREAD,
    MAX_DETOURS,
    GateRefusal,
    RetryJitter,
    RunAllowance,
    RunDetour,
    gate_delay,
    kept,
    retry_delay,
)
from coord.models.saga.spec import SagaSpec
from coord.models.wire.specs import SpecError, parse_model

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def delay(attempt: int, jitter: RetryJitter) -> timedelta:
    """The delay after `attempt` under a 1 s, doubling, 30 s capped backoff."""
    return retry_delay(
        attempt,
        jitter,
        initial=timedelta(seconds=1),
        coefficient=2.0,
        maximum=timedelta(seconds=30),
    )


def test_a_refused_attempt_is_not_spent_and_the_next_execution_has_the_rest() -> None:
    budget = RunAllowance.starting(4, NOW, None)
    assert budget.remaining == 4
    budget.refused(GateRefusal(attempt=3))  # attempts 1 and 2 failed, 3 was turned away
    assert (budget.spent, budget.remaining) == (2, 2)
    budget.refused(GateRefusal(attempt=3))  # turned away again before trying: nothing more
    assert budget.remaining == 2


def test_an_unlimited_policy_stays_unlimited() -> None:
    budget = RunAllowance.starting(0, NOW, None)
    budget.refused(GateRefusal(attempt=7))
    assert budget.remaining == 0


def test_waits_are_bounded_by_schedule_to_close_else_the_default() -> None:
    assert RunAllowance.starting(3, NOW, None).time_left(NOW) == DEFAULT_AGENT_WAIT
    bounded = RunAllowance.starting(3, NOW, timedelta(seconds=90))
    assert bounded.time_left(NOW + timedelta(seconds=60)) == timedelta(seconds=30)
    assert bounded.time_left(NOW + timedelta(hours=1)) == timedelta(0)


def test_a_gate_wait_follows_its_hint_stretched_by_at_most_the_spread() -> None:
    refusal = GateRefusal(retry_after_s=10)
    assert gate_delay(refusal, 0.0) == timedelta(seconds=10)
    assert gate_delay(refusal, 0.999) < timedelta(seconds=10 * (1 + GATE_SPREAD))
    assert gate_delay(GateRefusal(retry_after_s=0), 0.0) > timedelta(0)


@pytest.mark.parametrize("details", [None, "text", {"attempt": "x"}, {"retry_after_s": -1}])
def test_a_malformed_refusal_reads_as_the_defaults(details: object) -> None:
    assert GateRefusal.of(details) == GateRefusal()


def test_a_refusal_reads_what_the_worker_sent() -> None:
    refusal = GateRefusal.of({"attempt": 3, "retry_after_s": 2.5, "other": 1})
    assert (refusal.attempt, refusal.retry_after_s) == (3, 2.5)


def wait(seconds: float, at: int = 0, *, reason: str = "circuit_open") -> RunDetour:
    moment = NOW + timedelta(seconds=at)
    return RunDetour(
        run="deploy", at=moment, agent="a", reason=reason, action="waited", waited_s=seconds
    )


def test_waits_in_a_row_for_one_reason_add_up_in_one_entry() -> None:
    detours = kept(kept(kept([], wait(2)), wait(3, 5)), wait(1, 9, reason="pool_full"))
    assert [(d.reason, d.waited_s) for d in detours] == [("circuit_open", 5), ("pool_full", 1)]
    assert detours[0].at == NOW + timedelta(seconds=5)


def test_detours_are_a_bounded_window() -> None:
    detours: list[RunDetour] = []
    for n in range(MAX_DETOURS + 5):
        moved = RunDetour(at=NOW, agent=f"a{n}", reason="timeout", action="fell_back", to_agent="b")
        detours = kept(detours, moved)
    assert len(detours) == MAX_DETOURS and detours[-1].agent == f"a{MAX_DETOURS + 4}"
    assert detours[-1].describe() == f"a{MAX_DETOURS + 4} timeout, fell back to b"


def test_no_jitter_is_the_policys_backoff() -> None:
    delays = [delay(n, RetryJitter(kind="none")) for n in range(1, 8)]
    assert [d.total_seconds() for d in delays] == [1, 2, 4, 8, 16, 30, 30]


@pytest.mark.parametrize("kind", ["full", "decorrelated"])
def test_jitter_stays_within_the_backoff_and_is_the_same_for_a_seed(kind: str) -> None:
    jitter = RetryJitter.model_validate({"kind": kind, "seed": 42})
    for attempt in range(1, 10):
        drawn = delay(attempt, jitter)
        assert timedelta(0) <= drawn <= timedelta(seconds=30)
        assert drawn == delay(attempt, jitter)
    full = RetryJitter(kind="full", seed=42)
    assert delay(3, full) <= timedelta(seconds=4)


def test_runs_failing_together_come_back_apart() -> None:
    """A hundred runs retrying their first failure at once, each with its own seed."""
    delays = {delay(1, RetryJitter(seed=seed)) for seed in range(100)}
    assert len(delays) == 100
    assert min(delays) < timedelta(seconds=0.2) and max(delays) > timedelta(seconds=0.8)


def test_a_fallback_names_an_agent_or_capabilities() -> None:
    step = {"name": "query", "agent": "pg-primary"}
    spec = {"saga_id": "s"}
    agent = parse_model(SagaSpec, {**spec, "steps": [{**step, "fallback": "pg-replica"}]}, "s")
    assert agent.steps[0].fallback == "pg-replica"
    routed = {**step, "fallback": {"capability": "sql", "assignment": "auction"}}
    capable = parse_model(SagaSpec, {**spec, "steps": [routed]}, "s")
    fallback = capable.steps[0].fallback
    assert isinstance(fallback, FallbackRoute) and fallback.route.capabilities == ["sql"]
    with pytest.raises(SpecError, match=r"steps\[0\]\.fallback\.capabilities: a fallback names"):
        parse_model(SagaSpec, {**spec, "steps": [{**step, "fallback": {"capabilities": []}}]}, "s")
