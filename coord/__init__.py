"""Event Coordinator: event-driven coordination patterns (sagas, aggregators, reactive chains,
plans, votes) as durable Temporal workflows.

One import for scripts: connect to the configured server, load and check specs, start, read and
cancel every pattern, publish events, work the dead-letter queue, and catch `CoordError`, the
base of every error the project raises (docs/api.md). Agent authors import `coord.agents`.

    import coord

    async def main() -> None:
        client = await coord.connect()
        spec = coord.load_spec(coord.SagaSpec, Path("deploy.yaml"))
        state = await coord.saga_outcome(await coord.start_saga(client, spec))

    coord.run(main())

The names load when first used, so `import coord` costs nothing and never loads the worker, the
agents' code or Temporal's worker: a script pays only for what it touches. Everything the
distribution installs lives under this one name, so it can sit beside a user's own `models` or
`workflows` packages; in the repository the subpackages are links to the top-level folders
(README, "Layout").
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coord.infra.extras import (
        MissingExtra,
    )
    from coord.infra.payload_store import (
        PayloadStoreError,
        PayloadUnavailable,
    )
    from coord.infra.process import run
    from coord.infra.search_attributes import (
        SetupNeeded,
    )
    from coord.infra.temporal import (
        ServerUnreachable,
        connect,
    )
    from coord.models.aggregator.spec import (
        AggregatorSpec,
        AggregatorState,
        AggregatorStatus,
    )
    from coord.models.chain.spec import (
        ChainSpec,
        ChainState,
        ChainStatus,
    )
    from coord.models.dlq.letter import (
        BulkOutcome,
        DlqCounts,
        DlqEntry,
        DlqPage,
        DlqSelection,
        EntrySummary,
    )
    from coord.models.events.envelope import (
        EventEnvelope,
        Priority,
    )
    from coord.models.events.timeline import (
        TimelineEntry,
    )
    from coord.models.mesh.config import (
        AgentsFile,
    )
    from coord.models.mesh.declared import (
        DeclaredAgents,
        declared_agents,
    )
    from coord.models.plan.spec import (
        ApprovalDecision,
        ApprovalRequest,
        PlanProgress,
        PlanSpec,
        PlanState,
        PlanStatus,
    )
    from coord.models.saga.spec import (
        SagaSpec,
        SagaState,
        SagaStatus,
    )
    from coord.models.vote.spec import (
        VoteSpec,
        VoteState,
        VoteStatus,
    )
    from coord.models.wire.contract import (
        PublishAnswer,
    )
    from coord.models.wire.errors import (
        CoordError,
    )
    from coord.models.wire.specs import (
        SpecError,
        load_spec,
    )
    from coord.starter.api import (
        ChainBusy,
        Conflict,
        Delivery,
        NotFound,
        NoWorker,
        Undeliverable,
        aggregator_handle,
        aggregator_state,
        approve_task,
        broadcast,
        cancel_aggregator,
        cancel_plan,
        cancel_saga,
        cancel_vote,
        chain_handle,
        chain_running,
        chain_state,
        chain_timeline,
        check_agents,
        close_chain,
        correlation_events,
        deliver,
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
        plan_handle,
        plan_outcome,
        plan_progress,
        plan_state,
        publish,
        publish_acked,
        saga_handle,
        saga_outcome,
        saga_state,
        start_aggregator,
        start_chain,
        start_plan,
        start_saga,
        start_vote,
        vote_handle,
        vote_outcome,
        vote_state,
    )

EXPORTS: dict[str, tuple[str, ...]] = {
    "coord.infra.temporal": (
        "ServerUnreachable",
        "connect",
    ),
    "coord.infra.search_attributes": ("SetupNeeded",),
    "coord.infra.payload_store": (
        "PayloadStoreError",
        "PayloadUnavailable",
    ),
    "coord.infra.process": ("run",),
    "coord.infra.extras": ("MissingExtra",),
    "coord.models.wire.errors": ("CoordError",),
    "coord.models.wire.specs": (
        "SpecError",
        "load_spec",
    ),
    "coord.models.mesh.config": ("AgentsFile",),
    "coord.models.mesh.declared": (
        "DeclaredAgents",
        "declared_agents",
    ),
    "coord.models.events.envelope": (
        "EventEnvelope",
        "Priority",
    ),
    "coord.models.events.timeline": ("TimelineEntry",),
    "coord.models.wire.contract": ("PublishAnswer",),
    "coord.models.saga.spec": (
        "SagaSpec",
        "SagaState",
        "SagaStatus",
    ),
    "coord.models.chain.spec": (
        "ChainSpec",
        "ChainState",
        "ChainStatus",
    ),
    "coord.models.aggregator.spec": (
        "AggregatorSpec",
        "AggregatorState",
        "AggregatorStatus",
    ),
    "coord.models.plan.spec": (
        "ApprovalDecision",
        "ApprovalRequest",
        "PlanProgress",
        "PlanSpec",
        "PlanState",
        "PlanStatus",
    ),
    "coord.models.vote.spec": (
        "VoteSpec",
        "VoteState",
        "VoteStatus",
    ),
    "coord.models.dlq.letter": (
        "BulkOutcome",
        "DlqCounts",
        "DlqEntry",
        "DlqPage",
        "DlqSelection",
        "EntrySummary",
    ),
    "coord.starter.api": (
        "ChainBusy",
        "Conflict",
        "Delivery",
        "NoWorker",
        "NotFound",
        "Undeliverable",
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
        "deliver",
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
    ),
}
"""Where each name of `__all__` lives (what the imports above tell type checkers)."""

__all__ = [
    "AgentsFile",
    "AggregatorSpec",
    "AggregatorState",
    "AggregatorStatus",
    "ApprovalDecision",
    "ApprovalRequest",
    "BulkOutcome",
    "ChainBusy",
    "ChainSpec",
    "ChainState",
    "ChainStatus",
    "Conflict",
    "CoordError",
    "DeclaredAgents",
    "Delivery",
    "DlqCounts",
    "DlqEntry",
    "DlqPage",
    "DlqSelection",
    "EntrySummary",
    "EventEnvelope",
    "MissingExtra",
    "NoWorker",
    "NotFound",
    "PayloadStoreError",
    "PayloadUnavailable",
    "PlanProgress",
    "PlanSpec",
    "PlanState",
    "PlanStatus",
    "Priority",
    "PublishAnswer",
    "SagaSpec",
    "SagaState",
    "SagaStatus",
    "ServerUnreachable",
    "SetupNeeded",
    "SpecError",
    "TimelineEntry",
    "Undeliverable",
    "VoteSpec",
    "VoteState",
    "VoteStatus",
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
    "connect",
    "correlation_events",
    "declared_agents",
    "deliver",
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
    "load_spec",
    "plan_handle",
    "plan_outcome",
    "plan_progress",
    "plan_state",
    "publish",
    "publish_acked",
    "run",
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

_HOME = {name: module for module, names in EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    """A name of `__all__` is imported from its module on first use, then kept here."""
    try:
        module = _HOME[name]
    except KeyError:
        raise AttributeError(f"module 'coord' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
