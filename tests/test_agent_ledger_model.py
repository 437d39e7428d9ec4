"""The ledger's pure model (coord.models.agent_ledger), without a server: the breaker's state
machine of issue 14 and the recent window's success rate and p50."""

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from coord.models.agent_config import AgentsFile
from coord.models.agent_ledger import (
    BUCKET,
    PROBE_LEASE,
    WINDOW,
    AgentLedgerState,
    BreakerConfig,
    LedgerBook,
    RunStats,
    duration_bin,
)

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def book(failures: int = 5, recovery: float = 30) -> LedgerBook:
    config = BreakerConfig(failures=failures, recovery=timedelta(seconds=recovery))
    return LedgerBook(agent_queue="agent-flaky", config=config)


def opened(ledger: LedgerBook, at: datetime = T0) -> LedgerBook:
    for _ in range(ledger.config.failures):
        ledger.failed("temporary_failure", at)
    assert ledger.breaker == "open"
    return ledger


def test_the_breaker_opens_after_n_consecutive_failures_and_a_success_ends_the_streak() -> None:
    ledger = book()
    for _ in range(4):
        ledger.failed("temporary_failure", T0)
    ledger.succeeded(T0)
    assert (ledger.breaker, ledger.consecutive_failures) == ("closed", 0)
    for _ in range(4):
        ledger.failed("timeout", T0)
    assert ledger.breaker == "closed"
    ledger.failed("timeout", T0)
    state = ledger.state(T0)
    assert (state.breaker, state.consecutive_failures) == ("open", 5)
    assert state.open_until == T0 + timedelta(seconds=30)
    assert state.transitions[-1].reason == "5 consecutive failures, last timeout"


def test_an_open_breaker_turns_half_open_after_the_recovery_timeout() -> None:
    ledger = opened(book())
    later = T0 + timedelta(seconds=29)
    ledger.tick(later)
    assert ledger.state(later).breaker == "open"
    assert ledger.state(later).breaker_at(T0 + timedelta(seconds=30)) == "half_open"
    assert not ledger.claim_probe(later), "no probe while open"
    ledger.tick(T0 + timedelta(seconds=45))
    assert ledger.breaker == "half_open"
    assert ledger.transitions[-1].at == T0 + timedelta(seconds=30), "when it happened"


def test_half_open_lets_exactly_one_probe_through_and_its_success_closes() -> None:
    ledger = opened(book())
    probing = T0 + timedelta(seconds=31)
    assert ledger.claim_probe(probing)
    assert not ledger.claim_probe(probing), "exactly one probe"
    ledger.succeeded(probing, probe=True)
    state = ledger.state(probing)
    assert (state.breaker, state.consecutive_failures) == ("closed", 0)
    assert [(t.from_state, t.to_state) for t in state.transitions] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]
    assert [t.seq for t in state.transitions] == [1, 2, 3]


def test_a_failed_probe_reopens_for_another_recovery_timeout() -> None:
    ledger = opened(book(recovery=10))
    probing = T0 + timedelta(seconds=12)
    assert ledger.claim_probe(probing)
    ledger.failed("temporary_failure", probing, probe=True)
    assert ledger.breaker == "open"
    assert ledger.open_until == probing + timedelta(seconds=10)
    assert ledger.transitions[-1].reason == "probe failed: temporary_failure"


def test_a_late_run_neither_closes_an_open_breaker_nor_ends_a_probe_it_is_not() -> None:
    ledger = opened(book())
    ledger.succeeded(T0 + timedelta(seconds=1))
    assert ledger.state(T0).breaker == "open", "only a probe closes"
    probing = T0 + timedelta(seconds=31)
    assert ledger.claim_probe(probing)
    ledger.failed("timeout", probing)
    assert ledger.breaker == "half_open", "a run started before the probe is not the probe"


def test_a_probe_whose_worker_vanished_loses_its_lease() -> None:
    ledger = opened(book())
    probing = T0 + timedelta(seconds=31)
    assert ledger.claim_probe(probing)
    assert not ledger.claim_probe(probing + PROBE_LEASE - timedelta(seconds=1))
    assert ledger.claim_probe(probing + PROBE_LEASE)


def test_an_abandoned_probe_lets_the_next_one_through_at_once() -> None:
    ledger = opened(book())
    probing = T0 + timedelta(seconds=31)
    assert ledger.claim_probe(probing)
    ledger.probe_abandoned(probing + timedelta(seconds=1))
    assert (ledger.breaker, ledger.consecutive_failures) == ("half_open", 5), "no outcome"
    assert ledger.claim_probe(probing + timedelta(seconds=2))


def test_window_success_rate_and_p50_forget_runs_older_than_the_window() -> None:
    ledger = book()
    batch = RunStats()
    for duration in (10, 20, 30, 40, 1000):
        batch.record(True, duration)
    batch.record(False, 5)
    ledger.add_stats(batch, T0)
    state = ledger.state(T0)
    assert (state.runs, state.succeeded, state.failed) == (6, 5, 1)
    assert state.success_rate == pytest.approx(5 / 6, abs=1e-4)
    assert state.p50_ms == pytest.approx(30, rel=0.05)
    ledger.add_stats(RunStats(failed=2), T0 + BUCKET)
    assert ledger.state(T0 + BUCKET).runs == 8
    gone = T0 + WINDOW + 2 * BUCKET
    ledger.tick(gone)
    assert ledger.state(gone) == AgentLedgerState(agent_queue="agent-flaky", as_of=gone)
    assert ledger.buckets == []


def test_memory_stays_bounded_however_many_runs() -> None:
    ledger = book()
    for second in range(0, 3600, 2):
        batch = RunStats()
        for run in range(100):
            batch.record(run % 10 != 0, 1 + run * 37.5)
        ledger.add_stats(batch, T0 + timedelta(seconds=second))
    assert len(ledger.buckets) <= WINDOW / BUCKET + 1
    assert all(len(b.stats.durations) < 100 for b in ledger.buckets)
    at = T0 + timedelta(hours=2)
    for _ in range(100):
        opened(ledger, at)
        at += timedelta(seconds=30)
        assert ledger.claim_probe(at)
        ledger.succeeded(at, probe=True)
    assert len(ledger.transitions) == 20
    assert ledger.transitions[-1].seq == 300


def test_a_reader_brings_a_state_up_to_its_own_time() -> None:
    """The ledger sets no timers: a state read later says what holds then."""
    ledger = opened(book())
    ledger.add_stats(RunStats(succeeded=3, durations={duration_bin(8): 3}), T0)
    read = ledger.state(T0)
    assert (read.breaker, read.runs) == ("open", 3)
    later = read.at(T0 + timedelta(seconds=31))
    assert (later.breaker, later.runs) == ("half_open", 3)
    assert later.p50_ms == pytest.approx(8, rel=0.05)
    assert read.at(T0 + WINDOW + BUCKET).runs == 0


def test_breaker_config_from_an_agents_file() -> None:
    declared = AgentsFile.model_validate(
        {
            "agents": {
                "flaky": {
                    "kind": "http",
                    "url": "http://localhost:1/",
                    "breaker": {"failures": 3, "recovery": "5s"},
                }
            }
        }
    )
    breaker = declared.agents["flaky"].breaker
    assert (breaker.failures, breaker.recovery) == (3, timedelta(seconds=5))
    with pytest.raises(ValidationError, match=r"breaker\.failures"):
        AgentsFile.model_validate(
            {"agents": {"x": {"kind": "shell", "argv": ["true"], "breaker": {"failures": 0}}}}
        )
