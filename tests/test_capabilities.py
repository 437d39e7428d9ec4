"""Capabilities: what agents declare they offer (no server needed)."""

import pytest
from pydantic import ValidationError

from coord.models.chain.spec import ChainSpec
from coord.models.checks import check_agents
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.assignment import (
    MAX_EXCLUDED,
    Assignment,
    Bid,
    CandidateReading,
    CapabilityRoute,
    RecentPicks,
    Strategy,
    bid_of,
    candidates,
    capability_match,
    choose,
    choose_each,
    no_candidate_message,
)
from coord.models.mesh.config import MAX_CAPABILITIES, AgentDeclarationBase, AgentsFile
from coord.models.plan.spec import PlanSpec
from coord.models.saga.spec import SagaSpec
from coord.models.wire.specs import SpecError, parse_model


def agents_file(capabilities: object) -> dict[str, object]:
    return {"agents": {"db": {"kind": "python", "callable": "m:f", "capabilities": capabilities}}}


def test_every_kind_declares_capabilities() -> None:
    declared = parse_model(
        AgentsFile,
        {
            "agents": {
                "py": {"kind": "python", "callable": "m:f", "capabilities": ["sql"]},
                "sh": {"kind": "shell", "argv": ["true"], "capabilities": ["shell", "db:pg"]},
                "web": {"kind": "http", "url": "http://x", "capabilities": ["http"]},
                "llm": {
                    "kind": "llm",
                    "base_url": "http://x",
                    "model": "m",
                    "api_key_env": "K",
                    "prompt": "p",
                    "capabilities": ["review"],
                },
                "plain": {"kind": "python", "callable": "m:f"},
            },
            "worker": {"secrets": ["K"]},
        },
        "agents.yaml",
    )
    assert {name: a.capabilities for name, a in declared.agents.items()} == {
        "py": ["sql"],
        "sh": ["shell", "db:pg"],
        "web": ["http"],
        "llm": ["review"],
        "plain": [],
    }


@pytest.mark.parametrize(
    ("capabilities", "problem"),
    [
        ([""], "agents.db.capabilities[0]: String should match pattern"),
        (["a b"], "agents.db.capabilities[0]: String should match pattern"),
        (["x"] * (MAX_CAPABILITIES + 1), "agents.db.capabilities: List should have at most"),
        ("sql", "agents.db.capabilities: Input should be a valid list"),
    ],
)
def test_a_bad_capability_is_named(capabilities: object, problem: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_model(AgentsFile, agents_file(capabilities), "agents.yaml")
    assert problem in str(error.value)


CATALOGUE = {
    "db-1": ["sql", "postgres"],
    "db-2": ["sql", "postgres", "backup"],
    "web": ["http"],
    "half": ["sql"],
}


def test_capability_match_is_the_share_of_what_is_required() -> None:
    assert capability_match(["sql", "postgres"], ["sql", "postgres", "backup"]) == pytest.approx(
        2 / 3
    )
    assert capability_match(["sql"], ["sql"]) == 1.0
    assert capability_match([], ["sql"]) == 0.0


def test_candidates_need_more_than_seventy_percent() -> None:
    assert candidates(CATALOGUE, ["sql", "postgres"]) == {"db-1": 1.0, "db-2": 1.0}
    # 3 of 4 is 0.75: in; 2 of 3 is 0.67: out
    four = ["sql", "postgres", "backup", "replica"]
    assert candidates(CATALOGUE, four) == {"db-2": 0.75}
    assert candidates(CATALOGUE, ["sql", "postgres", "backup"]) == {"db-2": 1.0}
    assert candidates(CATALOGUE, ["gpu"]) == {}
    assert "agents offering some: db-1 (0.50), db-2 (0.50), half (0.50)" in (
        no_candidate_message(CATALOGUE, ["sql", "gpu"])
    )


def reading(agent: str, **fields: object) -> CandidateReading:
    return CandidateReading.model_validate(
        {"agent": agent, "capability_match": 1.0, "healthy": True, "pollers": 1, **fields}
    )


def test_a_bid_weighs_match_load_history_and_pool_as_the_seed_does() -> None:
    bid = bid_of(
        reading("a", capability_match=0.75, backlog=2, pollers=2, success_rate=0.5, free_share=0.2)
    )
    # load: 1 run waiting per worker -> 1 / (1 + 1) = 0.5
    assert bid.load == 0.5
    assert bid.bid == pytest.approx(0.4 * 0.75 + 0.3 * 0.5 + 0.2 * 0.5 + 0.1 * 0.2)
    unknown = bid_of(reading("b"))
    assert (unknown.past_performance, unknown.resource_availability, unknown.bid) == (1.0, 1.0, 1.0)
    unserved = bid_of(reading("c", healthy=False, pollers=0))
    assert (unserved.load, unserved.work_per_poller, unserved.available) == (1.0, None, False)


def test_load_counts_runs_waiting_running_and_just_picked() -> None:
    busy = bid_of(reading("a", backlog=1, running=2, picked=1, pollers=2))
    assert (busy.work_per_poller, busy.load) == (2.0, round(2 / 3, 6))
    assert busy.bid == pytest.approx(0.4 + 0.3 * (1 / 3) + 0.2 + 0.1)


def test_least_loaded_takes_the_lowest_work_per_worker() -> None:
    route = CapabilityRoute(capabilities=["sql"])
    chosen = choose(
        route,
        [
            reading("a", backlog=4, pollers=2),
            reading("b", backlog=3, pollers=1),
            reading("c", backlog=0, healthy=False, pollers=0),
        ],
    )
    assert chosen is not None
    assert chosen.agent == "a"
    assert [b.agent for b in chosen.bids] == ["a", "b", "c"]


def test_the_auction_takes_the_highest_bid() -> None:
    route = CapabilityRoute(capabilities=["sql"], strategy="auction")
    busy_but_reliable = reading("a", backlog=9, success_rate=1.0)
    idle_but_failing = reading("b", backlog=0, success_rate=0.0)
    chosen = choose(route, [busy_but_reliable, idle_but_failing])
    assert chosen is not None
    # a: 0.4 x 1 + 0.3 x (1 - 9/10) + 0.2 x 1 + 0.1 x 1 = 0.73; b: 0.4 + 0.3 x 1 + 0.2 x 0 + 0.1
    assert [(b.agent, b.bid) for b in chosen.bids] == [("b", 0.8), ("a", 0.73)]
    assert chosen.agent == "b"
    assert chosen.describe() == "b (auction over sql: b 0.800, a 0.730)"


@pytest.mark.parametrize("strategy", ["least_loaded", "auction"])
def test_ties_go_to_the_least_recently_picked_then_keep_the_readings_order(
    strategy: Strategy,
) -> None:
    route = CapabilityRoute(capabilities=["sql"], strategy=strategy)
    recent = RecentPicks()
    readings = [reading("b"), reading("a"), reading("c")]
    picked = []
    for _ in range(4):
        chosen = choose(route, readings, recent)
        assert chosen is not None
        recent.picked(chosen.agent)
        picked.append(chosen.agent)
    assert picked == ["b", "a", "c", "b"], "never by name: in turns"


@pytest.mark.parametrize("strategy", ["least_loaded", "auction"])
def test_picks_made_together_spread_over_idle_agents(strategy: Strategy) -> None:
    """Six runs of one wave among three idle agents: two each, whatever the order read."""
    catalogue = {"db-1": ["sql"], "db-2": ["sql"], "db-3": ["sql"], "web": ["http"]}
    route = CapabilityRoute(capabilities=["sql"], strategy=strategy)
    readings = {name: reading(name) for name in ("db-3", "db-1", "db-2")}
    picks = choose_each([route] * 6, catalogue, readings, RecentPicks())
    agents = [pick.agent for pick in picks if pick is not None]
    assert agents == ["db-3", "db-1", "db-2", "db-3", "db-1", "db-2"]
    last = picks[-1]
    assert last is not None
    assert {bid.agent: bid.picked for bid in last.bids} == {"db-3": 2, "db-1": 2, "db-2": 1}


def test_picks_made_together_weigh_load_already_there() -> None:
    """db-1 runs two already: the wave's four runs fill db-2 and db-3 up to it first."""
    catalogue = {"db-1": ["sql"], "db-2": ["sql"], "db-3": ["sql"]}
    readings = {
        "db-1": reading("db-1", running=2),
        "db-2": reading("db-2"),
        "db-3": reading("db-3"),
    }
    route = CapabilityRoute(capabilities=["sql"])
    picks = choose_each([route] * 4, catalogue, readings, RecentPicks())
    assert sorted(pick.agent for pick in picks if pick is not None) == [
        "db-2",
        "db-2",
        "db-3",
        "db-3",
    ]


def test_a_route_without_candidates_does_not_stop_the_others() -> None:
    catalogue = {"db": ["sql"]}
    sql, gpu = CapabilityRoute(capabilities=["sql"]), CapabilityRoute(capabilities=["gpu"])
    picks = choose_each([gpu, sql], catalogue, {"db": reading("db")}, RecentPicks())
    assert picks[0] is None
    assert picks[1] is not None and picks[1].agent == "db"


@pytest.mark.parametrize("strategy", ["least_loaded", "auction"])
def test_an_open_breaker_or_no_live_worker_is_picked_only_when_nobody_else_can(
    strategy: Strategy,
) -> None:
    route = CapabilityRoute(capabilities=["sql"], strategy=strategy)
    open_breaker = reading("a", breaker="open", success_rate=1.0)
    unserved = reading("b", healthy=False, pollers=0)
    half_open = reading("c", breaker="half_open", backlog=3)
    chosen = choose(route, [open_breaker, unserved, half_open])
    assert chosen is not None
    assert chosen.agent == "c", "a half-open breaker lets its probe through"
    assert [bid.available for bid in chosen.bids] == [True, False, False]
    fallback = choose(route, [unserved, open_breaker])
    assert fallback is not None and fallback.agent in {"a", "b"}
    assert "breaker open" in chosen.describe() and "b unreachable" in chosen.describe()


def test_excluded_agents_are_no_candidates() -> None:
    route = CapabilityRoute(capabilities=["sql"], exclude=["a"])
    chosen = choose(route, [reading("a"), reading("b", backlog=9)])
    assert chosen is not None
    assert (chosen.agent, [bid.agent for bid in chosen.bids]) == ("b", ["b"])
    assert choose(route, [reading("a")]) is None
    catalogue = {"a": ["sql"], "b": ["sql", "x"]}
    message = no_candidate_message(catalogue, ["sql"], ["a", "b", "zz"])
    assert message.startswith("no declared agent but those excluded (a, b) offers more than 70%")


def test_a_route_reads_as_before_unless_it_excludes() -> None:
    """Wire-compatible: a route without `exclude` serializes as it did before the field."""
    plain = CapabilityRoute(capabilities=["sql"])
    assert plain.model_dump() == {"capabilities": ["sql"], "strategy": "least_loaded"}
    assert CapabilityRoute.model_validate(plain.model_dump()) == plain
    excluding = CapabilityRoute(capabilities=["sql"], exclude=["db-1"])
    assert CapabilityRoute.model_validate_json(excluding.model_dump_json()) == excluding
    with pytest.raises(ValidationError, match="exclude"):
        CapabilityRoute(capabilities=["sql"], exclude=["x"] * (MAX_EXCLUDED + 1))


def test_a_bid_recorded_before_running_and_breakers_were_weighed_still_reads() -> None:
    old = {
        "agent": "a",
        "capability_match": 1.0,
        "healthy": True,
        "backlog": 0,
        "pollers": 1,
        "backlog_per_poller": 0.0,
        "load": 0.0,
        "past_performance": 1.0,
        "resource_availability": 1.0,
        "bid": 1.0,
    }
    bid = Bid.model_validate(old)
    assert (bid.available, bid.running, bid.breaker, bid.work_per_poller) == (
        True,
        0,
        "closed",
        0.0,
    )
    old_choice = Assignment(capabilities=["sql"], strategy="least_loaded", agent="a", bids=[bid])
    assert old_choice.describe() == "a (least_loaded over sql: a work/worker 0)"


def test_a_candidate_with_a_worker_wins_over_one_without() -> None:
    """A perfect bid on a queue no worker serves would only wait there."""
    route = CapabilityRoute(capabilities=["sql", "x"], strategy="auction")
    unserved = reading("a", healthy=False, pollers=0)
    served = reading("b", capability_match=0.75, backlog=5, success_rate=0.2, free_share=0.0)
    chosen = choose(route, [unserved, served])
    assert chosen is not None
    assert chosen.agent == "b"
    assert choose(route, [unserved]) is not None
    assert choose(route, []) is None


def saga_step(**fields: object) -> dict[str, object]:
    return {"saga_id": "s", "steps": [{"name": "load", **fields}]}


def chain_with(**fields: object) -> dict[str, object]:
    return {"name": "c", "triggers": ["Go"], "subscriptions": [{"events": ["Go"], **fields}]}


def plan_with(**fields: object) -> dict[str, object]:
    return {"plan_id": "p", "tasks": [{"id": "t", **fields}]}


@pytest.mark.parametrize(
    ("model", "document", "problem"),
    [
        (
            SagaSpec,
            saga_step(agent="db", capability="sql"),
            "saga.yaml: steps[0]: give one of `agent` or `capability`, not both agent and "
            "capability",
        ),
        (
            ChainSpec,
            chain_with(),
            "chain.yaml: subscriptions[0]: `agent` is required (or `vote`, `capability`)",
        ),
        (
            ChainSpec,
            chain_with(capability="sql", capabilities=["sql"]),
            "chain.yaml: subscriptions[0]: give `capability` or `capabilities`, not both",
        ),
        (
            PlanSpec,
            plan_with(member="m", capabilities=["sql"]),
            "plan.yaml: tasks[0]: give one of `agent`, `member`, `vote` or `capability`, not both "
            "member and capability",
        ),
        (
            PlanSpec,
            plan_with(capability="sql", assignment="cheapest"),
            "plan.yaml: tasks[0].assignment: Input should be 'least_loaded' or 'auction'",
        ),
        (
            SagaSpec,
            saga_step(capabilities=["sql", "no spaces"]),
            "saga.yaml: steps[0].capabilities[1]: String should match pattern "
            "'^[A-Za-z0-9][A-Za-z0-9._:-]*$'",
        ),
    ],
)
def test_a_run_names_an_agent_or_capabilities(
    model: type[SagaSpec | ChainSpec | PlanSpec], document: dict[str, object], problem: str
) -> None:
    source = {SagaSpec: "saga.yaml", ChainSpec: "chain.yaml", PlanSpec: "plan.yaml"}[model]
    with pytest.raises(SpecError) as error:
        parse_model(model, document, source)
    assert str(error.value) == problem


def test_a_routed_run_names_no_agent() -> None:
    saga = parse_model(SagaSpec, saga_step(capability="sql", assignment="auction"), "s")
    assert (saga.steps[0].agent, saga.steps[0].route) == (
        "",
        CapabilityRoute(capabilities=["sql"], strategy="auction"),
    )
    chain = parse_model(ChainSpec, chain_with(capabilities=["sql", "pg"]), "c")
    assert chain.subscriptions[0].name == "sql+pg"
    plan = parse_model(PlanSpec, plan_with(capability="sql"), "p")
    assert plan.agents_named() == []


def test_a_worker_serving_some_agents_keeps_the_whole_catalogue() -> None:
    """The coordinator worker on a host running `--only a` still routes to b, served elsewhere."""
    registry = AgentRegistry()
    for name, offered in (("a", ["sql"]), ("b", ["sql", "gpu"])):
        registry.register(name, declaration=AgentDeclarationBase(capabilities=offered))(noop)
    served = registry.only(["a"])
    assert list(served) == ["a"]
    assert served.catalogue == {"a": ["sql"], "b": ["sql", "gpu"]}


async def noop(event: object, context: object) -> None:
    return None


def test_the_pre_start_check_wants_an_agent_offering_what_is_asked() -> None:
    registry = AgentRegistry()
    registry.register("pg", declaration=AgentDeclarationBase(capabilities=["sql"]))(noop)
    check_agents("saga.yaml", parse_model(SagaSpec, saga_step(capability="sql"), "s"), registry)
    chain = parse_model(ChainSpec, chain_with(capabilities=["sql", "gpu"]), "c")
    with pytest.raises(SpecError) as error:
        check_agents("chain.yaml", chain, registry)
    assert str(error.value) == (
        "chain.yaml: subscriptions[0].capabilities: no declared agent offers more than 70% of "
        "sql, gpu; agents offering some: pg (0.50)"
    )
