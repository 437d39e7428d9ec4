"""A plan's worker slots: every agent activity a plan runs (a task's run, each review, each
verifier, a vote) asks for one of `max_workers` slots, waits until it is granted and gives it
back when the activity closes. Waiting requests are served by their task's priority (critical
first), then by the task's declaration order, then in the order asked.

When a slot may be granted is the plan's to say (`PlanModel.grantable`: not while tasks that
became startable wait to be launched, so that their requests are ranked with the others)."""

from bisect import insort

from pydantic import BaseModel

from coord.models.events.envelope import Priority

PRIORITY_RANK = {Priority.CRITICAL: 0, Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}


class SlotRequest(BaseModel):
    """An agent activity waiting for a worker slot; `key` is its activity id."""

    key: str
    task: str
    rank: tuple[int, int, int]
    """(priority rank, declaration index, order asked): the smallest is served first."""


def _rank(request: SlotRequest) -> tuple[int, int, int]:
    return request.rank


class SlotQueue(BaseModel):
    """Who holds a slot and who waits for one, in rank order."""

    max_workers: int
    holders: list[str] = []
    """Activity ids holding a slot."""
    waiting: list[SlotRequest] = []
    """Requests waiting for a slot, kept in rank order."""
    asked: int = 0
    """Requests made so far: the last part of a request's rank."""

    def request(self, key: str, task_id: str, priority: Priority, position: int) -> None:
        """An activity (by its id) of the task at `position` in the declaration asks for a
        slot; it waits until `grant` serves it."""
        self.asked += 1
        rank = (PRIORITY_RANK[priority], position, self.asked)
        insort(self.waiting, SlotRequest(key=key, task=task_id, rank=rank), key=_rank)

    def full(self) -> bool:
        return len(self.holders) >= self.max_workers

    def grantable(self) -> bool:
        """Whether `grant` would give a slot now: a request waits and a slot is free."""
        return bool(self.waiting) and len(self.holders) < self.max_workers

    def grant(self) -> list[str]:
        """Free slots to the waiting requests ranked first; returns their keys, in rank order."""
        free = self.max_workers - len(self.holders)
        if free <= 0 or not self.waiting:
            return []
        granted, self.waiting = self.waiting[:free], self.waiting[free:]
        keys = [request.key for request in granted]
        self.holders += keys
        return keys

    def release(self, key: str) -> None:
        """The activity closed (or never started): its slot is free for the next grant."""
        if key in self.holders:
            self.holders.remove(key)
        else:
            self.waiting = [request for request in self.waiting if request.key != key]

    def waiting_line(self) -> str | None:
        """What the plan waits for in slots, in words (None when no request waits)."""
        if not self.waiting:
            return None
        return f"a worker slot ({len(self.waiting)} waiting, max_workers {self.max_workers})"
