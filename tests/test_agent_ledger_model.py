"""The ledger's pure model (coord.models.mesh.ledger), without a server: the breaker's state
machine (the failure rate over a sliding window with a minimum volume, the optional streak, the
probes), the recent window's success rate and p50, books recorded by older code, and the bounds
that keep every message the ledger accepts from failing it."""

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from coord.models.mesh.breaker import (
    ABANDONED,
    PROBE_LEASE,
    SUCCEEDED,
    WINDOW_SLICES,
    Verdict,
)
from coord.models.mesh.config import AgentsFile
from coord.models.mesh.ledger import (
    BUCKET,
    MAX_BATCH_RUNS,
    MAX_BIN,
    WINDOW,
    AgentLedgerState,
    BreakerConfig,
    LedgerBook,
    OutcomeReport,
    PermitRequest,
    RunStats,
    StatsReport,
    bin_duration,
    duration_bin,
)

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
TIMEOUT = Verdict(ended="failed", counted=True, reason="timeout")
OWN_FAILURE = Verdict(ended="failed", counted=False, reason="temporary_failure")
BAD_INPUT = Verdict(ended="failed", counted=False, reason="invalid_payload")


def book(**config: Any) -> LedgerBook:
    return LedgerBook(agent_queue="agent-flaky", config=BreakerConfig(**config))


def batch(*verdicts: Verdict) -> RunStats:
    stats = RunStats()
    for verdict in verdicts:
        stats.record(verdict, 10.0)
    return stats


def opened(ledger: LedgerBook, at: datetime = T0) -> LedgerBook:
    ledger.add_stats(batch(*[TIMEOUT] * ledger.config.min_calls), at)
    assert ledger.breaker == "open"
    return ledger


def half_open(ledger: LedgerBook) -> datetime:
    """Opens the breaker at T0 and returns a moment it is half-open."""
    opened(ledger)
    probing = T0 + ledger.config.recovery + timedelta(seconds=1)
    ledger.tick(probing)
    assert ledger.breaker == "half_open"
    return probing


def test_the_breaker_opens_on_the_failure_rate_once_the_window_holds_the_minimum_volume() -> None:
    ledger = book()  # 20 calls, 50%, 60 s
    ledger.add_stats(batch(*[TIMEOUT] * 19), T0)
    assert ledger.breaker == "closed", "19 failures: below the minimum volume"
    ledger.add_stats(batch(SUCCEEDED), T0 + timedelta(seconds=1))
    state = ledger.state(T0 + timedelta(seconds=1))
    assert (state.breaker, state.breaker_calls) == ("open", 0), "its window starts afresh"
    assert state.open_until == T0 + timedelta(seconds=31)
    assert state.transitions[-1].reason == "19 of 20 calls failed in 1m (95%): timeout 19"


def test_a_failure_rate_below_the_threshold_never_opens_however_many_failures() -> None:
    ledger = book()
    at = T0
    for _ in range(50):  # 500 calls, 49% of them timing out, in one window after another
        ledger.add_stats(batch(*[TIMEOUT] * 49, *[SUCCEEDED] * 51), at)
        at += timedelta(seconds=3)
    state = ledger.state(at)
    assert state.breaker == "closed" and state.transitions == []
    assert state.breaker_failure_rate == pytest.approx(0.49, abs=0.01)
    ledger.add_stats(batch(*[TIMEOUT] * 50), at)
    assert ledger.breaker == "open", "the rate passes 50%"


def test_failures_that_do_not_count_are_calls_of_a_healthy_agent() -> None:
    ledger = book(min_calls=10)
    ledger.add_stats(batch(*[OWN_FAILURE] * 10, *[BAD_INPUT] * 10), T0)
    state = ledger.state(T0)
    assert (state.breaker, state.breaker_calls, state.breaker_failures) == ("closed", 20, 0)
    assert (state.runs, state.failed, state.success_rate) == (20, 20, 0.0), "stats count them"


def test_the_window_slides_failures_older_than_it_leave() -> None:
    ledger = book(min_calls=10, window=timedelta(seconds=60))
    ledger.add_stats(batch(*[TIMEOUT] * 9), T0)
    later = T0 + timedelta(seconds=60) + timedelta(seconds=60) / WINDOW_SLICES
    assert ledger.state(later).breaker_calls == 0, "gone from the window"
    ledger.add_stats(batch(TIMEOUT, *[SUCCEEDED] * 9), later)
    state = ledger.state(later)
    assert (state.breaker, state.breaker_calls, state.breaker_failures) == ("closed", 10, 1)
    assert len(ledger.calls.slices) == 1


def test_the_window_stays_bounded_however_long_the_agent_runs() -> None:
    ledger = book(min_calls=100_000)
    for second in range(0, 3600, 2):
        ledger.add_stats(batch(SUCCEEDED, TIMEOUT), T0 + timedelta(seconds=second))
    assert len(ledger.calls.slices) <= WINDOW_SLICES + 1


def test_the_consecutive_option_opens_on_a_streak_across_batches_and_a_healthy_run_ends_it() -> (
    None
):
    ledger = book(consecutive=3)
    ledger.add_stats(batch(TIMEOUT, TIMEOUT, OWN_FAILURE, TIMEOUT), T0)
    assert (ledger.breaker, ledger.consecutive_failures) == ("closed", 1)
    ledger.add_stats(batch(TIMEOUT), T0)
    assert ledger.consecutive_failures == 2
    ledger.add_stats(batch(SUCCEEDED), T0)
    assert ledger.consecutive_failures == 0
    ledger.add_stats(batch(TIMEOUT, TIMEOUT), T0)
    ledger.add_stats(batch(TIMEOUT), T0)
    assert ledger.breaker == "open"
    assert ledger.transitions[-1].reason == "3 consecutive failures"


def test_without_the_consecutive_option_a_streak_below_the_volume_does_not_open() -> None:
    ledger = book()
    for _ in range(19):
        ledger.add_stats(batch(TIMEOUT), T0)
    assert (ledger.breaker, ledger.consecutive_failures) == ("closed", 19)


def test_an_open_breaker_turns_half_open_after_the_recovery_timeout() -> None:
    ledger = opened(book())
    later = T0 + timedelta(seconds=29)
    ledger.tick(later)
    assert ledger.state(later).breaker == "open"
    assert ledger.state(later).breaker_at(T0 + timedelta(seconds=30)) == "half_open"
    assert not ledger.claim_probe("run-1", later), "no probe while open"
    ledger.tick(T0 + timedelta(seconds=45))
    assert ledger.breaker == "half_open"
    assert ledger.transitions[-1].at == T0 + timedelta(seconds=30), "when it happened"


def test_half_open_lets_its_probes_through_and_closes_when_they_all_succeed() -> None:
    ledger = book(probes=3)
    probing = half_open(ledger)
    assert [ledger.claim_probe(f"run-{n}", probing) for n in range(4)] == [True] * 3 + [False]
    assert ledger.claim_probe("run-1", probing), "a probe asking again keeps its place"
    for n, expected in enumerate(["half_open", "half_open", "closed"]):
        ledger.probe_ended(f"run-{n}", SUCCEEDED, probing)
        assert ledger.breaker == expected
    state = ledger.state(probing)
    assert (state.consecutive_failures, state.breaker_calls) == (0, 0), "a fresh window"
    assert [(t.from_state, t.to_state, t.reason) for t in state.transitions] == [
        ("closed", "open", "20 of 20 calls failed in 1m (100%): timeout 20"),
        ("open", "half_open", "open for 30s"),
        ("half_open", "closed", "3 probes succeeded"),
    ]
    assert [t.seq for t in state.transitions] == [1, 2, 3]


def test_a_probe_failing_in_a_way_that_counts_reopens_for_another_recovery() -> None:
    ledger = book(recovery=timedelta(seconds=10), probes=3)
    probing = half_open(ledger)
    assert ledger.claim_probe("run-1", probing) and ledger.claim_probe("run-2", probing)
    ledger.probe_ended("run-1", SUCCEEDED, probing)
    ledger.probe_ended("run-2", TIMEOUT, probing)
    assert ledger.breaker == "open"
    assert ledger.open_until == probing + timedelta(seconds=10)
    assert ledger.transitions[-1].reason == "probe failed: timeout"
    assert ledger.state(probing).probes_succeeded == 0, "a new half-open starts afresh"


def test_a_probe_failing_on_its_input_or_abandoned_frees_its_place_and_changes_nothing() -> None:
    ledger = book(probes=1)
    probing = half_open(ledger)
    assert ledger.claim_probe("bad-input", probing)
    assert not ledger.claim_probe("other", probing)
    ledger.probe_ended("bad-input", BAD_INPUT, probing)
    assert ledger.state(probing).breaker == "half_open"
    assert ledger.claim_probe("cancelled", probing), "its place is free at once"
    ledger.probe_ended("cancelled", ABANDONED, probing)
    assert (ledger.state(probing).breaker, ledger.probes.succeeded) == ("half_open", 0)
    assert ledger.claim_probe("good", probing)
    ledger.probe_ended("good", SUCCEEDED, probing)
    assert ledger.state(probing).breaker == "closed"
    assert ledger.transitions[-1].reason == "1 probe succeeded", "not `1 probes`"


def test_a_probe_whose_worker_vanished_loses_its_lease() -> None:
    ledger = book(probes=1)
    probing = half_open(ledger)
    assert ledger.claim_probe("vanished", probing)
    assert not ledger.claim_probe("next", probing + PROBE_LEASE - timedelta(seconds=1))
    assert ledger.claim_probe("next", probing + PROBE_LEASE)


def test_runs_that_are_not_probes_change_nothing_while_open_or_half_open() -> None:
    ledger = book(probes=1)
    probing = half_open(ledger)
    ledger.add_stats(batch(*[SUCCEEDED] * 30), probing)
    ledger.add_stats(batch(*[TIMEOUT] * 30), probing)
    assert ledger.breaker == "half_open", "runs started before the breaker opened"


def test_window_success_rate_and_p50_forget_runs_older_than_the_window() -> None:
    ledger = book()
    stats = RunStats()
    for duration in (10, 20, 30, 40, 1000):
        stats.record(SUCCEEDED, duration)
    stats.record(OWN_FAILURE, 5)
    ledger.add_stats(stats, T0)
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
    ledger = book(probes=1)
    for second in range(0, 3600, 2):
        stats = RunStats()
        for run in range(100):
            stats.record(SUCCEEDED if run % 10 else OWN_FAILURE, 1 + run * 37.5)
        ledger.add_stats(stats, T0 + timedelta(seconds=second))
    assert len(ledger.buckets) <= WINDOW / BUCKET + 1
    assert all(len(b.stats.durations) < 100 for b in ledger.buckets)
    at = T0 + timedelta(hours=2)
    for _ in range(100):
        opened(ledger, at)
        at += timedelta(seconds=31)
        assert ledger.claim_probe("probe", at)
        ledger.probe_ended("probe", SUCCEEDED, at)
    assert len(ledger.transitions) == 20
    assert ledger.transitions[-1].seq == 300


def test_a_reader_brings_a_state_up_to_its_own_time() -> None:
    """The ledger sets no timers: a state read later says what holds then."""
    ledger = book(min_calls=100)
    ledger.add_stats(RunStats(succeeded=3, durations={duration_bin(8): 3}), T0)
    ledger.add_stats(batch(TIMEOUT), T0)
    read = ledger.state(T0)
    assert (read.breaker, read.runs, read.breaker_calls) == ("closed", 4, 4)
    assert read.breaker_reasons == {"timeout": 1}
    later = read.at(T0 + timedelta(seconds=66))  # the window and the slice it began in
    assert (later.runs, later.breaker_calls, later.breaker_failure_rate) == (4, 0, None)
    assert later.p50_ms == pytest.approx(8, rel=0.05)
    assert read.at(T0 + WINDOW + BUCKET).runs == 0
    opened(ledger)
    assert ledger.state(T0).at(T0 + timedelta(seconds=31)).breaker == "half_open"


def test_a_book_recorded_by_older_code_reads_with_its_probe_and_its_streak_rule() -> None:
    older = {
        "agent_queue": "agent-flaky",
        "config": {"enabled": True, "failures": 5, "recovery": "PT2S"},
        "breaker": "half_open",
        "consecutive_failures": 5,
        "open_until": "2026-11-23T12:00:02Z",
        "probe_until": "2026-11-23T12:01:03Z",
        "buckets": [{"start": "2026-11-23T12:00:00Z", "stats": {"succeeded": 0, "failed": 5}}],
        "transitions": [],
        "next_seq": 3,
        "last_report": "2026-11-23T12:00:03Z",
        "pool": {"size": None, "declared": {}, "permits": [], "waiters": []},
    }
    ledger = LedgerBook.model_validate(older)
    assert ledger.config.consecutive == 5, "failures: the former name of consecutive"
    at = T0 + timedelta(seconds=4)
    assert [ledger.claim_probe(f"run-{n}", at) for n in range(3)] == [True, True, False]
    ledger.probe_ended("", TIMEOUT, at)
    assert ledger.breaker == "open", "the older probe's outcome still counts"
    assert LedgerBook.model_validate(ledger.model_dump(mode="json")) == ledger


def test_an_older_workers_failure_report_counts_against_the_breaker() -> None:
    ledger = book(consecutive=2)
    report: dict[str, Any] = {
        "config": {"failures": 2},
        "succeeded": False,
        "failure_type": "temporary_failure",
    }
    ledger.report_outcome(OutcomeReport.model_validate(report), T0)
    ledger.report_outcome(OutcomeReport.model_validate({**report, "succeeded": True}), T0)
    assert ledger.consecutive_failures == 0
    ledger.report_outcome(OutcomeReport.model_validate(report), T0)
    ledger.report_outcome(OutcomeReport.model_validate(report), T0)
    assert ledger.breaker == "open"


def test_every_message_is_bounded_so_what_validates_can_be_applied() -> None:
    with pytest.raises(ValidationError, match="lease_s"):
        PermitRequest(run="r", lease_s=1e300)
    with pytest.raises(ValidationError, match="at most 10000000 runs per report"):
        StatsReport(stats=RunStats(succeeded=MAX_BATCH_RUNS + 1))
    with pytest.raises(ValidationError, match="failure_type"):
        OutcomeReport(succeeded=False, failure_type="x" * 201)
    far = RunStats.model_validate({"durations": {"100000": 2, "-100000": 1, str(MAX_BIN): 1}})
    assert far.durations == {MAX_BIN: 3, duration_bin(0): 1}, "out-of-range bins: the nearest"
    assert duration_bin(1e308) == MAX_BIN == duration_bin(math.inf)
    ledger = book()
    ledger.add_stats(far, T0)
    assert math.isfinite(ledger.state(T0).p50_ms or 0) and bin_duration(MAX_BIN) < 1e11


def test_breaker_config_from_an_agents_file() -> None:
    def breaker(**fields: Any) -> BreakerConfig:
        agent = {"kind": "http", "url": "http://localhost:1/", "breaker": fields}
        return AgentsFile.model_validate({"agents": {"flaky": agent}}).agents["flaky"].breaker

    declared = breaker(
        min_calls=10, failure_rate=0.25, window="2m", probes=2, count=["temporary_failure"]
    )
    assert (declared.min_calls, declared.failure_rate, declared.window) == (
        10,
        0.25,
        timedelta(minutes=2),
    )
    assert (declared.probes, declared.consecutive) == (2, None)
    assert declared.count == ["temporary_failure"]
    assert breaker(failures=3, recovery="5s").consecutive == 3, "the former name"
    refused: list[tuple[dict[str, Any], str]] = [
        ({"min_calls": 0}, "min_calls"),
        ({"failure_rate": 1.5}, "failure_rate"),
        ({"window": "2d"}, "window"),
        ({"probes": 0}, "probes"),
        ({"consecutive": 0}, "consecutive"),
        ({"count": ["circuit_open"]}, "count"),
        ({"ignore": ["x" * 201]}, "ignore"),
        ({"count": ["a"] * 33}, "count"),
        ({"failures": 3, "consecutive": 4}, "failures"),
        ({"threshold": 3}, "threshold"),
    ]
    for fields, field in refused:
        with pytest.raises(ValidationError, match=rf"(?s)breaker.*{field}"):
            breaker(**fields)


def test_a_breaker_is_quiet_while_closed_with_nothing_counted_against_its_agent() -> None:
    view = AgentLedgerState(agent_queue="agent-flaky")
    assert view.quiet
    assert not view.model_copy(update={"breaker_failures": 1}).quiet
    assert not view.model_copy(update={"consecutive_failures": 1}).quiet
    assert not view.model_copy(update={"breaker": "half_open"}).quiet
