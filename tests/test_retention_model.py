"""The retention rules, without a server: what a stored object's owners and age decide, and the
settings' validation."""

from datetime import UTC, datetime, timedelta

import pytest

from coord.models.mesh.config import AgentsFile
from coord.models.ops.retention import (
    GcSettings,
    OwnerMark,
    RetentionSettings,
    Stored,
    gc_from_env,
    retention_from_env,
    scratchpad_verdict,
    verdict,
)
from coord.models.wire.specs import SpecError, parse_model

NOW = datetime(2026, 1, 10, tzinfo=UTC)
DAY = timedelta(days=1)


def owner(workflow_id: str, marked: timedelta, kind: str = "payloads") -> OwnerMark:
    mark = {"workflow_id": workflow_id, "namespace": "default", "kind": kind}
    return OwnerMark.model_validate({**mark, "marked_at": NOW - marked})


def stored(age: timedelta, *owners: OwnerMark) -> Stored:
    return Stored(name="ab/ab", modified=NOW - age, owners=list(owners))


def test_an_object_goes_only_when_old_and_every_owner_is_gone() -> None:
    settings = RetentionSettings()  # payloads: 7d
    old = stored(8 * DAY, owner("a", 8 * DAY), owner("b", 8 * DAY))
    assert verdict(old, settings, NOW, {("default", "a"): False, ("default", "b"): False}).remove
    held = verdict(old, settings, NOW, {("default", "a"): False, ("default", "b"): True})
    assert not held.remove and "referenced by b" in held.reason
    assert not verdict(stored(DAY, owner("a", DAY)), settings, NOW, {}).remove


def test_a_recent_mark_holds_an_object_whose_workflow_is_not_on_the_server_yet() -> None:
    marked_again = stored(8 * DAY, owner("a", timedelta(hours=1)))
    found = verdict(marked_again, RetentionSettings(), NOW, {("default", "a"): False})
    assert not found.remove and "stored for a 1h ago" in found.reason


def test_an_object_with_no_owner_is_kept_and_an_unasked_owner_counts_as_existing() -> None:
    assert "owner unknown" in verdict(stored(99 * DAY), RetentionSettings(), NOW, {}).reason
    assert not verdict(stored(99 * DAY, owner("a", 99 * DAY)), RetentionSettings(), NOW, {}).remove


def test_results_keep_their_own_retention() -> None:
    settings = RetentionSettings(results=timedelta(days=30))
    result = stored(10 * DAY, owner("plan-x", 10 * DAY, "results"))
    assert "younger than 30d" in verdict(result, settings, NOW, {}).reason


def test_a_scratchpad_goes_once_its_plan_ended_and_it_is_untouched_for_its_retention() -> None:
    assert scratchpad_verdict("p", NOW - 40 * DAY, False, 30 * DAY, NOW).remove
    assert not scratchpad_verdict("p", NOW - 40 * DAY, True, 30 * DAY, NOW).remove
    assert not scratchpad_verdict("p", NOW - DAY, False, 30 * DAY, NOW).remove


def test_the_environment_overrides_the_file_and_a_bad_value_names_its_variable() -> None:
    settings = retention_from_env(RetentionSettings(), {"COORD_RETENTION_PAYLOADS": "2d"})
    assert settings.payloads == 2 * DAY and settings.dead_letters == 30 * DAY
    with pytest.raises(SpecError, match=r"^COORD_RETENTION_SCRATCHPADS: 'soon' is not a dur"):
        retention_from_env(RetentionSettings(), {"COORD_RETENTION_SCRATCHPADS": "soon"})
    with pytest.raises(SpecError, match=r"^COORD_GC_BATCH: Input should be greater than"):
        gc_from_env(GcSettings(), {"COORD_GC_BATCH": "0"})
    assert gc_from_env(GcSettings(), {"COORD_GC_EVERY": "6h"}).every == timedelta(hours=6)


def test_the_agents_file_refuses_a_bad_retention_naming_the_field() -> None:
    document = {"worker": {"retention": {"payloads": "forever"}}}
    with pytest.raises(SpecError, match=r"^agents.yaml: worker.retention.payloads: 'forever'"):
        parse_model(AgentsFile, document, "agents.yaml")
    with pytest.raises(SpecError, match=r"worker.gc.every"):
        parse_model(AgentsFile, {"worker": {"gc": {"every": "0s"}}}, "agents.yaml")
    assert AgentsFile().worker.gc.every is None
