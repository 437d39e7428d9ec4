"""The spec graph checks on their own (no server): what can ever happen, and what never settles."""

import re
from typing import Any

import pytest
from pydantic import ValidationError

from coord.models.chain.spec import ChainSpec
from coord.models.wire.graphs import Step, find_cycle, reach


def test_reach_follows_what_each_step_gives() -> None:
    steps = {
        "build": Step(needs=["Push"], gives=["Built"]),
        "test": Step(needs=["Built"], gives=["Tested"]),
        "deploy": Step(needs=["Tested", "Approved"], gives=["Deployed"], needs_all=True),
    }
    reached = reach(["Push"], steps)
    assert reached.happened == {"build", "test"}
    assert reached.present == {"Push", "Built", "Tested"}
    assert reach(["Push", "Approved"], steps).happened == {"build", "test", "deploy"}


def test_reach_any_needs_one_of_its_needs_and_order_does_not_matter() -> None:
    steps = {
        "late": Step(needs=["B"], gives=["C"]),
        "early": Step(needs=["X", "A"], gives=["B"]),
    }
    assert reach(["A"], steps).present == {"A", "B", "C"}
    assert reach([], steps).happened == set()


def test_find_cycle_reports_the_first_in_depth_first_order() -> None:
    edges = {0: [1], 1: [2, 0], 2: [1]}  # 0 → 1 → 2 meets 1 before 1 → 0 is tried
    assert find_cycle(edges) == [1, 2, 1]
    assert find_cycle({0: [1], 1: [2], 2: []}) is None
    assert find_cycle({0: [0]}) == [0, 0]


def test_find_cycle_is_linear_on_wide_and_deep_acyclic_graphs() -> None:
    """Every path of a layered graph is explored by a naive search (here 2**200 of them); one
    pass visits each node once. A 10,000-node line would exhaust a recursive search's stack."""
    layered = {i: [i + 1, i + 2] for i in range(400)} | {400: [], 401: []}
    assert find_cycle(layered) is None
    line = {i: [i + 1] for i in range(10_000)} | {10_000: [0]}
    cycle = find_cycle(line)
    assert cycle is not None and cycle[0] == cycle[-1] == 0 and len(cycle) == 10_002


def test_find_cycle_ignores_edges_to_unknown_nodes() -> None:
    assert find_cycle({"a": ["b", "missing"], "b": []}) is None
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]


def spec(*subscriptions: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"name": "graph", "triggers": ["Start"], "subscriptions": list(subscriptions), **fields}


def problem(raw: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as error:
        ChainSpec.model_validate(raw)
    return str(error.value)


def test_a_subscription_that_can_never_fire_is_named() -> None:
    raw = spec(
        {"agent": "a", "events": "Start", "publishes": {"on_success": "A"}},
        {"agent": "b", "events": ["A", "Missing"], "join": "all"},
    )
    assert "subscriptions[1] (b): can never fire; nothing publishes Missing and it is not " in (
        problem(raw)
    )


def test_a_join_fires_once_every_event_it_waits_for_is_published() -> None:
    raw = spec(
        {"agent": "a", "events": "Start", "publishes": {"on_success": "A", "on_failure": "F"}},
        {"agent": "b", "events": ["A", "F"], "join": "all", "publishes": {"on_start": "Done"}},
        terminal_event="Done",
    )
    assert ChainSpec.model_validate(raw).terminal_event == "Done"


def test_a_terminal_event_nobody_publishes_is_named() -> None:
    raw = spec({"agent": "a", "events": "Start"}, terminal_event="Done")
    assert "terminal_event: 'Done' is never published" in problem(raw)


def test_an_unfiltered_cycle_never_settles() -> None:
    raw = spec(
        {"agent": "a", "events": ["Start", "B"], "publishes": {"on_success": "A"}},
        {"agent": "b", "events": "A", "publishes": {"on_success": "B"}},
    )
    expected = "subscriptions[0] (a): cycle a → b → a never settles; add a filter or break"
    assert re.search(re.escape(expected), problem(raw))


def test_a_filter_on_the_cycle_lets_it_settle() -> None:
    raw = spec(
        {"agent": "a", "events": ["Start", "B"], "publishes": {"on_success": "A"}},
        {"agent": "b", "events": "A", "filter": "retry=true", "publishes": {"on_success": "B"}},
    )
    assert len(ChainSpec.model_validate(raw).subscriptions) == 2


def test_the_unfiltered_cycle_is_found_behind_a_filtered_one() -> None:
    raw = spec(
        {"agent": "a", "events": ["Start", "B"], "filter": "x=1", "publishes": {"on_success": "A"}},
        {"agent": "b", "events": ["A", "C"], "publishes": {"on_success": "B"}},
        {"agent": "c", "events": "B", "publishes": {"on_success": "C"}},
    )
    assert "subscriptions[1] (b): cycle b → c → b never settles" in problem(raw)
