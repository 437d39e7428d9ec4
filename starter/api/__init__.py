"""The Python API for scripts (the `coord` CLI is a thin layer over it): start, read and stop
sagas, chains, aggregators, plans and votes, deliver events, work the dead-letter queue, and check a
spec's agents against a worker's registry before starting it (`check_agents`, the agent SDK's one
rule, which the CLI's check uses too). The imports below are what a script needs, one line a
name, loaded on first use (`coord._lazy`); the helpers behind them live in the submodules,
`routing` owning where an event goes."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coord.models.checks import check_agents as check_agents
    from coord.models.events.delivery import Delivery as Delivery
    from coord.starter.api.aggregators import aggregator_handle as aggregator_handle
    from coord.starter.api.aggregators import aggregator_state as aggregator_state
    from coord.starter.api.aggregators import cancel_aggregator as cancel_aggregator
    from coord.starter.api.aggregators import start_aggregator as start_aggregator
    from coord.starter.api.chains import ChainBusy as ChainBusy
    from coord.starter.api.chains import chain_handle as chain_handle
    from coord.starter.api.chains import chain_running as chain_running
    from coord.starter.api.chains import chain_state as chain_state
    from coord.starter.api.chains import chain_timeline as chain_timeline
    from coord.starter.api.chains import close_chain as close_chain
    from coord.starter.api.chains import publish as publish
    from coord.starter.api.chains import publish_acked as publish_acked
    from coord.starter.api.chains import start_chain as start_chain
    from coord.starter.api.common import Conflict as Conflict
    from coord.starter.api.common import NotFound as NotFound
    from coord.starter.api.common import NoWorker as NoWorker
    from coord.starter.api.common import Undeliverable as Undeliverable
    from coord.starter.api.costs import correlation_tokens as correlation_tokens
    from coord.starter.api.dlq import dlq_archive as dlq_archive
    from coord.starter.api.dlq import dlq_archive_many as dlq_archive_many
    from coord.starter.api.dlq import dlq_counts as dlq_counts
    from coord.starter.api.dlq import dlq_entries as dlq_entries
    from coord.starter.api.dlq import dlq_entry as dlq_entry
    from coord.starter.api.dlq import dlq_page as dlq_page
    from coord.starter.api.dlq import dlq_query as dlq_query
    from coord.starter.api.dlq import dlq_replay as dlq_replay
    from coord.starter.api.dlq import dlq_replay_many as dlq_replay_many
    from coord.starter.api.dlq import dlq_selected as dlq_selected
    from coord.starter.api.log import LogPage as LogPage
    from coord.starter.api.log import read_log as read_log
    from coord.starter.api.log import read_log_page as read_log_page
    from coord.starter.api.log import replay_into as replay_into
    from coord.starter.api.plans import add_tasks as add_tasks
    from coord.starter.api.plans import approve_task as approve_task
    from coord.starter.api.plans import cancel_plan as cancel_plan
    from coord.starter.api.plans import plan_handle as plan_handle
    from coord.starter.api.plans import plan_outcome as plan_outcome
    from coord.starter.api.plans import plan_progress as plan_progress
    from coord.starter.api.plans import plan_state as plan_state
    from coord.starter.api.plans import start_plan as start_plan
    from coord.starter.api.rewind import diff_correlations as diff_correlations
    from coord.starter.api.rewind import rewind_chain as rewind_chain
    from coord.starter.api.rewind import rewind_plan as rewind_plan
    from coord.starter.api.rewind import rewind_saga as rewind_saga
    from coord.starter.api.rewind_batch import diff_summary as diff_summary
    from coord.starter.api.rewind_batch import rewind_many as rewind_many
    from coord.starter.api.routing import broadcast as broadcast
    from coord.starter.api.routing import deliver as deliver
    from coord.starter.api.sagas import cancel_saga as cancel_saga
    from coord.starter.api.sagas import correlation_events as correlation_events
    from coord.starter.api.sagas import saga_handle as saga_handle
    from coord.starter.api.sagas import saga_outcome as saga_outcome
    from coord.starter.api.sagas import saga_state as saga_state
    from coord.starter.api.sagas import start_saga as start_saga
    from coord.starter.api.votes import cancel_vote as cancel_vote
    from coord.starter.api.votes import start_vote as start_vote
    from coord.starter.api.votes import vote_handle as vote_handle
    from coord.starter.api.votes import vote_outcome as vote_outcome
    from coord.starter.api.votes import vote_state as vote_state
else:
    from coord._lazy import LazyExports

    _EXPORTS = LazyExports(__name__, __file__)
    __getattr__, __dir__ = _EXPORTS.attribute, _EXPORTS.listing
