"""A worker's local activity slots, shared among its agents: one agent's local runs hold at most
half of them (`LocalShares`), so an agent that hangs leaves the rest to the others.

A workflow task stays open while its local runs run, and a local run waits for a slot before it
starts: with every slot held by an agent that hangs, every other agent's local runs would wait
until that agent's runs timed out. A local execution of an agent that holds its share fails at
once with `local_share_full`, without calling the agent; the workflow sends the run on as an
activity task on the agent's own queue (`_AgentRun` in workflows/_runtime/agent_runs.py), whose
worker's slots are the agent's alone. A batch of runs holds one slot, counted for each agent it
is running."""

import contextlib
from collections import Counter, defaultdict
from collections.abc import Iterator

from temporalio import activity
from temporalio.exceptions import ApplicationError

from coord.models.wire.contract import FailureType, failure

LOCAL_ACTIVITY_SLOTS = 100
"""The local activities the coordinator worker runs at once (the SDK's default)."""

Slot = tuple[str, str, int]
"""A local activity under way: its workflow run, its activity id and its attempt."""


class LocalShares:
    """Which of the worker's `slots` each agent's local runs hold, and the share none may pass:
    half of them, so that any one agent that hangs leaves the other half to the others."""

    def __init__(self, slots: int = LOCAL_ACTIVITY_SLOTS) -> None:
        self.slots = slots
        self._share = max(1, slots // 2)
        self._held: defaultdict[str, Counter[Slot]] = defaultdict(Counter)

    @contextlib.contextmanager
    def holding(self, agent: str) -> Iterator[None]:
        """Around one run of `agent` in this activity: counted in the slot of the local activity
        under way, or refused (`local_share_full`) when the agent already holds its share of
        slots elsewhere. An activity task holds no local slot: never counted."""
        info = activity.info()
        if not info.is_local:
            yield
            return
        slot = (info.workflow_run_id or "", info.activity_id, info.attempt)
        self.take(agent, slot)
        try:
            yield
        finally:
            self.give_back(agent, slot)

    def take(self, agent: str, slot: Slot) -> None:
        """Counts a run of `agent` in `slot`; raises `local_share_full` past the share."""
        held = self._held[agent]
        if slot not in held and len(held) >= self._share:
            raise share_full(agent, self._share)
        held[slot] += 1

    def give_back(self, agent: str, slot: Slot) -> None:
        held = self._held[agent]
        held[slot] -= 1
        if held[slot] <= 0:
            del held[slot]
        if not held:
            del self._held[agent]

    def held(self, agent: str) -> int:
        """The slots `agent`'s local runs hold now."""
        return len(self._held.get(agent, ()))


def share_full(agent: str, share: int) -> ApplicationError:
    """`local_share_full`: the agent was not called; the workflow sends the run on as an
    activity task on the agent's queue (not retried as a local activity)."""
    return failure(
        FailureType.LOCAL_SHARE_FULL,
        f"agent {agent!r} holds its share of the worker's local activity slots ({share}); "
        "the run goes on as an activity task",
        non_retryable=True,
    )
