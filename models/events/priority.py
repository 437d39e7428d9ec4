"""Where an agent run waits on a shared agent queue: Temporal's own task priority and fairness.

The envelope's `routing.priority` becomes the task's priority key (the server hands out lower
keys first), and its `routing.partition_key` (the correlation id unless the sender names
another, e.g. a tenant) becomes the fairness key: the server takes turns between the keys
waiting on one queue, so one busy correlation cannot starve the others. Pure: the workflows
attach it to `run_agent` (workflows/_runtime/agent_runs.py `agent_dispatch`)."""

import hashlib

from temporalio.common import Priority as TaskPriority

from coord.models.events.envelope import EventEnvelope, Priority

PRIORITY_KEYS: dict[Priority, int] = {
    Priority.CRITICAL: 1,
    Priority.HIGH: 2,
    Priority.NORMAL: 3,
    Priority.LOW: 4,
}
"""Temporal's keys run from 1 (first) to 5 by default, 3 being a task's default: `normal` keeps
it, so runs of this project and of anything else sharing the queue compare as they should."""
MAX_FAIRNESS_KEY_BYTES = 64
"""The server's bound on a fairness key."""


def fairness_key(key: str) -> str:
    """`key` as the server takes it: a longer one becomes a digest of itself, so two long
    correlation ids still get distinct turns."""
    if len(key.encode()) <= MAX_FAIRNESS_KEY_BYTES:
        return key
    return "~" + hashlib.sha256(key.encode()).hexdigest()[:32]


def task_priority(envelope: EventEnvelope, owner: str) -> TaskPriority:
    """The priority and fairness key of a run triggered by `envelope`; a run whose event names
    no partition (no correlation) takes its turns as `owner` (the workflow that runs it)."""
    return TaskPriority(
        priority_key=PRIORITY_KEYS[envelope.routing.priority],
        fairness_key=fairness_key(envelope.routing.partition_key or owner),
    )
