"""The agent monitor's pure model (coord.models.mesh.monitor), without a server: which changes
between two readings are transitions, the AgentHealth event each becomes, what is forgotten; and
how a chain names its agents in `CoordAgents` (bounded, quote-free)."""

from datetime import UTC, datetime, timedelta

from coord.models.chain.spec import ChainSpec
from coord.models.mesh.health import AgentHealth, AgentStatus, WorkerSeen
from coord.models.mesh.ledger import AgentLedgerState, BreakerStateName, BreakerTransition
from coord.models.mesh.monitor import (
    FORGET_AFTER,
    AgentMonitorState,
    AgentReading,
    HealthReading,
)
from coord.models.wire.contract import (
    AGENT_HEALTH_EVENT,
    AGENT_HEALTH_TOPIC,
    AGENTS_SEARCH_BUDGET,
    MAX_AGENT_SEARCH_VALUE,
    agent_clause,
    agent_search_value,
    agent_search_values,
)

T0 = datetime(2026, 11, 23, 5, 0, tzinfo=UTC)


def reading(at: datetime, *agents: AgentReading) -> HealthReading:
    return HealthReading(at=at, agents=list(agents))


def agent(name: str, status: AgentStatus, breaker_seq: int = 0) -> AgentReading:
    return AgentReading(agent=name, status=status, reason=status, breaker_seq=breaker_seq)


def moved(seq: int, from_state: BreakerStateName, to_state: BreakerStateName) -> BreakerTransition:
    return BreakerTransition(
        seq=seq, at=T0, from_state=from_state, to_state=to_state, reason=f"{seq}"
    )


def test_a_first_reading_is_the_baseline_and_a_change_is_one_transition_each_way() -> None:
    state = AgentMonitorState()
    assert state.observe(reading(T0, agent("a", "healthy"), agent("b", "unreachable"))) == []
    later = T0 + timedelta(seconds=3)
    [down] = state.observe(reading(later, agent("a", "unreachable"), agent("b", "unreachable")))
    assert (down.agent, down.aspect, down.previous, down.status, down.time) == (
        "a",
        "worker",
        "healthy",
        "unreachable",
        later,
    )
    assert state.observe(reading(later, agent("a", "unreachable"), agent("b", "unreachable"))) == []
    [up_a, up_b] = state.observe(reading(later, agent("a", "healthy"), agent("b", "healthy")))
    assert [(t.agent, t.previous, t.status) for t in (up_a, up_b)] == [
        ("a", "unreachable", "healthy"),
        ("b", "unreachable", "healthy"),
    ]
    assert (state.readings, state.transitions) == (4, 3)


def test_the_reason_names_the_worker_seen_or_since_when_none_was() -> None:
    queue = "tq/agent-a"
    seen = WorkerSeen(identity="42@host", last_heartbeat=T0, state="running")
    healthy = AgentHealth.of("a", queue, [seen], T0 + timedelta(seconds=2))
    assert AgentReading.of(healthy, T0, AgentLedgerState(agent_queue=queue), None).reason == (
        "worker 42@host serving tq/agent-a"
    )
    gone = AgentHealth.of("a", queue, [seen], T0 + timedelta(seconds=11))
    reason = AgentReading.of(
        gone, T0 + timedelta(seconds=11), AgentLedgerState(agent_queue=queue), 0
    )
    assert reason.status == "unreachable"
    assert reason.reason == (
        "no worker seen on tq/agent-a since 05:00:00 (42@host; heartbeat timeout 10 s)"
    )
    never = AgentHealth.of("a", queue, [], T0)
    assert AgentReading.of(never, T0, AgentLedgerState(agent_queue=queue), 0).reason == (
        "no worker serves tq/agent-a (heartbeat timeout 10 s)"
    )


def test_breaker_transitions_after_the_one_published_are_news_a_new_agents_past_is_not() -> None:
    queue = "agent-a"
    row = AgentHealth.of("a", queue, [], T0)
    ledger = AgentLedgerState(
        agent_queue=queue,
        breaker="half_open",
        transitions=[moved(1, "closed", "open"), moved(2, "open", "half_open")],
    )
    new = AgentReading.of(row, T0, ledger, None)
    assert (new.breaker, new.breaker_seq, new.breaker_transitions) == ("half_open", 2, [])
    assert [t.seq for t in AgentReading.of(row, T0, ledger, 1).breaker_transitions] == [2]

    state = AgentMonitorState()
    assert state.observe(reading(T0, new)) == []
    assert state.watched(T0) == {"a": 2}
    ledger.transitions += [moved(3, "half_open", "closed"), moved(4, "closed", "open")]
    ledger.breaker = "open"
    transitions = state.observe(reading(T0, AgentReading.of(row, T0, ledger, 2)))
    assert [(t.aspect, t.previous, t.status, t.reason) for t in transitions] == [
        ("breaker", "half_open", "closed", "3"),
        ("breaker", "closed", "open", "4"),
    ]
    assert state.watched(T0) == {"a": 4}


def test_an_open_window_passing_is_news_once_though_the_ledger_logs_it_later() -> None:
    """The ledger sets no timers: past its open window a breaker reads half-open before the
    ledger logs the move (when a run claims the probe); the chains hear of it once."""
    queue = "agent-a"
    row = AgentHealth.of("a", queue, [], T0)
    ledger = AgentLedgerState(
        agent_queue=queue,
        breaker="open",
        open_until=T0 + timedelta(seconds=30),
        transitions=[moved(1, "closed", "open")],
    )
    state = AgentMonitorState()
    state.observe(reading(T0, AgentReading.of(row, T0, ledger, None)))
    later = T0 + timedelta(seconds=31)
    [half_open] = state.observe(reading(later, AgentReading.of(row, later, ledger, 1)))
    assert (half_open.previous, half_open.status, half_open.time) == ("open", "half_open", later)
    assert half_open.reason == "open for 30s, the next run is the probe"
    assert state.observe(reading(later, AgentReading.of(row, later, ledger, 1))) == []
    ledger.transitions += [moved(2, "open", "half_open"), moved(3, "half_open", "closed")]
    ledger.breaker, ledger.open_until = "closed", None
    [closed] = state.observe(reading(later, AgentReading.of(row, later, ledger, 1)))
    assert (closed.previous, closed.status, closed.reason) == ("half_open", "closed", "3")


def test_an_agent_unreachable_for_long_is_no_longer_asked_about_then_forgotten() -> None:
    state = AgentMonitorState()
    state.observe(reading(T0, agent("gone", "unreachable"), agent("up", "healthy")))
    much_later = T0 + FORGET_AFTER
    assert state.watched(much_later) == {"up": 0}
    state.observe(reading(much_later, agent("up", "healthy")))
    assert list(state.agents) == ["up"]
    assert (
        state.observe(reading(much_later, agent("gone", "healthy"), agent("up", "healthy"))) == []
    )


def test_a_transition_is_an_agent_health_event_with_its_payload() -> None:
    state = AgentMonitorState()
    state.observe(reading(T0, agent("a", "healthy")))
    [transition] = state.observe(reading(T0, agent("a", "unreachable")))
    envelope = transition.envelope()
    assert (envelope.event.type, envelope.routing.topic) == (AGENT_HEALTH_EVENT, AGENT_HEALTH_TOPIC)
    assert envelope.event.correlation_id is None, "each chain takes it as its own"
    assert envelope.payload == {
        "agent": "a",
        "aspect": "worker",
        "previous": "healthy",
        "status": "unreachable",
        "reason": "unreachable",
        "time": "2026-11-23T05:00:00Z",
    }


def test_a_chain_names_the_agents_its_subscriptions_run_on_their_own_queues() -> None:
    spec = ChainSpec.model_validate(
        {
            "name": "watch",
            "triggers": ["Kickoff", AGENT_HEALTH_EVENT],
            "agents": {"inline": {"kind": "shell", "argv": ["true"]}},
            "subscriptions": [
                {"agent": "python-pro", "events": "Kickoff"},
                {"agent": "inline", "events": "Kickoff"},
                {"agent": "pager", "events": AGENT_HEALTH_EVENT},
                {"vote": {"voters": ["v1", "v2", "v3"]}, "events": "Kickoff"},
            ],
        }
    )
    assert spec.served_agents() == ["python-pro", "pager", "v1", "v2", "v3"]


def test_coord_agents_values_are_bounded_distinct_and_quote_free() -> None:
    assert agent_search_value("python-pro") == "python-pro"
    quoted = agent_search_value("it's")
    assert "'" not in quoted and quoted != agent_search_value("it_s")
    assert agent_clause("it's") == f"CoordAgents = '{quoted}'"
    long = agent_search_value("x" * 500)
    assert len(long) == MAX_AGENT_SEARCH_VALUE and long != agent_search_value("x" * 501)
    values = agent_search_values(f"agent-{i:03}-{'y' * 50}" for i in range(100))
    assert values == sorted(values) and len(set(values)) == len(values)
    assert sum(len(value.encode()) for value in values) <= AGENTS_SEARCH_BUDGET
    assert agent_search_values(["b", "a", "b"]) == ["a", "b"]
