"""How a run's worker counts its retries (models/retry.py), without a server: the tally carried
in heartbeat details, the budget, the backoff counted in the agent's failures, the time the
agent is given within its run's limit."""

from datetime import timedelta

from temporalio.common import RetryPolicy

from coord.models.mesh.agents import AgentProgress
from coord.models.mesh.retry import (
    LOST_RUNS_ALLOWED,
    RetryConfig,
    RunBudget,
    RunTally,
    agent_time_limit,
)
from coord.models.mesh.runs import NO_JITTER, retry_delay


def test_the_tally_is_the_last_heartbeat_detail_whatever_the_agent_sent_before_it() -> None:
    tally = RunTally(failures=2, turned_away=1)
    progress = AgentProgress(progress="Deploying").model_dump()
    assert RunTally.carried_in([progress, tally.as_detail()]) == tally
    assert RunTally.carried_in([tally.as_detail()]) == tally


def test_no_tally_counts_nothing() -> None:
    """A first attempt, or details an agent sent on a worker that did not count (an older one)."""
    assert RunTally.carried_in([]) == RunTally()
    assert RunTally.carried_in([{"progress": "Deploying"}]) == RunTally()
    assert RunTally.carried_in([{"run_tally": {"failures": -1}}]) == RunTally()
    assert RunTally.carried_in(["run_tally"]) == RunTally()


def test_attempts_neither_failed_nor_turned_away_were_lost() -> None:
    tally = RunTally().failed().refused().failed()
    assert (tally.failures, tally.turned_away) == (2, 1)
    assert tally.lost(attempt=4) == 0  # the 4th attempt follows two failures and a refusal
    assert tally.lost(attempt=6) == 2
    assert RunTally().lost(attempt=1) == 0


def test_only_the_agents_own_failures_spend_its_retries() -> None:
    budget = RetryConfig(max_retries=1).budget()
    assert budget == RunBudget(max_retries=1, lost_runs=LOST_RUNS_ALLOWED)
    once = RunTally().failed()
    assert not budget.spent(once)
    assert budget.spent(once.failed())
    refused_often = RunTally(turned_away=50)
    assert not budget.spent(refused_often)
    assert not budget.lost_too_often(refused_often, attempt=51)


def test_a_run_lost_more_often_than_allowed_fails() -> None:
    budget = RetryConfig(max_retries=0).budget()
    assert not budget.lost_too_often(RunTally(), attempt=LOST_RUNS_ALLOWED + 1)
    assert budget.lost_too_often(RunTally(), attempt=LOST_RUNS_ALLOWED + 2)


def test_a_step_retried_until_success_counts_no_limit() -> None:
    budget = RetryConfig().until_success().budget()
    assert budget == RunBudget(max_retries=None, lost_runs=None)
    assert not budget.spent(RunTally(failures=1000))
    assert not budget.lost_too_often(RunTally(), attempt=1000)


def test_the_counted_policy_keeps_the_backoff_and_sets_no_attempt_limit() -> None:
    retry = RetryConfig(max_retries=2, initial_delay=timedelta(seconds=2), no_retry_on=["x"])
    policy = retry.to_counted_policy()
    assert policy.maximum_attempts == 0
    assert policy.non_retryable_error_types == ["x"]
    assert policy.initial_interval == retry.to_retry_policy().initial_interval
    assert retry.to_retry_policy().maximum_attempts == 3  # unchanged for runs counted by it


def policy_backoff(policy: RetryPolicy, failures: int) -> timedelta:
    """The delay the worker gives the retry after the agent's `failures`-th failure, jitter off."""
    return retry_delay(
        failures,
        NO_JITTER,
        initial=policy.initial_interval,
        coefficient=policy.backoff_coefficient,
        maximum=policy.maximum_interval,
    )


def test_backoff_follows_the_agents_failures_not_the_attempts() -> None:
    policy = RetryConfig(initial_delay=timedelta(seconds=1), max_delay=timedelta(seconds=5))
    delays = [policy_backoff(policy.to_retry_policy(), n) for n in (1, 2, 3, 4)]
    assert delays == [timedelta(seconds=s) for s in (1, 2, 4, 5)]
    fixed = RetryConfig(backoff_type="fixed").to_retry_policy()
    assert policy_backoff(fixed, 3) == timedelta(seconds=1)


def test_the_agent_ends_a_little_before_its_runs_time_limit() -> None:
    assert agent_time_limit(timedelta(minutes=5)) == timedelta(minutes=5) - timedelta(seconds=1)
    assert agent_time_limit(timedelta(milliseconds=500)) == timedelta(milliseconds=450)
