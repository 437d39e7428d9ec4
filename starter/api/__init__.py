"""The Python API for scripts (the `coord` CLI is a thin layer over it): start, read and stop
sagas, chains, aggregators, plans and votes, deliver events, work the dead-letter queue, and check a
spec's agents against a worker's registry before starting it (`check_agents`, the agent SDK's one
rule, which the CLI's check uses too). `__all__` is what a script needs; the helpers behind it live
in the submodules, `routing` owning where an event goes."""

from coord.models.checks import check_agents
from coord.models.events.delivery import Delivery
from coord.starter.api.aggregators import (
    aggregator_handle,
    aggregator_state,
    cancel_aggregator,
    start_aggregator,
)
from coord.starter.api.chains import (
    ChainBusy,
    chain_handle,
    chain_running,
    chain_state,
    chain_timeline,
    close_chain,
    publish,
    publish_acked,
    start_chain,
)
from coord.starter.api.common import Conflict, NotFound, NoWorker, Undeliverable
from coord.starter.api.costs import correlation_tokens
from coord.starter.api.dlq import (
    dlq_archive,
    dlq_archive_many,
    dlq_counts,
    dlq_entries,
    dlq_entry,
    dlq_page,
    dlq_query,
    dlq_replay,
    dlq_replay_many,
    dlq_selected,
)
from coord.starter.api.log import LogPage, read_log, read_log_page, replay_into
from coord.starter.api.plans import (
    add_tasks,
    approve_task,
    cancel_plan,
    plan_handle,
    plan_outcome,
    plan_progress,
    plan_state,
    start_plan,
)
from coord.starter.api.rewind import diff_correlations, rewind_chain, rewind_saga
from coord.starter.api.routing import broadcast, deliver
from coord.starter.api.sagas import (
    cancel_saga,
    correlation_events,
    saga_handle,
    saga_outcome,
    saga_state,
    start_saga,
)
from coord.starter.api.votes import (
    cancel_vote,
    start_vote,
    vote_handle,
    vote_outcome,
    vote_state,
)

__all__ = [
    "ChainBusy",
    "Conflict",
    "Delivery",
    "LogPage",
    "NoWorker",
    "NotFound",
    "Undeliverable",
    "add_tasks",
    "aggregator_handle",
    "aggregator_state",
    "approve_task",
    "broadcast",
    "cancel_aggregator",
    "cancel_plan",
    "cancel_saga",
    "cancel_vote",
    "chain_handle",
    "chain_running",
    "chain_state",
    "chain_timeline",
    "check_agents",
    "close_chain",
    "correlation_events",
    "correlation_tokens",
    "deliver",
    "diff_correlations",
    "dlq_archive",
    "dlq_archive_many",
    "dlq_counts",
    "dlq_entries",
    "dlq_entry",
    "dlq_page",
    "dlq_query",
    "dlq_replay",
    "dlq_replay_many",
    "dlq_selected",
    "plan_handle",
    "plan_outcome",
    "plan_progress",
    "plan_state",
    "publish",
    "publish_acked",
    "read_log",
    "read_log_page",
    "replay_into",
    "rewind_chain",
    "rewind_saga",
    "saga_handle",
    "saga_outcome",
    "saga_state",
    "start_aggregator",
    "start_chain",
    "start_plan",
    "start_saga",
    "start_vote",
    "vote_handle",
    "vote_outcome",
    "vote_state",
]
