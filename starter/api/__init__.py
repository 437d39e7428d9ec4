"""The Python API for scripts; the `coord` CLI is a thin layer over it."""

from starter.api.aggregators import (
    aggregator_handle,
    aggregator_state,
    cancel_aggregator,
    publish_to_aggregator,
    running_aggregators,
    start_aggregator,
)
from starter.api.chains import (
    broadcast,
    chain_handle,
    chain_running,
    chain_state,
    chain_summary,
    chain_timeline,
    close_chain,
    publish,
    start_chain,
)
from starter.api.common import (
    Undeliverable,
    closed_with_result,
    signal_event,
    target_name,
    undeliverable,
)
from starter.api.dlq import (
    dlq_archive,
    dlq_archive_many,
    dlq_counts,
    dlq_entries,
    dlq_entry,
    dlq_page,
    dlq_replay,
    dlq_replay_many,
    dlq_selected,
)
from starter.api.routing import (
    deliver,
)
from starter.api.sagas import (
    cancel_saga,
    saga_handle,
    saga_outcome,
    saga_state,
    saga_summary,
    start_saga,
)

__all__ = [
    "Undeliverable",
    "aggregator_handle",
    "aggregator_state",
    "broadcast",
    "cancel_aggregator",
    "cancel_saga",
    "chain_handle",
    "chain_running",
    "chain_state",
    "chain_summary",
    "chain_timeline",
    "close_chain",
    "closed_with_result",
    "deliver",
    "dlq_archive",
    "dlq_archive_many",
    "dlq_counts",
    "dlq_entries",
    "dlq_entry",
    "dlq_page",
    "dlq_replay",
    "dlq_replay_many",
    "dlq_selected",
    "publish",
    "publish_to_aggregator",
    "running_aggregators",
    "saga_handle",
    "saga_outcome",
    "saga_state",
    "saga_summary",
    "signal_event",
    "start_aggregator",
    "start_chain",
    "start_saga",
    "target_name",
    "undeliverable",
]
