"""A plan's worker slots (`SlotQueue`): at most `max_workers` held, waiting requests served by
priority, then declaration order, then the order asked; and the plan's rule over them (no slot
is granted while tasks that became startable wait to be launched); without a server."""

from coord.models.events.envelope import Priority
from coord.models.plan.slots import SlotQueue
from tests.test_plan_model import T1, model, started


def test_requests_are_served_by_priority_then_place_then_order_asked() -> None:
    slots = SlotQueue(max_workers=2)
    slots.request("late/run/1", "late", Priority.NORMAL, 0)
    slots.request("low/run/1", "low", Priority.LOW, 0)
    slots.request("first/run/1", "first", Priority.NORMAL, 0)
    slots.request("crit/run/1", "crit", Priority.CRITICAL, 5)
    assert slots.grantable()
    assert slots.grant() == ["crit/run/1", "late/run/1"]
    assert slots.full() and not slots.grantable() and slots.grant() == []
    slots.release("crit/run/1")
    assert slots.grant() == ["first/run/1"]
    assert slots.holders == ["late/run/1", "first/run/1"]


def test_a_request_released_while_it_waits_leaves_the_queue() -> None:
    slots = SlotQueue(max_workers=1)
    slots.request("a/run/1", "a", Priority.NORMAL, 0)
    slots.request("b/run/1", "b", Priority.NORMAL, 1)
    assert slots.waiting_line() == "a worker slot (2 waiting, max_workers 1)"
    slots.release("b/run/1")
    assert slots.grant() == ["a/run/1"]
    assert slots.waiting_line() is None


def test_the_plan_grants_only_once_the_startable_tasks_are_launched() -> None:
    plan = model({"id": "a"}, {"id": "b"}, max_workers=1)
    plan.request_slot("a/run/1", "a")
    assert plan.slots.grantable() and not plan.grantable()
    assert not plan.holds_slot("a/run/1")
    started(plan)
    assert plan.grantable() and plan.holds_slot("a/run/1")


def test_a_stopped_plan_drops_the_requests_still_waiting() -> None:
    plan = model({"id": "a"}, {"id": "b"}, max_workers=1)
    started(plan)
    plan.request_slot("a/run/1", "a")
    plan.request_slot("b/run/1", "b")
    assert plan.slots.grant() == ["a/run/1"]
    plan.stop("plan cancelled")
    plan.cancel_waiting(T1)
    assert plan.slots.waiting == [] and plan.slots.holders == ["a/run/1"]
