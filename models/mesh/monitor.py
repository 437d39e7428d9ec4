"""What the agent monitor decides (a heartbeat monitor, turned into events): from each
reading of the deployment's agents it keeps every agent's last known state, and a change between
two readings is a transition, published as an `AgentHealthEvent` into the chains that use the
agent. Pure: the reading is the worker's (activities/agent_monitor.py), the timer loop and the
publishing the workflow's (workflows/agent_monitor.py)."""

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field

from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.health import HEARTBEAT_TIMEOUT, AgentHealth, AgentStatus
from coord.models.mesh.ledger import AgentLedgerState, BreakerStateName, BreakerTransition
from coord.models.wire.contract import AGENT_HEALTH_EVENT, AGENT_HEALTH_TOPIC, AGENT_MONITOR_SOURCE

READ_INTERVAL = timedelta(seconds=3)
"""A heartbeat monitor's reading interval (3 s). A killed worker was last seen at most when it died;
its agent reads unreachable from 10 s (the heartbeat timeout) after that, and the next reading
comes within 3 s, published well inside the 15 s the issue allows (a reading and a delivery
take well under a second on a healthy server)."""
FORGET_AFTER = timedelta(hours=1)
"""An agent unreachable this long is no longer asked about; once the server no longer reports a
worker for it either, it is forgotten, so the state does not grow with every agent ever served.
Seen again, it starts over silently, as every agent does on its first reading."""

HealthAspect = Literal["worker", "breaker"]
"""What changed: whether a worker serves the agent, or its circuit breaker's state."""


class AgentReading(BaseModel):
    """One agent at one reading."""

    agent: str
    status: AgentStatus
    reason: str
    """Why it has this status, in words: the worker seen, or since when none was."""
    breaker: BreakerStateName = "closed"
    """Its breaker's state at the reading (an open one past its window is half-open)."""
    breaker_reason: str = ""
    breaker_seq: int = 0
    """The sequence number of its breaker's latest transition (0: none yet)."""
    breaker_transitions: list[BreakerTransition] = Field(default_factory=list)
    """Its breaker's transitions after the one the monitor asked from, oldest first."""

    @classmethod
    def of(
        cls, row: AgentHealth, now: datetime, ledger: AgentLedgerState, seen: int | None
    ) -> "AgentReading":
        """From its `coord agents` row and its ledger; `seen` is the breaker transition the
        monitor has published up to (None: a new agent, whose past is not news)."""
        latest = ledger.transitions[-1] if ledger.transitions else None
        breaker = ledger.breaker_at(now)
        return cls(
            agent=row.agent,
            status=row.status,
            reason=_reason(row, now),
            breaker=breaker,
            breaker_reason=latest.reason
            if latest and latest.to_state == breaker
            else f"open for {ledger.recovery_s:g}s, the next run is the probe",
            breaker_seq=latest.seq if latest else 0,
            breaker_transitions=[
                t for t in ledger.transitions if seen is not None and t.seq > seen
            ],
        )


def _reason(row: AgentHealth, now: datetime) -> str:
    seen = [(worker.last_seen, worker.identity) for worker in row.workers if worker.last_seen]
    alive = [worker.identity for worker in row.workers if worker.alive(now)]
    if alive:
        return f"worker {', '.join(sorted(alive))} serving {row.task_queue}"
    timeout = f"heartbeat timeout {HEARTBEAT_TIMEOUT.total_seconds():.0f} s"
    if not seen:
        return f"no worker serves {row.task_queue} ({timeout})"
    last_seen, identity = max(seen)
    return f"no worker seen on {row.task_queue} since {last_seen:%H:%M:%S} ({identity}; {timeout})"


class HealthReading(BaseModel):
    """Every agent the monitor asked about or the server reported, at one moment."""

    at: datetime
    agents: list[AgentReading] = Field(default_factory=list)


class HealthRead(BaseModel):
    """What the monitor asks its reading for: the agents it knows (beside those discovered),
    each with the breaker transition it has published up to."""

    home: str
    agents: dict[str, int] = Field(default_factory=dict)


class HealthTransition(BaseModel):
    """The payload of an `AgentHealthEvent`."""

    agent: str
    aspect: HealthAspect
    previous: str
    status: str
    reason: str
    time: datetime

    def envelope(self) -> EventEnvelope:
        """The event the chains get; its id and timestamp are the workflow's, so a retried
        delivery is deduplicated by every chain."""
        return EventEnvelope.new(
            AGENT_HEALTH_EVENT,
            AGENT_MONITOR_SOURCE,
            payload=self.model_dump(mode="json"),
            topic=AGENT_HEALTH_TOPIC,
        )


class AgentKnown(BaseModel):
    """What the chains using an agent were last told of it (or, for a new agent, its baseline)."""

    status: AgentStatus
    since: datetime
    """When it was first read with this status."""
    breaker: BreakerStateName = "closed"
    breaker_seq: int = 0
    """Its breaker's latest logged transition published (or, for a new agent, already past)."""

    def worker_moves(self, agent: AgentReading, at: datetime) -> list[HealthTransition]:
        if agent.status == self.status:
            return []
        move = HealthTransition(
            agent=agent.agent,
            aspect="worker",
            previous=self.status,
            status=agent.status,
            reason=agent.reason,
            time=at,
        )
        self.status, self.since = agent.status, at
        return [move]

    def breaker_moves(self, agent: AgentReading, at: datetime) -> list[HealthTransition]:
        """The ledger's new transitions, in order, then the move its state made by time alone
        (open to half-open when the open window passed: the ledger sets no timers, so it logs
        that move only when next told something, and then it is not news again)."""
        moves: list[HealthTransition] = []
        for logged in agent.breaker_transitions:
            if logged.to_state != self.breaker:
                moves.append(
                    _breaker_move(
                        agent.agent, logged.from_state, logged.to_state, logged.reason, logged.at
                    )
                )
                self.breaker = logged.to_state
        if agent.breaker != self.breaker:
            moves.append(
                _breaker_move(agent.agent, self.breaker, agent.breaker, agent.breaker_reason, at)
            )
            self.breaker = agent.breaker
        self.breaker_seq = agent.breaker_seq
        return moves


class HealthPublication(BaseModel):
    """One AgentHealth event for the chains of one deployment (its coordinator queue `home`)
    that use the agent."""

    home: str
    agent: str
    event: EventEnvelope


class AgentMonitorState(BaseModel):
    """The monitor's record (its `state` query), carried across continue-as-new."""

    agents: dict[str, AgentKnown] = Field(default_factory=dict)
    readings: int = 0
    last_reading: datetime | None = None
    transitions: int = 0
    """Transitions seen, each published as an AgentHealthEvent to the chains using its agent."""

    def observe(self, reading: HealthReading) -> list[HealthTransition]:
        """The transitions since the last reading; an agent read for the first time has none
        (there is nothing it changed from), and one the reading leaves out is forgotten."""
        transitions: list[HealthTransition] = []
        read = {agent.agent: agent for agent in reading.agents}
        for name, agent in read.items():
            known = self.agents.get(name)
            if known is None:
                self.agents[name] = AgentKnown(
                    status=agent.status,
                    since=reading.at,
                    breaker=agent.breaker,
                    breaker_seq=agent.breaker_seq,
                )
                continue
            transitions += known.worker_moves(agent, reading.at)
            transitions += known.breaker_moves(agent, reading.at)
        for name in set(self.agents) - set(read):
            del self.agents[name]
        self.readings += 1
        self.last_reading = reading.at
        self.transitions += len(transitions)
        return transitions

    def watched(self, now: datetime) -> dict[str, int]:
        """The agents the next reading asks about (beside those the server reports served),
        with their breaker transition published up to: every known one but those unreachable
        for `FORGET_AFTER`, which a reading that does not report them forgets."""
        return {
            name: known.breaker_seq
            for name, known in sorted(self.agents.items())
            if known.status == "healthy" or now - known.since < FORGET_AFTER
        }


def _breaker_move(
    agent: str, previous: BreakerStateName, status: BreakerStateName, reason: str, at: datetime
) -> HealthTransition:
    return HealthTransition(
        agent=agent, aspect="breaker", previous=previous, status=status, reason=reason, time=at
    )
