"""The plan's scheduler and state machine (`PlanModel`) and its activity ids, without a server."""

from coord.models.plan import (
    ActivityKey,
    parse_activity_id,
    review_activity_id,
    run_activity_id,
    verify_activity_id,
)


def test_activity_ids_name_their_task_kind_and_round_and_read_back() -> None:
    assert run_activity_id("build", 1) == "build/run/1"
    assert review_activity_id("build", "code_quality", 2) == "build/review/code_quality/2"
    assert verify_activity_id("build", "reviewer-b", 3) == "build/verify/reviewer-b/3"
    assert parse_activity_id("build/run/1") == ActivityKey("build", "run", 1)
    assert parse_activity_id("build/verify/reviewer-b/3") == ActivityKey(
        "build", "verify", 3, "reviewer-b"
    )
    for other in ["1", "build/run/x/1", "build/review/2", "build/run/", "build/sleep/1"]:
        assert parse_activity_id(other) is None
