"""When a chain's run takes events, starts agent runs and continues as new: its guard against
floods. A run continues as new early (well below the server's limits) and, past twice that,
holds new events back for the next run; one workflow task takes a bounded share of the queue
(`TaskShare`).

Once continue-as-new is due, the run waits for the agent runs it holds itself (the fast path's),
dispatching meanwhile as before; held up by them for `HELD_UP_AFTER` (a slow agent), it starts
each queued run in a `ChainRun` of its own, so none waits for that agent.

A run that may run agents as local activities continues as new, or ends, only in a workflow
task that records no run's outcome (`outcomes_unrecorded`): a local run's outcome is a marker
written with the task that took it, and the server refuses a task ending the run when new
signals arrived meanwhile, markers and all, so the run would run again on the retried task.
Which runs are recorded is counted against the timer the run starts for it, never against the
history's length: on a replay the SDK may hand a local run's outcome over in another activation
than the live run got it in, so the length a replay sees at its end can differ."""

from datetime import datetime, timedelta

from coord.models.chain.boundary import RunContext
from coord.models.chain.runs import ChainRuns
from coord.models.chain.spec import Subscription
from coord.models.wire.versions import (
    CHAIN_RECORDS_RUNS_BY_ITS_TIMER_PATCH,
    CHAIN_WAITS_FOR_ITS_LISTENERS_PATCH,
    FLOOD_PATCH,
)

RUN_HISTORY_BUDGET = 500
"""History events after which a run continues-as-new even below the server's limits. A worker
that lost the run from its cache (a restart; a task the server failed because more than 100
signals arrived while it ran) replays it all in its next task; under a flood that replay must
be short, or signals pile up during each replay and the server fails it again."""
HOLDING_BUDGETS = 8
"""How far past its history budget a chain takes events on while it waits for agent runs it holds
itself (each run it starts meanwhile goes to a `ChainRun`)."""
MIN_WAKE = timedelta(milliseconds=100)
HELD_UP_AFTER = timedelta(seconds=2)
"""How long a chain due to continue as new waits for the agent runs it holds before it counts as
held up by one: from then on it hands every run it starts to a `ChainRun`. Before, it goes on
dispatching in the chain, as the fast path does (most agents are done by then)."""
LISTENERS_GRACE = timedelta(seconds=60)
"""How long a chain with nothing left to do after its terminal event waits for its listeners
(aggregators publish their result into its log before they leave) before it ends without them."""


class ChainPacing:
    """The run's budgets against its history, and whether it dispatches or hands runs over."""

    def __init__(self, signals_per_run: int, runs: ChainRuns, context: RunContext) -> None:
        self._signals_per_run = signals_per_run
        self._runs = runs
        self._context = context
        self.keep_dispatching = False
        """Set once the run starts: whether it dispatches while continue-as-new is due."""
        self.hands_over = False
        """Set once the run starts: whether it may hand runs to `ChainRun`s of their own."""
        self._due_since: datetime | None = None
        """Since when continue-as-new has been due while agent runs held here kept it waiting."""
        self._ended_at: datetime | None = None
        """Since when the chain has had nothing left to do but wait for its listeners."""
        self._grace_armed = False
        self.runs_locally = False
        """Set once the run starts: whether its agents may run as local activities."""
        self._ended_in: int | None = None
        """The history length of the workflow task in which a run held here last ended (runs
        recorded before CHAIN_RECORDS_RUNS_BY_ITS_TIMER_PATCH compare it with the current one)."""
        self._ended = 0
        """How many runs held here ended in this run, possibly local ones."""
        self._recorded = 0
        """How many of them ended before a timer the run started, and which has fired since:
        their outcomes are in the history."""

    def note_time(self) -> None:
        """Brings `held_up` to the workflow's clock (once a turn)."""
        waiting = self.continue_as_new_due() and self._runs.holds()
        if not waiting:
            self._due_since = None
        elif self._due_since is None:
            self._due_since = self._context.now()

    def ran_here(self) -> None:
        """A run held here ended (succeeded or failed) in the current workflow task."""
        if self.runs_locally:
            self._ended += 1
            self._ended_in = self._context.history_length()

    def outcomes_unrecorded(self) -> int:
        """How many runs held here, possibly local, ended since the run's last recording timer
        started: their markers may not be in the history before the current task completes, so
        continue-as-new waits for the timer (`recorded`). Zero when there is nothing to wait
        for. Runs recorded before the patch waited only for a run that ended in the current
        workflow task (the history length at the task's start, the same all task)."""
        unrecorded = self._ended - self._recorded
        if not unrecorded or self._context.patched(CHAIN_RECORDS_RUNS_BY_ITS_TIMER_PATCH):
            return unrecorded
        return unrecorded if self._ended_in == self._context.history_length() else 0

    def recorded(self, runs: int) -> None:
        """The recording timer started once `runs` runs held here had ended has fired: the
        workflow tasks that took their outcomes are in the history."""
        self._recorded += runs

    def held_up(self) -> bool:
        """Whether agent runs held here have kept the due continue-as-new waiting HELD_UP_AFTER:
        a slow agent, for which no run started from now on waits."""
        since = self._due_since
        return (
            self.hands_over and since is not None and self._context.now() - since >= HELD_UP_AFTER
        )

    def hands_over_run(self, subscription: Subscription) -> bool:
        """Whether a run of `subscription` starting now goes to a `ChainRun` of its own."""
        held_up = self.held_up()
        return self.hands_over and subscription.hands_over(held_up)

    def wake_in(self) -> timedelta | None:
        """When to look again though nothing arrives: when runs queued behind a due continue-as-new
        would count as held up (so they are handed over without waiting for the slow agent), or
        when the wait for the listeners of an ended chain is over."""
        if self._ended_at is not None:
            self._grace_armed = True
            return max(self._ended_at + LISTENERS_GRACE - self._context.now(), MIN_WAKE)
        if not self.hands_over or self._due_since is None or not self._runs.queued():
            return None
        return max(self._due_since + HELD_UP_AFTER - self._context.now(), MIN_WAKE)

    def ends(self, ended: bool, listeners: list[str]) -> bool:
        """Whether a chain with nothing left to do after its terminal event (`ended`) ends now:
        with `listeners` attached it waits for them to leave, at most LISTENERS_GRACE (runs
        recorded before ended at once, and an aggregator's result could find the chain ended)."""
        if not ended or not listeners:
            self._ended_at = None
            return ended
        if not self._context.patched(CHAIN_WAITS_FOR_ITS_LISTENERS_PATCH):
            return True
        now = self._context.now()
        if self._ended_at is None:
            self._ended_at, self._grace_armed = now, False
        return now - self._ended_at >= LISTENERS_GRACE

    def grace_unarmed(self) -> bool:
        """The wait for listeners began after the run last asked `wake_in`: a turn arms it."""
        return self._ended_at is not None and not self._grace_armed

    def dispatchable(self) -> bool:
        return self._runs.can_dispatch() and self._may_dispatch_before_continuing()

    def continue_as_new_now(self, outbound: int) -> bool:
        """Due, with no agent run held here and nothing being sent (`outbound`)."""
        return self.continue_as_new_due() and not self._runs.holds() and not outbound

    def continue_as_new_due(self) -> bool:
        if self._context.continue_as_new_suggested():
            return True
        due = self._context.history_length() >= self._history_budget()
        return due and self._context.patched(FLOOD_PATCH)

    def holding_events(self) -> bool:
        """From twice the budget on, new events wait in the queue for the next run (they are
        carried), so that the forwards and agent runs they would start cannot keep this run from
        continuing-as-new. A run held up by agent runs it holds, which hands every run it starts
        over, takes events on (they cannot keep it longer than those agents) up to
        HOLDING_BUDGETS budgets: its history stays bounded however long the agents run."""
        budgets = HOLDING_BUDGETS if self.held_up() else 2
        overdue = self._context.history_length() >= budgets * self._history_budget()
        return overdue and self._context.patched(FLOOD_PATCH)

    def _history_budget(self) -> int:
        """Events may arrive far faster than the chain takes them: it continues-as-new at a
        quarter of the server's limit on signals per run (this run's history holds every signal
        it received), leaving the rest for what arrives meanwhile, or at `RUN_HISTORY_BUDGET`."""
        return min(self._signals_per_run // 4, RUN_HISTORY_BUDGET)

    def _may_dispatch_before_continuing(self) -> bool:
        """Once continue-as-new is due: on dispatching as before (until events are held back),
        or, held up, only runs handed over while held-here runs keep it waiting."""
        if not self.continue_as_new_due():
            return True
        if self.held_up():
            return self._runs.holds() and not self.holding_events()
        return self.keep_dispatching and not self.holding_events()
