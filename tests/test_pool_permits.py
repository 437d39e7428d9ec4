"""The pool's permit accounting (coord.models.mesh.ledger.PermitPool), without a server: an
agent's max_concurrent across all its workers as its ledger keeps it."""

from datetime import UTC, datetime, timedelta

from coord.models.mesh.config import AgentsFile
from coord.models.mesh.health import AgentHealth, AgentPool
from coord.models.mesh.ledger import KEEP_PLACE, POOL_WAIT, LedgerBook, PermitPool, PoolState

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
LEASE = 60.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_permits_are_granted_up_to_the_size_and_the_rest_wait_their_turn() -> None:
    pool = PermitPool()
    assert [pool.acquire(run, 2, LEASE, T0) for run in ("a", "b", "c", "d")] == [
        True,
        True,
        False,
        False,
    ]
    assert pool.state(T0) == PoolState(size=2, in_use=2, waiting=2)
    assert pool.acquire("a", 2, LEASE, at(1)), "a holder asking again still holds"
    pool.release("a", at(1))
    assert pool.holds("c") and not pool.holds("d"), "first come, first served"
    assert not pool.acquire("e", 2, LEASE, at(1)), "a newcomer queues behind d"
    pool.release("b", at(1))
    assert pool.holds("d") and pool.asking("e")
    assert pool.state(at(1)) == PoolState(size=2, in_use=2, waiting=1)


def test_a_lease_ends_on_its_own_and_its_permit_goes_to_the_next_waiter() -> None:
    pool = PermitPool()
    assert pool.acquire("dead-worker's run", 1, 5.0, T0)
    assert not pool.acquire("waiting", 1, LEASE, at(4))
    assert pool.next_deadline() == at(5), "the ledger wakes when the lease ends"
    pool.expire(at(5))
    assert not pool.holds("dead-worker's run")
    assert pool.holds("waiting")
    assert pool.permits[0].until == at(5 + LEASE), "the new lease runs from its grant"


def test_a_holder_asking_again_renews_its_lease() -> None:
    pool = PermitPool()
    assert pool.acquire("long run", 1, 5.0, T0)
    assert pool.acquire("long run", 1, 5.0, at(4))
    pool.expire(at(6))
    assert pool.holds("long run"), "renewed at 4 s: until 9 s"
    pool.expire(at(9))
    assert not pool.holds("long run")


def test_a_request_is_answered_in_bounded_time_and_asking_again_keeps_the_place() -> None:
    pool = PermitPool()
    pool.acquire("holder", 1, LEASE, T0)
    pool.acquire("first", 1, LEASE, T0)
    pool.acquire("second", 1, LEASE, at(1))
    assert pool.next_deadline() == T0 + POOL_WAIT, "when first's request is answered"
    pool.expire(T0 + POOL_WAIT)
    assert not pool.asking("first"), "answered: not granted"
    assert pool.state(T0 + POOL_WAIT) == PoolState(size=1, in_use=1, waiting=2)
    pool.release("holder", at(2.5))
    assert pool.holds("second"), "a run not listening is not handed a permit"
    assert not pool.acquire("first", 1, LEASE, at(2.6))
    pool.release("second", at(3))
    assert pool.holds("first"), "it asked again within KEEP_PLACE: still first in line"


def test_a_run_that_does_not_ask_again_leaves_the_line() -> None:
    pool = PermitPool()
    pool.acquire("holder", 1, LEASE, T0)
    pool.acquire("gave up", 1, LEASE, T0)
    pool.acquire("patient", 1, LEASE, T0)
    pool.acquire("patient", 1, LEASE, T0 + POOL_WAIT)
    pool.expire(T0 + POOL_WAIT + KEEP_PLACE)
    assert pool.state(T0 + POOL_WAIT + KEEP_PLACE) == PoolState(size=1, in_use=1, waiting=1)
    assert [waiter.run for waiter in pool.waiters] == ["patient"]


def test_a_run_that_stops_waiting_leaves_the_line() -> None:
    pool = PermitPool()
    pool.acquire("holder", 1, LEASE, T0)
    pool.acquire("cancelled", 1, LEASE, T0)
    pool.release("cancelled", at(1))
    assert pool.state(at(1)) == PoolState(size=1, in_use=1, waiting=0)
    pool.release("holder", at(1))
    assert pool.permits == [], "nobody waits any more"


def test_a_smaller_size_grants_nothing_until_enough_permits_are_back() -> None:
    pool = PermitPool()
    for run in ("a", "b", "c"):
        pool.acquire(run, 3, LEASE, T0)
    assert not pool.acquire("d", 2, LEASE, T0)
    pool.release("a", at(1))
    assert not pool.holds("d"), "two are still out, the size is two now"
    pool.release("b", at(1))
    assert pool.holds("d")


def test_an_agent_without_a_pool_has_none_in_its_ledger_state() -> None:
    book = LedgerBook(agent_queue="agent-x")
    assert book.state(T0).pool is None
    book.pool.acquire("r", 2, LEASE, T0)
    assert book.state(T0).pool == PoolState(size=2, in_use=1, waiting=0)
    assert book.state(at(LEASE)).pool == PoolState(size=2, in_use=0, waiting=0)
    assert LedgerBook.model_validate({"agent_queue": "old"}).pool == PermitPool(), (
        "a book carried from before pools had none"
    )


def test_coord_agents_pool_is_the_ledgers_across_workers_with_the_queues_backlog() -> None:
    book = LedgerBook(agent_queue="agent-x")
    for run in ("a", "b", "c"):
        book.pool.acquire(run, 2, LEASE, T0)
    row = AgentHealth.of(
        "x", "agent-x", [], T0, backlog=4, pool=AgentPool(in_use=4, free=0, waiting=4)
    )
    assert row.with_ledger(book.state(T0)).pool == AgentPool(in_use=2, free=0, waiting=5)
    no_permit_yet = LedgerBook(agent_queue="agent-x").state(T0)
    assert row.with_ledger(no_permit_yet).pool == row.pool, "no max_concurrent: the workers' slots"
    declared = row.with_ledger(no_permit_yet, max_concurrent=2).pool
    assert declared == AgentPool(in_use=0, free=2, waiting=4), "declared, no run yet"


def test_max_concurrent_per_worker_is_the_slot_limit_else_max_concurrent() -> None:
    agents = AgentsFile.model_validate(
        {
            "agents": {
                "spread": {
                    "kind": "python",
                    "callable": "m:f",
                    "max_concurrent": 4,
                    "max_concurrent_per_worker": 1,
                },
                "pooled": {"kind": "python", "callable": "m:f", "max_concurrent": 2},
                "free": {"kind": "python", "callable": "m:f"},
            }
        }
    ).agents
    assert [agents[name].worker_slots for name in ("spread", "pooled", "free")] == [1, 2, None]


def test_workers_declaring_different_sizes_get_the_smallest_while_they_take_part() -> None:
    pool = PermitPool()
    assert pool.acquire("a1", 5, LEASE, T0, worker="wide")
    assert pool.acquire("b1", 2, LEASE, T0, worker="narrow")
    assert not pool.acquire("a2", 5, LEASE, T0, worker="wide"), "narrow's 2 holds for all"
    assert pool.state(T0) == PoolState(size=2, in_use=2, waiting=1)
    pool.release("b1", at(1))
    assert pool.holds("a2"), "narrow's permit goes to the next in line"
    assert pool.state(at(1)) == PoolState(size=5, in_use=2, waiting=0), "narrow left"
    assert pool.acquire("a3", 5, LEASE, at(1), worker="wide")


def test_the_latest_request_sizes_the_pool_for_runs_recorded_before_the_patch() -> None:
    pool = PermitPool()
    assert pool.acquire("a1", 5, LEASE, T0, worker="wide", smallest=False)
    assert pool.acquire("b1", 2, LEASE, T0, worker="narrow", smallest=False)
    assert pool.acquire("a2", 5, LEASE, T0, worker="wide", smallest=False)
    assert pool.state(T0) == PoolState(size=5, in_use=3, waiting=0)
