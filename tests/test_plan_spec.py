"""A plan's spec is checked whole before anything runs (no server)."""

from typing import Any

import pytest

from coord.models.plan.spec import PlanSpec, ReviewGate
from coord.models.wire.specs import SpecError, parse_model


def plan(*tasks: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"plan_id": "p1", "tasks": list(tasks), **fields}


def problem(raw: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as error:
        parse_model(PlanSpec, raw, "plan.yaml")
    return str(error.value)


def test_defaults_come_from_the_seeds() -> None:
    spec = parse_model(PlanSpec, plan({"id": "a", "agent": "x"}), "plan.yaml")
    assert spec.max_workers == 5
    assert spec.tasks[0].timeout.total_seconds() == 300
    assert spec.progress_interval.total_seconds() == 30
    assert spec.name == spec.correlation_id == "p1"
    assert spec.workflow_id == "plan-p1"
    assert spec.dispatch == "agent_queues"


def test_an_unknown_dispatch_names_the_field_and_the_choices() -> None:
    assert problem(plan({"id": "a", "agent": "x"}, dispatch="eager")) == (
        "plan.yaml: dispatch: Input should be 'agent_queues' or 'coordinator'"
    )


def test_a_cycle_is_rejected_with_its_path() -> None:
    raw = plan(
        {"id": "a", "agent": "x", "depends_on": ["c"]},
        {"id": "b", "agent": "x", "depends_on": ["a"]},
        {"id": "c", "agent": "x", "depends_on": ["b"]},
    )
    assert (
        problem(raw)
        == "plan.yaml: tasks: dependency cycle a -> b -> c -> a; a plan must be acyclic"
    )


def test_unknown_dependency_repeated_id_and_unknown_member_name_the_field() -> None:
    unknown = plan({"id": "a", "agent": "x", "depends_on": ["zz"]})
    assert problem(unknown) == "plan.yaml: tasks[0].depends_on: 'zz' is not a task of this plan"
    repeated = plan({"id": "a", "agent": "x"}, {"id": "a", "agent": "y"})
    assert problem(repeated) == "plan.yaml: tasks[1].id: 'a' is repeated; task ids must be unique"
    member = plan({"id": "a", "member": "bob"})
    assert problem(member) == "plan.yaml: tasks[0].member: 'bob' is not a member of `team`"


def test_a_task_needs_exactly_one_doer_and_team_members_name_agents() -> None:
    assert "`agent` is required" in problem(plan({"id": "a"}))
    assert "not both" in problem(plan({"id": "a", "agent": "x", "member": "m"}))
    spec = parse_model(
        PlanSpec,
        plan({"id": "a", "member": "alice"}, team={"alice": {"role": "backend", "agent": "coder"}}),
        "plan.yaml",
    )
    assert spec.agent_of(spec.tasks[0]) == "coder"
    assert ("team.alice.agent", "coder") in spec.agents_named()


def test_review_stages_keep_the_seed_order() -> None:
    assert ReviewGate(reviewer="r").stages == ["spec_compliance", "code_quality"]
    reversed_stages = plan(
        {
            "id": "a",
            "agent": "x",
            "review": {"reviewer": "r", "stages": ["code_quality", "spec_compliance"]},
        }
    )
    assert "never after" in problem(reversed_stages)
    one_verifier = plan({"id": "a", "agent": "x", "verify": {"verifiers": ["b"]}})
    assert "tasks[0].verify.verifiers" in problem(one_verifier)
