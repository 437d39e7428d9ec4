"""The breaker's rules (coord.models.mesh.breaker), without a server: which failures count
against an agent (defaults, `count`, `ignore`, the kinds' health reasons), how a cancelled run
is judged from the SDK's cancellation details, and the batch that carries a streak."""

from datetime import timedelta

import pytest
from temporalio.activity import ActivityCancellationDetails
from temporalio.exceptions import ApplicationError

from coord.activities.mesh.breakers import cancel_cause
from coord.models.mesh.breaker import (
    ABANDONED,
    MAX_REASONS,
    SUCCEEDED,
    BreakerConfig,
    Verdict,
    cancel_verdict,
    failure_verdict,
    merged_reasons,
)
from coord.models.mesh.ledger import RunStats
from coord.models.wire.contract import FailureType, Health, failure, health_of

DEFAULTS = BreakerConfig()


@pytest.mark.parametrize(
    ("failure_type", "health"),
    [
        ("timeout", None),
        ("timeout", "timeout"),
        ("agent_unavailable", None),
        ("agent_blocked", None),
        ("temporary_failure", "connection"),
        ("temporary_failure", "http_5xx"),
        ("temporary_failure", "http_429"),
        ("temporary_failure", "signal"),
        ("TimeoutError", "timeout"),
    ],
)
def test_failures_saying_the_agent_is_unhealthy_count_by_default(
    failure_type: str, health: str | None
) -> None:
    assert DEFAULTS.counts(failure_type, health)


@pytest.mark.parametrize(
    ("failure_type", "health"),
    [
        ("temporary_failure", None),  # a python agent's own outcome, a demo's injected failure
        ("invalid_payload", None),
        ("unauthorized", None),
        ("review_rejected", None),
        ("ApplicationError", None),
        ("ValueError", None),
    ],
)
def test_failures_an_agent_answers_with_do_not_count_by_default(
    failure_type: str, health: str | None
) -> None:
    assert not DEFAULTS.counts(failure_type, health)


def test_a_declaration_counts_more_and_ignores_some_and_ignore_wins() -> None:
    config = BreakerConfig(count=["temporary_failure"], ignore=["http_429"])
    assert config.counts("temporary_failure", None)
    assert config.counts("temporary_failure", "http_5xx")
    assert not config.counts("temporary_failure", "http_429"), "ignore wins over count"
    assert not BreakerConfig(ignore=["timeout"]).counts("timeout", "timeout")


def test_the_verdict_names_a_failure_by_its_health_reason_else_its_type() -> None:
    assert failure_verdict(DEFAULTS, "temporary_failure", "http_5xx") == Verdict(
        ended="failed", counted=True, reason="http_5xx"
    )
    assert failure_verdict(DEFAULTS, "invalid_payload", None) == Verdict(
        ended="failed", counted=False, reason="invalid_payload"
    )
    assert len(failure_verdict(DEFAULTS, "x" * 500, None).reason) == 200, "bounded"


def test_the_kinds_health_reason_travels_in_the_failure_details() -> None:
    marked = failure(FailureType.TEMPORARY_FAILURE, "503", {"attempt": 1}, health=Health.HTTP_5XX)
    assert (marked.type, health_of(marked)) == ("temporary_failure", "http_5xx")
    assert marked.details[0] == {"attempt": 1}, "the caller's details first"
    assert health_of(failure(FailureType.TEMPORARY_FAILURE, "own")) is None
    assert health_of(ApplicationError("own", "detail", type="temporary_failure")) is None
    assert health_of(TimeoutError()) == "timeout"
    assert health_of(ConnectionRefusedError()) == "connection"
    assert health_of(ValueError()) is None


TIMED_OUT = Verdict(ended="failed", counted=True, reason="timeout")
S2C = timedelta(seconds=2)


def test_a_run_temporal_timed_out_is_a_timeout_of_the_agent() -> None:
    def judged(cause: str, ran_for: float, heartbeat: timedelta | None = None) -> Verdict:
        assert cause in ("timed_out", "gone", "abandoned")
        seconds = timedelta(seconds=ran_for)
        return cancel_verdict(DEFAULTS, cause, seconds, S2C, heartbeat)  # type: ignore[arg-type]

    assert judged("timed_out", 2.5) == TIMED_OUT, "the worker's own start-to-close timer"
    assert judged("gone", 2.4) == TIMED_OUT, "past start-to-close, the server forgot it"
    assert judged("gone", 1.0, timedelta(seconds=1)) == TIMED_OUT, "its heartbeat timeout"
    assert judged("gone", 1.0) == ABANDONED, "within its limits: its workflow ended"
    assert judged("abandoned", 5.0) == ABANDONED
    ignoring = BreakerConfig(ignore=["timeout"])
    assert not cancel_verdict(ignoring, "timed_out", S2C, S2C, None).counted


@pytest.mark.parametrize(
    ("details", "cause"),
    [
        (None, "abandoned"),
        (ActivityCancellationDetails(not_found=True, timed_out=True), "timed_out"),
        (ActivityCancellationDetails(not_found=True), "gone"),
        (ActivityCancellationDetails(cancel_requested=True), "abandoned"),
        (ActivityCancellationDetails(worker_shutdown=True, timed_out=True), "abandoned"),
        (ActivityCancellationDetails(paused=True), "abandoned"),
        (ActivityCancellationDetails(reset=True, not_found=True), "abandoned"),
    ],
)
def test_the_sdks_cancellation_details_say_why_a_run_was_cancelled(
    details: ActivityCancellationDetails | None, cause: str
) -> None:
    """As the dev server reports them: a start-to-close or heartbeat timeout the worker timed
    itself is `timed_out` and `not_found`; one the server saw first is `not_found`."""
    assert cancel_cause(details) == cause


def test_a_batch_carries_the_streak_at_its_end() -> None:
    failed = Verdict(ended="failed", counted=True, reason="timeout")
    own = Verdict(ended="failed", counted=False, reason="temporary_failure")
    first, second, third = RunStats(), RunStats(), RunStats()
    for verdict in (failed, failed):
        first.record(verdict, 1.0)
    for verdict in (failed,):
        second.record(verdict, 1.0)
    for verdict in (failed, own, failed, failed):
        third.record(verdict, 1.0)
    assert (first.streak, first.continued_streak(4)) == (2, 6)
    first.merge(second)
    assert (first.streak, first.counted) == (3, 3)
    first.merge(third)
    assert (first.streak, first.counted, first.failed) == (2, 6, 7)
    assert (first.continued_streak(4), first.reasons) == (2, {"timeout": 6})
    healthy = RunStats()
    healthy.record(ABANDONED, 1.0)
    healthy.record(SUCCEEDED, 1.0)
    assert (healthy.runs, healthy.continued_streak(4)) == (1, 0), "a success ends a streak"


def test_the_reasons_counted_stay_bounded_however_many_failure_types() -> None:
    reasons: dict[str, int] = {}
    for n in range(100):
        reasons = merged_reasons(reasons, {f"type-{n}": 1})
    assert len(reasons) == MAX_REASONS and sum(reasons.values()) == 100
    assert reasons["other"] == 100 - (MAX_REASONS - 1)
