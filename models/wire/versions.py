"""Every patch id a workflow branches on, with the date it was introduced and what it changed.

A patch id is part of running workflows' histories: it never changes and is never reused. Code
that changes the commands a workflow issues goes behind a new one (`workflow.patched(ID)`), named
here with what it changed, so replaying a history recorded before the change takes the old path."""

CHAIN_SEND_ONCE_PATCH = "saga-stops-sending-to-a-missing-chain"
"""Since 2026-11-22, in saga: Runs after this patch stop sending events once a send finds no
running chain."""

DEADLINE_FIRST_PATCH = "aggregator-deadline-first"
"""Since 2026-11-22, in aggregator: Runs recorded before it attached and looked back before
arming the deadline, parked every event after the end, and never detached nor continued-as-
new; they replay that way."""

DEAD_LETTER_PATCH = "dead-letter-queue"
"""Since 2026-11-22, in _runtime.common: Runs after it park what they reject in the dead-letter
queue (one `DeadLetterEntry` workflow per letter); runs recorded before only logged it."""

DECODE_IN_TASK_PATCH = "chain-decodes-events-in-bounded-tasks"
"""Since 2026-11-22, in chain.reactive: Runs after it decode incoming events in bounded tasks of
their own, not in the signal handlers, and carry undecoded events across continue-as-new as
JSON text."""

FLOOD_PATCH = "chain-bounded-tasks-and-signal-budget"
"""Since 2026-11-22, in chain.reactive: Runs after it take events in bounded tasks within a
signal budget per workflow task and keep large events by reference, so a flood loses nothing."""

KEEP_DISPATCHING_PATCH = "chain-dispatch-while-continuing"
"""Since 2026-11-22, in chain.reactive: Runs after it go on dispatching queued agent runs while
a due continue-as-new waits for runs in flight."""

KEPT_RECORD_PATCH = "aggregator-cancel-keeps-record"
"""Since 2026-11-22, in aggregator: Cancelled runs started after it keep their final record in
the memo; older ones replay without."""

LIFECYCLE_NOTICES_PATCH = "chain-lifecycle-notices"
"""Since 2026-11-22, in chain.reactive: Runs after it neither forward lifecycle notices to
listeners nor park them when rejected."""

PARK_BEFORE_INVALID_INPUT_FAILS_PATCH = "park-before-invalid-input-fails"
"""Since 2026-11-22, in _runtime.common: A run whose input is invalid still parks the signals it
rejected before it fails."""

PARK_QUEUED_RUNS_PATCH = "chain-park-queued-runs"
"""Since 2026-11-22, in chain.reactive: Runs after it park the agent runs still queued when the
chain ends, instead of dropping them."""

SAGA_EVENTS_PATCH = "saga-events-to-chain"
"""Since 2026-11-22, in saga: Runs started after this patch announce their events to the
correlation's chain and keep their final record in the memo when cancelled; older runs replay
without either."""

SETTLE_PATCH = "chain-await-every-send"
"""Since 2026-11-22, in chain.reactive: Runs after it count a background send or parking from
when it is made, not from when its task first runs, so a run ending or continuing as new in
the same workflow task awaits it; events arriving while the chain ends are parked."""

AGENTS_ATTRIBUTE_PATCH = "chain-agents-search-attribute"
"""Since 2026-11-23, in chain.reactive: Runs after it name their agents in `CoordAgents`, where
the agent monitor finds them."""

AGENT_QUEUES_PATCH = "agents-on-their-own-task-queues"
"""Since 2026-11-23, in _runtime.common: Runs after this patch dispatch a named agent's runs to
the agent's own task queue, with a schedule-to-start limit; runs recorded before ran every
agent on the workflow's queue."""

AGENT_RUN_PRIORITY_PATCH = "agent-runs-by-priority-and-fairness"
"""Since 2026-11-23, in _runtime.common: Runs after this patch give each `run_agent` the task
priority of its event and the fairness key of its correlation (models/task_priority.py); runs
recorded before set neither."""

CAPABILITY_ROUTING_PATCH = "runs-routed-by-capability"
"""Since 2026-11-23, in _runtime.common: Runs after this patch may name capabilities instead of
an agent (a spec field that did not exist before): they ask the coordinator's `choose_agent`
which agent runs."""

PERMIT_POOL_PATCH = "ledger-permit-pool"
"""Since 2026-11-23, in mesh.ledger: Runs after this patch keep the pool's leases and waits on
time (a timer at the next end); runs recorded before waited only for their history to fill."""

SIGNALS_RUN_TO_THE_END_PATCH = "external-signals-are-never-cancelled"
"""Since 2026-11-23, in _runtime.common: A cancel never reaches a signal this workflow sent to
another one (see `signal_if_running`)."""

SLOTS_GRANTED_BY_THE_PLAN_PATCH = "plan-slots-granted-by-the-plan"
"""Since 2026-11-23, in plan.task: Runs after this patch wait for a worker slot on a future the
plan's loop resolves when it grants the slot; runs recorded before wait with one wait
condition per request."""

SMALLEST_POOL_PATCH = "ledger-pool-smallest-declaration"
"""Since 2026-11-23, in mesh.ledger: Runs after this patch size the pool by the smallest
max_concurrent of the workers taking part (`PermitPool.size`); runs recorded before took the
latest request's."""

STRICT_VERDICTS_PATCH = "plan-strict-verdicts"
"""Since 2026-11-23, in plan.gates: Runs after it hold reviewers' and verifiers' verdicts to the
strict shape: an unknown key, a `passed` that is not a JSON boolean, or a failing verdict
without notes is the reviewer's `invalid_payload`, recorded as a failed verdict; runs
recorded before took such answers leniently."""

UNSENT_RUN_PATCH = "plan-unsent-run-is-no-attempt"
"""Since 2026-11-23, in plan.task: Runs after this patch take back the attempt of a run
cancelled before it reached the server (`TaskRuns.run_unsent`); runs recorded before counted
it."""

AGENT_RUN_GATES_PATCH = "agent-run-gates-in-the-workflow"
"""Since 2026-11-26, in _runtime.agent_runs: Runs after this patch take breaker and pool
refusals back in the workflow (waiting without spending attempts), go elsewhere when the
agent cannot serve them, and spread retries by jitter; runs recorded before let Temporal
retry refusals like failures."""

APPROVER_IDENTITY_PATCH = "plan-approval-by-caller-identity"
"""Since 2026-11-26, in plan.gates: Runs after this patch take a decision's author from the
caller's client identity (read from the run's history once the update is accepted, by the
`update_caller` activity), refuse a caller the gate's `approvers` do not name, and record
refusals; the approval's timer waits for a decision being checked. Runs recorded before took
the request's `by` as the author."""

CHAIN_FAN_OUT_PATCH = "chain-fan-out-within-task-budget"
"""Since 2026-11-26, in chain.reactive: Runs after it start their agent runs and votes and
forward to their listeners within a byte budget per workflow task (`FanOut`): one event
matched by forty subscriptions, or forwarded to forty listeners, could be more than the
server takes in one task. Runs recorded before sent them all at once."""

COUNTED_RETRIES_PATCH = "agent-runs-count-their-own-retries"
"""Since 2026-11-26, in _runtime.common: Runs after this patch hand a `run_agent` its retry
budget (`AgentRequest.budget`) and set no attempt limit on the server: its worker counts the
agent's own failures against `max_retries`, so the attempts a server outage or a dead worker
cost spend none of them. Runs recorded before let the server count every attempt."""

HAND_OVER_PATCH = "chain-runs-in-workflows-of-their-own"
"""Since 2026-11-26, in chain.reactive: Runs after it hand each agent run and vote to a
`ChainRun` of its own, which reports its outcome by signal, and continue as new without
waiting for them (carrying them in flight); runs recorded before ran them here and waited for
the slowest before continuing."""

PLAN_FAN_OUT_PATCH = "plan-fan-out-within-task-budget"
"""Since 2026-11-26, in plan.task: Runs after this patch start their agent runs, reviews, votes
and scratchpad writes within a byte budget per workflow task (`FanOut`); runs recorded before
started a whole wave in one task (forty 110 KB inputs were more than the server takes in
one)."""

PROGRESS_ON_DEMAND_PATCH = "plan-progress-read-on-demand"
"""Since 2026-11-26, in plan.graph: Runs after this patch never read their agents' progress
themselves: whoever asks reads it from the server (`coord.infra.activity_progress`), so the
history grows with the plan's work, not with its age. Runs recorded before read it every
`progress_interval` (a timer and a local activity each time, about five history events a
second at 1s) and go on doing so."""

PUBLISH_RULE_PATCH = "chain-agents-publish-only-what-is-allowed"
"""Since 2026-11-26, in chain.reactive: Runs after it refuse, record and park an agent's
publication of a type neither its subscription's `publishes` nor its declaration allows; runs
recorded before published it."""

ROUTING_PICKS_BATCHED_PATCH = "routing-picks-of-a-step-batched"
"""Since 2026-11-26, in _runtime.common: Runs after this patch ask for the agents of the runs
one workflow step starts (a plan's wave) in one `choose_agents`, each pick seeing the ones
before it; runs recorded before asked `choose_agent` once per run, each reading the same idle
agents and picking the same one."""

SCOPED_VOTE_ID_PATCH = "plan-vote-id-scoped"
"""Since 2026-11-26, in plan.task: Runs after this patch start a vote task's vote as
`vote-<plan_id>~<task_id>`, which no other plan's task shares; runs recorded before started
`vote-<plan_id>-<task_id>` (plan `a-b`'s task `c` and plan `a`'s task `b-c` collided), and
keep that id on replay."""

VOTE_FAN_OUT_PATCH = "vote-voters-within-task-budget"
"""Since 2026-11-26, in vote: Runs after this patch start their voters within a byte budget per
workflow task (`FanOut`): forty voters of a 110 KB proposal were more than the server takes
in one task. Runs recorded before started every voter in the first task."""

AGENT_PLACEMENT_PATCH = "agent-runs-placed-by-what-they-need"
"""Since 2026-11-27, in _runtime.agent_runs: Runs after this patch ask their worker once (a local
activity, `place_agents`) where each agent they name runs, and run it there
(coord.models.mesh.placement): a short in-process agent the worker serves as a local activity
(a marker, no activity task), another agent it serves without pool or rate limit on the
workflow's own task queue (handed over eagerly), any other on its own agent queue; a local
run is never cancelled (a cancel of its step waits for it to end). Runs recorded before sent
every named agent's runs to its agent queue."""

PLACEMENTS_ASKED_AS_ACTIVITY_PATCH = "placements-asked-as-an-activity"
"""Since 2026-11-27, in _runtime.agent_runs: Runs after this patch that run no agent locally (a
chain) ask where their agents run (AGENT_PLACEMENT_PATCH) in an activity on their own task
queue, whose completion is an event of its own: replayed, the chain starts its runs in the
workflow task it started them in. Runs recorded before asked in a local activity; one whose
attempt timed out (a starved worker) was replayed with its first run's patch checks in another
place than they were recorded (a nondeterminism error)."""

CHAIN_LOCAL_RUNS_PATCH = "chain-runs-short-agents-locally"
"""Since 2026-11-27, in chain.reactive: Runs after this patch run the short in-process agents
their worker serves (python agents, any agent declared `execution: local`) as local activities,
as sagas do, one at a time, and continue as new or end only in a workflow task that records no
local run's outcome: when a local run ended in the task due to continue or end, the chain ends
that task first (a timer) so the runs' markers are in the history before the run's last task,
which the server may refuse (new signals arrived) and with it the markers of its task. Runs
recorded before ran those agents as activity tasks on the chain's own queue."""

SAGA_ASKS_CHAIN_ONCE_PATCH = "saga-waits-for-its-first-send"
"""Since 2026-11-27, in saga: Runs after this patch send an event to the correlation's chain
only once the first send has found the chain running (a saga without a chain sends one, as
CHAIN_SEND_ONCE_PATCH meant); runs recorded before sent every event announced while the first
was in flight, each failing alike when no chain ran (five with local agents)."""

PLAN_ANNOUNCES_PATCH = "plan-announces-its-lifecycle"
"""Since 2026-11-27, in plan.graph: Runs after this patch announce their lifecycle (the event
taxonomy: `PlanStarted`, `TaskStarted`, `TaskCompleted`, ..., `PlanCompleted`) into their
correlation's chain, each caused by the event before it, and await the sends before they end;
runs recorded before sent nothing."""

VOTE_ANNOUNCES_PATCH = "vote-announces-its-lifecycle"
"""Since 2026-11-27, in vote: Runs after this patch announce `VoteOpened`, each `BallotCast` and
`DecisionMade` into their correlation's chain and await the sends before they end; runs
recorded before sent nothing."""

CHAIN_TAKES_ANNOUNCEMENTS_PATCH = "chain-takes-pattern-announcements"
"""Since 2026-11-27, in chain.intake: Runs after it give a plan's or vote's announcement the
depth of its cause (one more for `PlanStarted` and `VoteOpened`) and never park one they refuse;
runs recorded before counted them as agents' events."""

TEAM_MESSAGES_PATCH = "plan-team-messages"
"""Since 2026-11-27, in plan.team: Runs after this patch check what a team member's run asks
to `send` (`coord.models.plan.team`), record it, publish each accepted message into the
correlation's chain as a `TeamMessage` event and hand it to a long-lived recipient; runs
recorded before ignored a result's messages."""

LOG_SEGMENTS_PATCH = "chain-writes-its-log-in-segments"
"""Since 2026-11-27, in chain.reactive: Runs after it write their timeline to the payload store
in segments (`write_log_segment`, one per 200 rows or 1 MiB of payload, the rest when the chain
ends) and keep every row not yet written in the timeline they carry across continue-as-new; runs
recorded before kept only the window, and scheduled no such activity."""

AGGREGATOR_REWIND_PATCH = "aggregator-takes-its-rewound-past"
"""Since 2026-11-27, in aggregator: A rewound copy's first run (its spec's `rewind` set, which
no run recorded before could carry) starts from the slots its original held just before the
rewind point and the deadline it had left then, so it may complete on its first event."""

VOTE_REWIND_PATCH = "vote-takes-its-rewound-ballots"
"""Since 2026-11-27, in vote: A rewound copy (its spec's `rewind` set, which no run recorded
before could carry) counts the ballots its original's voters cast before the rewind point and
starts runs only for the other voters; it announces neither `VoteOpened` nor those ballots
again (its correlation's copy holds them), its later events caused by the original's opening."""

LOG_POSITIONS_PATCH = "chain-log-rows-numbered"
"""Since 2026-11-27, in chain.intake: Runs after it give each timeline row its `position` in
the correlation's log (the count of rows recorded, carried across continue-as-new), so the
segments they write let a reader prove the log whole; runs recorded before left it unset."""

REWIND_COMPLETE_PATCH = "chain-copy-records-its-hand-over"
"""Since 2026-11-27, in chain.model: Runs after it mark a rewound copy's record complete
(`ChainState.rewind_complete`) when the `recorded` signal that ends a rewind's hand-over
arrives; runs recorded before never marked it."""

COPY_ENDS_AFTER_ITS_HAND_OVER_PATCH = "chain-copy-ends-after-its-hand-over"
"""Since 2026-11-27, in chain.model: A rewound copy that meets its terminal event ends only once
its hand-over is complete (`ChainState.rewind_complete`), so the rewind's last signals never
find it ended; runs recorded before could end in the middle of the hand-over."""

CHAIN_WAITS_FOR_ITS_LISTENERS_PATCH = "chain-waits-for-its-listeners"
"""Since 2026-11-27, in chain.pacing: A chain with nothing left to do after its terminal event
waits for its listeners to leave (at most `LISTENERS_GRACE`), so an aggregator that publishes its
result and then leaves finds it running; runs recorded before ended at once, and an aggregator's
result that arrived after was parked."""

AGGREGATOR_PUBLISHES_BEFORE_IT_LEAVES_PATCH = "aggregator-publishes-before-it-leaves"
"""Since 2026-11-27, in aggregator: An aggregator that ends publishes its result into its chain,
then leaves the chain (the chain waits for its listeners); runs recorded before left first, so
their result could find the chain ended."""

SAGA_PATCHES_AT_ONCE_PATCH = "saga-patches-at-once"
"""Since 2026-11-27, in saga: Runs after this patch ask it first, and take every patch of
SAGA_PATCHES as in force without asking it (`_runtime.patches`): one marker and one
`TemporalChangeVersion` upsert instead of one of each per patch (twelve history events of a
five-step saga with local agents, six patches, become two); the saga's status is written as a
search attribute once per workflow task, when the task ends waiting on something other than a
local run, instead of at every change (`in_progress` is no longer written when the run ends in
the workflow task it began in); in a saga whose runs are all local, the first event sent asks
first, in a local activity (`chain_running`), whether the correlation's chain runs, and none is
sent when it does not.
Runs recorded before asked each patch where its code reached it, upserted each change of
status, and signalled the chain to learn whether it ran."""

SAGA_PATCHES = frozenset(
    {
        SAGA_EVENTS_PATCH,
        DEAD_LETTER_PATCH,
        SAGA_ASKS_CHAIN_ONCE_PATCH,
        CHAIN_SEND_ONCE_PATCH,
        SIGNALS_RUN_TO_THE_END_PATCH,
        AGENT_PLACEMENT_PATCH,
        AGENT_RUN_GATES_PATCH,
        AGENT_RUN_PRIORITY_PATCH,
        AGENT_QUEUES_PATCH,
        CAPABILITY_ROUTING_PATCH,
        COUNTED_RETRIES_PATCH,
        ROUTING_PICKS_BATCHED_PATCH,
        PLACEMENTS_ASKED_AS_ACTIVITY_PATCH,
    }
)
"""The patches a saga's code may ask (its own and those of the runtime it shares), every one in
force for a run taking SAGA_PATCHES_AT_ONCE_PATCH. Never changed: a patch added later is asked
on its own (or bundled under a new id)."""

SAGA_CHAIN_WITH_PLACEMENTS_PATCH = "saga-asks-chain-with-placements"
"""Since 2026-11-27, in saga: a saga that may run all its agents locally (named agents, no
route, no heartbeat timeout) asks whether its correlation's chain runs in the same local
activity that places its agents (`place_agents_with_chain`, answered when they all run
locally), before its first step, instead of in a `chain_running` local activity of its own
beside its second step: one marker and one local activity fewer. Runs recorded before asked
`place_agents`, then `chain_running` at their first send."""

SAGA_PATCHES_AT_ONCE_2_PATCH = "saga-patches-at-once-2"
"""Since 2026-11-27, in saga: SAGA_PATCHES_AT_ONCE_PATCH with SAGA_CHAIN_WITH_PLACEMENTS_PATCH
in force too (SAGA_PATCHES_2), still one marker. Runs recorded before asked
SAGA_PATCHES_AT_ONCE_PATCH (or each patch)."""

SAGA_PATCHES_2 = SAGA_PATCHES | {SAGA_CHAIN_WITH_PLACEMENTS_PATCH}
"""The patches in force for a run taking SAGA_PATCHES_AT_ONCE_2_PATCH. Never changed."""

SAGA_STATUS_FROM_START_PATCH = "saga-status-from-its-start"
"""Since 2026-11-27, in saga: a run writes its status as a search attribute only when it differs
from what the attribute holds, starting from what its start set (`coord saga start` and
`start_saga` start a saga `in_progress`): a saga whose first workflow task ends waiting on an
activity task no longer upserts `in_progress` there (one event fewer). Runs recorded before
(started `pending`) wrote every change of status."""

SAGA_PATCHES_AT_ONCE_3_PATCH = "saga-patches-at-once-3"
"""Since 2026-11-27, in saga: SAGA_PATCHES_AT_ONCE_2_PATCH with SAGA_STATUS_FROM_START_PATCH in
force too (SAGA_PATCHES_3), still one marker. Runs recorded before asked
SAGA_PATCHES_AT_ONCE_2_PATCH (or an earlier bundle, or each patch)."""

SAGA_PATCHES_3 = SAGA_PATCHES_2 | {SAGA_STATUS_FROM_START_PATCH}
"""The patches in force for a run taking SAGA_PATCHES_AT_ONCE_3_PATCH. Never changed."""

SAGA_RUNS_STEPS_AHEAD_PATCH = "saga-runs-local-steps-ahead"
"""Since 2026-11-28, in saga: a saga whose steps all run locally (and spend no token budget) runs
their first attempts ahead, in order, in one local activity (`run_agents`, an in-order batch),
each step handed the results of those before it; each step then takes its outcome in turn and
goes on as it would have. Runs recorded before ran each step in a local activity of its own."""

SAGA_PATCHES_AT_ONCE_4_PATCH = "saga-patches-at-once-4"
"""Since 2026-11-28, in saga: SAGA_PATCHES_AT_ONCE_3_PATCH with SAGA_RUNS_STEPS_AHEAD_PATCH in
force too (SAGA_PATCHES_4), still one marker. Runs recorded before asked an earlier bundle (or
each patch)."""

SAGA_PATCHES_4 = SAGA_PATCHES_3 | {SAGA_RUNS_STEPS_AHEAD_PATCH}
"""The patches in force for a run taking SAGA_PATCHES_AT_ONCE_4_PATCH. Never changed."""

SAGA_PARKS_UNKNOWN_SIGNALS_PATCH = "saga-parks-unknown-signals"
"""Since 2026-11-28, in saga: a signal the saga has no handler for (a saga takes none: one meant
for a chain, say) is parked as `invalid_input` with what it carried, and the run ends only once
it is. Only in a run taking SAGA_PATCHES_5 (by its bundle or its version), never asked mid-run:
a saga runs local activities, whose markers a patch asked mid-run could precede. Runs recorded
before left it unread."""

SAGA_PATCHES_AT_ONCE_5_PATCH = "saga-patches-at-once-5"
"""Since 2026-11-28, in saga: SAGA_PATCHES_AT_ONCE_4_PATCH with SAGA_PARKS_UNKNOWN_SIGNALS_PATCH in
force too (SAGA_PATCHES_5), still one marker. Runs recorded before asked an earlier bundle (or
each patch)."""

SAGA_PATCHES_5 = SAGA_PATCHES_4 | {SAGA_PARKS_UNKNOWN_SIGNALS_PATCH}
"""The patches in force for a run taking SAGA_PATCHES_AT_ONCE_5_PATCH. Never changed."""

SAGA_HISTORY_BUDGET_PATCH = "saga-stops-at-its-history-budget"
"""Since 2026-11-29, in saga: before each step, a run whose history has passed its budget
(`models.saga.budget.HistoryBudget`: 40 MiB or 40,960 events, the rest kept for compensating)
runs no further step: the step fails `history_budget` unrun and the saga unwinds as for any
failed step. Only in a run taking SAGA_PATCHES_6 (by its bundle or its version), never asked
mid-run (a saga runs local activities, whose markers a patch asked mid-run could precede). Runs
recorded before went on until the server terminated them past its limit."""

SAGA_PATCHES_AT_ONCE_6_PATCH = "saga-patches-at-once-6"
"""Since 2026-11-29, in saga: SAGA_PATCHES_AT_ONCE_5_PATCH with SAGA_HISTORY_BUDGET_PATCH in
force too (SAGA_PATCHES_6), still one marker. Runs recorded before asked an earlier bundle (or
each patch)."""

SAGA_PATCHES_6 = SAGA_PATCHES_5 | {SAGA_HISTORY_BUDGET_PATCH}
"""The patches in force for a run taking SAGA_PATCHES_AT_ONCE_6_PATCH. Never changed."""

SAGA_SENDS_IN_ORDER_PATCH = "saga-sends-its-events-in-order"
"""Since 2026-11-29, in saga: each event the saga sends its correlation's chain goes once the one
before it has landed (or found no chain), so the chain's log numbers them in the order the saga
made them; signals sent together reached the chain in any order (an event could be numbered
before its cause). Only in a run taking SAGA_PATCHES_7 (by its bundle or its version), never
asked mid-run (a saga runs local activities, whose markers a patch asked mid-run could precede).
Runs recorded before sent every event after the first together."""

SAGA_PLACEMENTS_FROM_START_PATCH = "saga-takes-its-placements-from-its-start"
"""Since 2026-11-29, in saga: a run whose start says where its agents run and whether its
chain runs (`contract.SAGA_PLACEMENTS_MEMO`, written by a starter whose process hosts the
saga's worker) takes that instead of asking its worker in a local activity: no marker before
its first step. Only placements on the saga's own queue or the agents' queues, for every agent
it runs; its runs on its own queue say so, and the worker refuses one for an agent it does not
serve there (`misplaced`), which then goes to the agent's queue. Only in a run taking
SAGA_PATCHES_7 (by its bundle or its version), never asked mid-run. Runs recorded before asked
their worker whatever their start said."""

SAGA_PATCHES_AT_ONCE_7_PATCH = "saga-patches-at-once-7"
"""Since 2026-11-29, in saga: SAGA_PATCHES_AT_ONCE_6_PATCH with SAGA_SENDS_IN_ORDER_PATCH and
SAGA_PLACEMENTS_FROM_START_PATCH in force too (SAGA_PATCHES_7), still one marker. Runs recorded
before asked an earlier bundle (or each patch)."""

SAGA_PATCHES_7 = SAGA_PATCHES_6 | {SAGA_SENDS_IN_ORDER_PATCH, SAGA_PLACEMENTS_FROM_START_PATCH}
"""The patches in force for a run taking SAGA_PATCHES_AT_ONCE_7_PATCH. Never changed."""

SAGA_PATCHES_BY_VERSION = {
    3: SAGA_PATCHES_3,
    4: SAGA_PATCHES_4,
    5: SAGA_PATCHES_5,
    6: SAGA_PATCHES_6,
    7: SAGA_PATCHES_7,
}
"""Since 2026-11-27, in saga: the patches a saga run takes as in force without asking anything,
by the saga runtime version its start event carries (`contract.SAGA_VERSION_MEMO`, written by
`start_saga` and `coord saga start`): no patch marker, no `TemporalChangeVersion` upsert (two
history events fewer than a bundle's). A run started without a version (Temporal CLI, UI, a
starter before 2026-11-27) or with one its worker does not know asks the bundles
(SAGA_PATCHES_AT_ONCE_3_PATCH, ...) as before; so does any run replayed, first
(`workflow.saga.StatusWrites.adopt_patches`): a worker that did not know the version asked its
bundle, whose marker replay then meets. Never changed: a behaviour added later is a new patch,
asked on its own, or a new version whose set holds it."""

SAGA_VERSION = max(SAGA_PATCHES_BY_VERSION)
"""The version this code's starters write into a new saga's start."""

AGGREGATOR_PATCHES_AT_ONCE_PATCH = "aggregator-patches-at-once"
"""Since 2026-11-27, in aggregator: Runs after this patch ask it first and take every patch of
AGGREGATOR_PATCHES as in force without asking it (`_runtime.patches`): one marker and one
`TemporalChangeVersion` upsert instead of one of each per patch; a search attribute is upserted
only when it differs from the run's (so not at start, where the starter set them); the deadline
timer is left to lapse, not cancelled, when the join completes (the run ends anyway), unless it
completes in the workflow task that armed the timer (cancelled there, the timer is never sent);
an event is validated straight from its JSON bytes. A flood of events then issues five commands
(a run without a chain), none per event. Runs recorded before asked each patch where their code
reached it, upserted their status at start and cancelled the deadline timer."""

AGGREGATOR_PARKS_UNKNOWN_SIGNALS_PATCH = "aggregator-parks-unknown-signals"
"""Since 2026-11-28, in aggregator: a signal the aggregator has no handler for is parked as
`invalid_input` with what it carried (asked when one comes: an aggregator runs no local
activity, whose marker a patch asked mid-run could precede). Runs recorded before left it
unread."""

AGGREGATOR_PATCHES = frozenset(
    {
        DEADLINE_FIRST_PATCH,
        DEAD_LETTER_PATCH,
        KEPT_RECORD_PATCH,
        PARK_BEFORE_INVALID_INPUT_FAILS_PATCH,
        SIGNALS_RUN_TO_THE_END_PATCH,
        AGGREGATOR_REWIND_PATCH,
        AGGREGATOR_PUBLISHES_BEFORE_IT_LEAVES_PATCH,
    }
)
"""The patches an aggregator's code may ask (its own and those of the runtime it shares), every
one in force for a run taking AGGREGATOR_PATCHES_AT_ONCE_PATCH. Never changed: a patch added
later is asked on its own (or bundled under a new id)."""

CHAIN_PATCHES_AT_ONCE_PATCH = "chain-patches-at-once"
"""Since 2026-11-27, in chain.reactive: Runs after this patch ask it first (as the run begins,
before any signal is handled) and take every patch of CHAIN_PATCHES as in force without asking
it (`_runtime.patches`): one marker and one `TemporalChangeVersion` upsert instead of one of each
per patch, and never a patch marker after the run's first workflow task. A local run that starts
in one workflow task and ends in a later one has its marker recorded after the commands the
chain issued on its outcome: a patch first asked there (the first remote run's) failed its
replay (a nondeterminism error), where the other commands (an activity task, a timer's cancel)
replay. Runs recorded before asked each patch where their code reached it."""

SHARED_RUNTIME_PATCHES = frozenset(
    {
        DEAD_LETTER_PATCH,
        SIGNALS_RUN_TO_THE_END_PATCH,
        AGENT_QUEUES_PATCH,
        AGENT_RUN_PRIORITY_PATCH,
        CAPABILITY_ROUTING_PATCH,
        AGENT_RUN_GATES_PATCH,
        COUNTED_RETRIES_PATCH,
        ROUTING_PICKS_BATCHED_PATCH,
        AGENT_PLACEMENT_PATCH,
        PLACEMENTS_ASKED_AS_ACTIVITY_PATCH,
    }
)
"""The patches of the runtime chains and plans share (_runtime.common, _runtime.agent_runs),
part of CHAIN_PATCHES and PLAN_PATCHES. Never changed, as those are not."""

CHAIN_PATCHES = SHARED_RUNTIME_PATCHES | frozenset(
    {
        # the chain's own (chain.reactive, chain.boundary and the chain's model)
        DECODE_IN_TASK_PATCH,
        FLOOD_PATCH,
        KEEP_DISPATCHING_PATCH,
        LIFECYCLE_NOTICES_PATCH,
        PARK_BEFORE_INVALID_INPUT_FAILS_PATCH,
        PARK_QUEUED_RUNS_PATCH,
        SETTLE_PATCH,
        AGENTS_ATTRIBUTE_PATCH,
        CHAIN_FAN_OUT_PATCH,
        HAND_OVER_PATCH,
        PUBLISH_RULE_PATCH,
        CHAIN_TAKES_ANNOUNCEMENTS_PATCH,
        LOG_SEGMENTS_PATCH,
        LOG_POSITIONS_PATCH,
        REWIND_COMPLETE_PATCH,
        COPY_ENDS_AFTER_ITS_HAND_OVER_PATCH,
        CHAIN_WAITS_FOR_ITS_LISTENERS_PATCH,
        CHAIN_LOCAL_RUNS_PATCH,
    }
)
"""The patches a chain's code may ask (its own and those of the runtime it shares), every one in
force for a run taking CHAIN_PATCHES_AT_ONCE_PATCH. Never changed: a patch added later is asked
on its own (or bundled under a new id)."""

CHAIN_PLACES_BEFORE_ITS_BUDGET_PATCH = "chain-places-runs-before-their-budget"
"""Since 2026-11-27, in chain.reactive: a run that starts before the chain has learned where its
agents run learns it first, then takes its share of the workflow task's fan-out budget, so the
run goes out in the task it was counted in. Runs recorded before counted it first; the answer
came in a later task, and when the fan-out's timer fired in that same task, the task sent the
earlier task's share and its own (twice the budget)."""

CHAIN_PATCHES_AT_ONCE_2_PATCH = "chain-patches-at-once-2"
"""Since 2026-11-27, in chain.reactive: CHAIN_PATCHES_AT_ONCE_PATCH with
CHAIN_PLACES_BEFORE_ITS_BUDGET_PATCH in force too (CHAIN_PATCHES_2), still one marker. Runs
recorded before asked CHAIN_PATCHES_AT_ONCE_PATCH (or each patch)."""

CHAIN_PATCHES_2 = CHAIN_PATCHES | {CHAIN_PLACES_BEFORE_ITS_BUDGET_PATCH}
"""The patches in force for a run taking CHAIN_PATCHES_AT_ONCE_2_PATCH. Never changed."""

CHAIN_BATCHES_LOCAL_RUNS_PATCH = "chain-batches-local-runs"
"""Since 2026-11-28, in chain.reactive: the first attempts of the local runs that start while
one local activity is under way run side by side in the next one (`run_agents`, a batch), its
outcomes in one marker; a run whose first attempt failed goes on as its own. Runs recorded
before ran each local run in a local activity of its own, one after the other."""

CHAIN_PATCHES_AT_ONCE_3_PATCH = "chain-patches-at-once-3"
"""Since 2026-11-28, in chain.reactive: CHAIN_PATCHES_AT_ONCE_2_PATCH with
CHAIN_BATCHES_LOCAL_RUNS_PATCH in force too (CHAIN_PATCHES_3), still one marker. Runs recorded
before asked an earlier bundle (or each patch)."""

CHAIN_PATCHES_3 = CHAIN_PATCHES_2 | {CHAIN_BATCHES_LOCAL_RUNS_PATCH}
"""The patches in force for a run taking CHAIN_PATCHES_AT_ONCE_3_PATCH. Never changed."""

CHAIN_RECORDS_RUNS_BY_ITS_TIMER_PATCH = "chain-records-local-runs-by-its-timer"
"""Since 2026-11-28, in chain.pacing: a run that ran agents locally continues as new (or ends)
after a timer started once every such run had ended, unless one started since has fired. Runs
recorded before took that timer only when a run had ended in the current workflow task, by the
history's length, which a replay handed a local run's outcome in another activation could see
otherwise (a nondeterminism error at the run's end)."""

CHAIN_PATCHES_AT_ONCE_4_PATCH = "chain-patches-at-once-4"
"""Since 2026-11-28, in chain.reactive: CHAIN_PATCHES_AT_ONCE_3_PATCH with
CHAIN_RECORDS_RUNS_BY_ITS_TIMER_PATCH in force too (CHAIN_PATCHES_4), still one marker. Runs
recorded before asked an earlier bundle (or each patch)."""

CHAIN_PATCHES_4 = CHAIN_PATCHES_3 | {CHAIN_RECORDS_RUNS_BY_ITS_TIMER_PATCH}
"""The patches in force for a run taking CHAIN_PATCHES_AT_ONCE_4_PATCH. Never changed."""

CHAIN_RUN_BUDGET_PATCH = "chain-budgets-runs-per-first-cause"
"""Since 2026-11-28, in the chain's model: each event's first cause is remembered and the runs
its events queue counted; an event whose first cause has queued the spec's `max_runs_per_event`
is rejected as a probable loop (a filtered cycle that fans out grows without end below its
`max_causation_depth`). Runs recorded before counted nothing."""

CHAIN_PARKS_UNKNOWN_SIGNALS_PATCH = "chain-parks-unknown-signals"
"""Since 2026-11-28, in chain.reactive: a signal the chain has no handler for (a misspelt name,
one meant for another workflow) is rejected and parked as `invalid_input` with what it carried.
Runs recorded before left it unread."""

CHAIN_PATCHES_AT_ONCE_5_PATCH = "chain-patches-at-once-5"
"""Since 2026-11-28, in chain.reactive: CHAIN_PATCHES_AT_ONCE_4_PATCH with
CHAIN_RUN_BUDGET_PATCH and CHAIN_PARKS_UNKNOWN_SIGNALS_PATCH in force too (CHAIN_PATCHES_5),
still one marker. Runs recorded before asked an earlier bundle (or each patch)."""

CHAIN_PATCHES_5 = CHAIN_PATCHES_4 | {CHAIN_RUN_BUDGET_PATCH, CHAIN_PARKS_UNKNOWN_SIGNALS_PATCH}
"""The patches in force for a run taking CHAIN_PATCHES_AT_ONCE_5_PATCH. Never changed."""

PLAN_LOCAL_RUNS_PATCH = "plan-runs-short-agents-locally"
"""Since 2026-11-27, in plan.graph: Runs after this patch ask their worker, as they begin, where
the agents they name run, and run the short in-process ones it serves (python agents, any agent
declared `execution: local`) as local activities, as sagas and chains do: a task's run, its
reviews and its verifiers. Runs recorded before ran every agent as an activity task."""

PLAN_PATCHES_AT_ONCE_PATCH = "plan-patches-at-once"
"""Since 2026-11-27, in plan.graph: Runs after this patch ask it first (in the workflow's
`__init__`, before any update is handled) and take every patch of PLAN_PATCHES as in force
without asking it (`_runtime.patches`): one marker and one `TemporalChangeVersion` upsert instead
of one of each per patch, and never a patch marker after the run's first workflow task, where a
local run's marker landing in a later task than the run began would put it after the commands
the plan issued on its outcome (a nondeterminism error on replay, as a chain found). Runs
recorded before asked each patch where their code reached it."""

PLAN_PATCHES = SHARED_RUNTIME_PATCHES | frozenset(
    {
        # the plan's own (plan.graph, plan.task, plan.gates, plan.team)
        PLAN_ANNOUNCES_PATCH,
        SLOTS_GRANTED_BY_THE_PLAN_PATCH,
        PROGRESS_ON_DEMAND_PATCH,
        APPROVER_IDENTITY_PATCH,
        STRICT_VERDICTS_PATCH,
        UNSENT_RUN_PATCH,
        SCOPED_VOTE_ID_PATCH,
        TEAM_MESSAGES_PATCH,
        PLAN_FAN_OUT_PATCH,
        PLAN_LOCAL_RUNS_PATCH,
    }
)
"""The patches a plan's code may ask (its own and those of the runtime it shares), every one in
force for a run taking PLAN_PATCHES_AT_ONCE_PATCH. Never changed: a patch added later is asked
on its own (or bundled under a new id)."""

PLAN_ASKS_ITS_CHAIN_PATCH = "plan-asks-whether-its-chain-runs"
"""Since 2026-11-27, in plan.graph: Runs after this patch ask whether their correlation's chain
runs together with where their agents run (one local activity), and hold their lifecycle events
until the answer: a plan without a running chain sends none (its runs recorded before sent each
event as it came, and each failed: two history events an event, about four a task, for a plan of
local runs all issued before the first failure came back); unanswered, the first event goes
alone and the rest follow only if it reached the chain."""

PLAN_PLACES_ADDED_AGENTS_PATCH = "plan-places-the-agents-of-added-tasks"
"""Since 2026-11-27, in plan.graph: Runs after this patch ask their worker where the agents of
tasks added while they run (`add_tasks`) run, before the tasks join the plan, so the short
in-process ones it serves run locally as the plan's first tasks' do; runs recorded before sent
them where the plan's `dispatch` says."""

PLAN_PATCHES_AT_ONCE_2_PATCH = "plan-patches-at-once-2"
"""Since 2026-11-27, in plan.graph: PLAN_PATCHES_AT_ONCE_PATCH with PLAN_ASKS_ITS_CHAIN_PATCH and
PLAN_PLACES_ADDED_AGENTS_PATCH in force too (PLAN_PATCHES_2), still one marker. Runs recorded
before asked PLAN_PATCHES_AT_ONCE_PATCH (or each patch)."""

PLAN_PATCHES_2 = PLAN_PATCHES | {PLAN_ASKS_ITS_CHAIN_PATCH, PLAN_PLACES_ADDED_AGENTS_PATCH}
"""The patches in force for a run taking PLAN_PATCHES_AT_ONCE_2_PATCH. Never changed."""

VOTE_PATCHES_AT_ONCE_PATCH = "vote-patches-at-once"
"""Since 2026-11-27, in vote: Runs after this patch ask it first (in the workflow's `__init__`)
and take every patch of VOTE_PATCHES as in force without asking it (`_runtime.patches`): one
marker and one `TemporalChangeVersion` upsert instead of one of each per patch (six of each for a
vote of three voters: 10 of its 38 history events). Runs recorded before asked each patch where
their code reached it."""

VOTE_PATCHES = SHARED_RUNTIME_PATCHES | frozenset(
    {VOTE_ANNOUNCES_PATCH, VOTE_REWIND_PATCH, VOTE_FAN_OUT_PATCH}
)
"""The patches a vote's code may ask (its own and those of the runtime it shares), every one in
force for a run taking VOTE_PATCHES_AT_ONCE_PATCH. Never changed: a patch added later is asked
on its own (or bundled under a new id)."""

VOTE_PLACES_VOTERS_PATCH = "vote-places-its-voters"
"""Since 2026-11-28, in vote: Runs after this patch ask their worker, as they begin, where their
voters run: a voter it serves (with neither pool nor rate limit nor capabilities) runs as an
activity task on the vote's own queue, handed over eagerly to the worker that schedules it, the
others on their own queues. Never as a local activity: a vote cancels the runs still out once
its outcome is certain, which a local activity would not hear. Runs recorded before sent every
named voter to its own queue."""

VOTE_STATUS_FROM_START_PATCH = "vote-status-from-its-start"
"""Since 2026-11-28, in vote: Runs after this patch write their search attributes when their
status differs from the one their start carried (`coord vote start` starts a vote `voting`);
runs recorded before wrote them again in their first workflow task."""

VOTE_PATCHES_AT_ONCE_2_PATCH = "vote-patches-at-once-2"
"""Since 2026-11-28, in vote: VOTE_PATCHES_AT_ONCE_PATCH with VOTE_PLACES_VOTERS_PATCH and
VOTE_STATUS_FROM_START_PATCH in force too (VOTE_PATCHES_2), still one marker. Runs recorded
before asked VOTE_PATCHES_AT_ONCE_PATCH (or each patch)."""

VOTE_PATCHES_2 = VOTE_PATCHES | {VOTE_PLACES_VOTERS_PATCH, VOTE_STATUS_FROM_START_PATCH}
"""The patches in force for a run taking VOTE_PATCHES_AT_ONCE_2_PATCH. Never changed."""

PLAN_PARKS_UNKNOWN_SIGNALS_PATCH = "plan-parks-unknown-signals"
"""Since 2026-11-28, in plan.graph: a signal the plan has no handler for (a misspelt name, one
meant for another workflow) is parked as `invalid_input` with what it carried. Only in a run
taking PLAN_PATCHES_3, never asked mid-run (PLAN_PATCHES_AT_ONCE_PATCH says why). Runs recorded
before left it unread."""

PLAN_PATCHES_AT_ONCE_3_PATCH = "plan-patches-at-once-3"
"""Since 2026-11-28, in plan.graph: PLAN_PATCHES_AT_ONCE_2_PATCH with
PLAN_PARKS_UNKNOWN_SIGNALS_PATCH in force too (PLAN_PATCHES_3), still one marker. Runs recorded
before asked an earlier bundle (or each patch)."""

PLAN_PATCHES_3 = PLAN_PATCHES_2 | {PLAN_PARKS_UNKNOWN_SIGNALS_PATCH}
"""The patches in force for a run taking PLAN_PATCHES_AT_ONCE_3_PATCH. Never changed."""

PLAN_PARKS_REFUSED_MESSAGES_PATCH = "plan-parks-refused-member-messages"
"""Since 2026-11-29, in plan.graph: a `member_sent` signal the plan refuses (it does not decode,
names no member of the plan, or comes before the plan has a team) is parked as `invalid_input`
with what it carried, and the run ends only once it is. Only in a run taking PLAN_PATCHES_4,
never asked mid-run (PLAN_PATCHES_AT_ONCE_PATCH says why). Runs recorded before logged and
dropped it."""

PLAN_PATCHES_AT_ONCE_4_PATCH = "plan-patches-at-once-4"
"""Since 2026-11-29, in plan.graph: PLAN_PATCHES_AT_ONCE_3_PATCH with
PLAN_PARKS_REFUSED_MESSAGES_PATCH in force too (PLAN_PATCHES_4), still one marker. Runs recorded
before asked an earlier bundle (or each patch)."""

PLAN_PATCHES_4 = PLAN_PATCHES_3 | {PLAN_PARKS_REFUSED_MESSAGES_PATCH}
"""The patches in force for a run taking PLAN_PATCHES_AT_ONCE_4_PATCH. Never changed."""

REFUSED_START_FOUND_PATCH = "refused-start-found-as-failed"
"""Since 2026-11-29, in plan.graph and vote: a run whose spec is refused writes its pattern and
the status `failed` as search attributes before it fails `invalid_spec` (one upsert of those it
lacks): one `coord` started was still found `running`, one started as plain JSON by no
pattern at all. Asked only then, first thing in the run's first workflow task, before any local
run. Runs recorded before failed without it."""

VOTE_PARKS_UNKNOWN_SIGNALS_PATCH = "vote-parks-unknown-signals"
"""Since 2026-11-28, in vote: a signal the vote has no handler for (a vote takes none) is parked
as `invalid_input` with what it carried, and the run ends only once it is. Only in a run taking
VOTE_PATCHES_3, never asked mid-run: a vote asks where its voters run in a local activity. Runs
recorded before left it unread."""

VOTE_PATCHES_AT_ONCE_3_PATCH = "vote-patches-at-once-3"
"""Since 2026-11-28, in vote: VOTE_PATCHES_AT_ONCE_2_PATCH with VOTE_PARKS_UNKNOWN_SIGNALS_PATCH in
force too (VOTE_PATCHES_3), still one marker. Runs recorded before asked an earlier bundle (or
each patch)."""

VOTE_PATCHES_3 = VOTE_PATCHES_2 | {VOTE_PARKS_UNKNOWN_SIGNALS_PATCH}
"""The patches in force for a run taking VOTE_PATCHES_AT_ONCE_3_PATCH. Never changed."""

VOTE_ENDS_AFTER_ITS_RUNS_PATCH = "vote-ends-after-its-runs"
"""Since 2026-11-29, in vote: the runs still out when the outcome is known are cancelled in a
workflow task that does not end the run, and the vote ends once each has ended (cancelled,
failed, or answered anyway: kept, not counted), so no run's outcome can land while its last
workflow task runs. Runs recorded before cancelled them without waiting (TRY_CANCEL) and ended
in the same task, which the server refuses (UnhandledCommand) when a voter's outcome lands
meanwhile: the refusal drops the cancels with it, and the next task, a replay of the whole
history, is refused the same way while answers go on landing (votes of 200 to 1,000 voters
answering at once: two to four refused tasks, and every voter ran to its answer). Only in a run
taking VOTE_PATCHES_4: the cancellation type is no command of its own, nothing to ask mid-run."""

VOTE_PATCHES_AT_ONCE_4_PATCH = "vote-patches-at-once-4"
"""Since 2026-11-29, in vote: VOTE_PATCHES_AT_ONCE_3_PATCH with VOTE_ENDS_AFTER_ITS_RUNS_PATCH in
force too (VOTE_PATCHES_4), still one marker. Runs recorded before asked an earlier bundle (or
each patch)."""

VOTE_PATCHES_4 = VOTE_PATCHES_3 | {VOTE_ENDS_AFTER_ITS_RUNS_PATCH}
"""The patches in force for a run taking VOTE_PATCHES_AT_ONCE_4_PATCH. Never changed."""

PARKS_UNKNOWN_SIGNALS_PATCH = "parks-unknown-signals"
"""Since 2026-11-28, in a dead-letter entry and an agent monitor: a signal the workflow has no
handler for is parked as `invalid_input` with what it carried. Asked when one comes: these run
no local activity, whose marker a patch asked mid-run could precede. Runs recorded before left
it unread."""

MEMBER_PARKS_WHAT_IT_REFUSES_PATCH = "member-parks-what-it-refuses"
"""Since 2026-11-29, in plan.member: a `deliver` signal the team member refuses (it does not
decode, or names another member) and a signal it has no handler for are parked as
`invalid_input` with what they carried, and the run ends or continues as new only once they
are. Only in a run taking MEMBER_PATCHES, never asked mid-run: a member runs its agent in a
local activity, whose marker a patch asked mid-run could precede. Runs recorded before logged
and dropped the first, and left the second unread."""

MEMBER_PATCHES_AT_ONCE_PATCH = "member-patches-at-once"
"""Since 2026-11-29, in plan.member: MEMBER_PATCHES in force from the run's first task, asked
as one marker. Runs recorded before take none."""

MEMBER_PATCHES = frozenset({MEMBER_PARKS_WHAT_IT_REFUSES_PATCH})
"""The patches in force for a run taking MEMBER_PATCHES_AT_ONCE_PATCH. Never changed."""

LEDGER_PARKS_UNKNOWN_SIGNALS_PATCH = "ledger-parks-unknown-signals"
"""Since 2026-11-29, in mesh.ledger: a signal the agent ledger has no handler for is parked as
`invalid_input` with what it carried, by an activity on the deployment's coordinator queue
(`contract.ledger_home`: the ledgers' own worker runs none, which is why ledgers were left out
of PARKS_UNKNOWN_SIGNALS_PATCH: a park on their queue waited forever), and the run continues as
new only once it is (it waits for every handler). Asked when one comes: a ledger takes no bundle
and runs no local activity, whose marker a patch asked mid-run could precede; a run that takes
no such signal carries no marker. Runs recorded before left it unread."""

CHAIN_RUN_PARKS_UNKNOWN_SIGNALS_PATCH = "chain-run-parks-unknown-signals"
"""Since 2026-11-29, in chain.run: a signal a chain's run has no handler for (it takes none) is
parked as `invalid_input` with what it carried, by the chain's correlation, and the run ends only
once it is. Asked when one comes: a chain's run takes no bundle and runs no local activity (its
agent goes to an activity task), whose marker a patch asked mid-run could precede; a run that
takes no such signal carries no marker. Runs recorded before left it unread."""
