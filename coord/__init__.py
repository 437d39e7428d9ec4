"""Event Coordinator: event-driven coordination patterns (sagas, aggregators, reactive chains,
plans, votes) as durable Temporal workflows.

One import for scripts: connect to the configured server, load and check specs, start, read and
cancel every pattern, publish events, work the dead-letter queue, and catch `CoordError`, the
base of every error the project raises (docs/api.md). Agent authors import `coord.agents`.

    import coord

    async def main() -> None:
        client = await coord.connect()
        spec = coord.load_spec(coord.SagaSpec, Path("deploy.yaml"))
        state = await coord.saga_outcome(await coord.start_saga(client, spec), client)

    coord.run(main())

The names load when first used, so `import coord` costs nothing and never loads the worker, the
agents' code or Temporal's worker: a script pays only for what it touches. The imports below are
the one list of what `coord` serves (`coord._lazy`): one line a name, and the Python API's whole
`__all__`. Everything the
distribution installs lives under this one name, so it can sit beside a user's own `models` or
`workflows` packages; in the repository the subpackages are links to the top-level folders
(README, "Layout").
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    __all__: list[str]  # the names below, served by `coord._lazy`
    from coord.infra.extras import MissingExtra as MissingExtra
    from coord.infra.payload_store import PayloadStoreError as PayloadStoreError
    from coord.infra.payload_store import PayloadUnavailable as PayloadUnavailable
    from coord.infra.process import run as run
    from coord.infra.search_attributes import SetupNeeded as SetupNeeded
    from coord.infra.temporal import ServerUnreachable as ServerUnreachable
    from coord.infra.temporal import connect as connect
    from coord.models.aggregator.spec import AggregatorSpec as AggregatorSpec
    from coord.models.aggregator.spec import AggregatorState as AggregatorState
    from coord.models.aggregator.spec import AggregatorStatus as AggregatorStatus
    from coord.models.chain.spec import ChainSpec as ChainSpec
    from coord.models.chain.spec import ChainState as ChainState
    from coord.models.chain.spec import ChainStatus as ChainStatus
    from coord.models.dlq.letter import BulkOutcome as BulkOutcome
    from coord.models.dlq.letter import DlqCounts as DlqCounts
    from coord.models.dlq.letter import DlqEntry as DlqEntry
    from coord.models.dlq.letter import DlqPage as DlqPage
    from coord.models.dlq.letter import DlqSelection as DlqSelection
    from coord.models.dlq.letter import EntrySummary as EntrySummary
    from coord.models.events.envelope import EventEnvelope as EventEnvelope
    from coord.models.events.envelope import Priority as Priority
    from coord.models.events.timeline import TimelineEntry as TimelineEntry
    from coord.models.mesh.config import AgentsFile as AgentsFile
    from coord.models.mesh.declared import DeclaredAgents as DeclaredAgents
    from coord.models.mesh.declared import declared_agents as declared_agents
    from coord.models.plan.spec import ApprovalDecision as ApprovalDecision
    from coord.models.plan.spec import ApprovalRequest as ApprovalRequest
    from coord.models.plan.spec import PlanProgress as PlanProgress
    from coord.models.plan.spec import PlanSpec as PlanSpec
    from coord.models.plan.spec import PlanState as PlanState
    from coord.models.plan.spec import PlanStatus as PlanStatus
    from coord.models.saga.spec import SagaSpec as SagaSpec
    from coord.models.saga.spec import SagaState as SagaState
    from coord.models.saga.spec import SagaStatus as SagaStatus
    from coord.models.vote.spec import VoteSpec as VoteSpec
    from coord.models.vote.spec import VoteState as VoteState
    from coord.models.vote.spec import VoteStatus as VoteStatus
    from coord.models.wire.contract import PublishAnswer as PublishAnswer
    from coord.models.wire.errors import CoordError as CoordError
    from coord.models.wire.errors import RunFailed as RunFailed
    from coord.models.wire.errors import ServerRefused as ServerRefused
    from coord.models.wire.specs import SpecError as SpecError
    from coord.models.wire.specs import load_spec as load_spec
    from coord.starter.api import *  # noqa: F403 (the Python API's whole `__all__`)
else:
    from coord._lazy import LazyExports

    _EXPORTS = LazyExports(__name__, __file__)
    __getattr__, __dir__ = _EXPORTS.attribute, _EXPORTS.listing
