"""The rows a correlation's aggregators, plans and votes keep of the events they published, for
the correlation table beside its chain's timeline and its sagas' events; and whether any of its
runs still runs, which `coord events --follow` follows."""

from collections.abc import AsyncIterator

from temporalio.client import Client

from coord.models.events.timeline import TimelineEntry
from coord.models.wire import contract
from coord.starter.api.aggregators import aggregator_record, aggregator_run
from coord.starter.api.plans import plan_record, plan_run
from coord.starter.api.votes import vote_record, vote_run


async def pattern_rows(client: Client, correlation_id: str) -> list[list[TimelineEntry]]:
    """Per aggregator, plan and vote of the correlation (running or closed), its events in its
    own order: an aggregator's emitted event, the events a plan or vote announced."""
    rows: list[list[TimelineEntry]] = []
    async for workflow_id in correlated(client, correlation_id, contract.Pattern.AGGREGATOR):
        emitted = (await aggregator_record(aggregator_run(client, workflow_id))).emitted
        if emitted is not None:
            entry = TimelineEntry.recording(emitted, seq=1, correlation_id=correlation_id)
            rows.append([entry])
    async for workflow_id in correlated(client, correlation_id, contract.Pattern.PLAN):
        rows.append((await plan_record(plan_run(client, workflow_id))).events)
    async for workflow_id in correlated(client, correlation_id, contract.Pattern.VOTE):
        rows.append((await vote_record(vote_run(client, workflow_id))).events)
    return rows


async def correlated(
    client: Client, correlation_id: str, pattern: contract.Pattern
) -> AsyncIterator[str]:
    """The workflow ids of the pattern's runs of this correlation, running or closed."""
    query = (
        f"{contract.pattern_clause(pattern)} AND "
        f"{contract.CORRELATION_ID.name} = '{correlation_id}'"
    )
    seen: set[str] = set()
    async for execution in client.list_workflows(query):
        if execution.id not in seen:
            seen.add(execution.id)
            yield execution.id


PUBLISHING = (
    contract.Pattern.CHAIN,
    contract.Pattern.SAGA,
    contract.Pattern.AGGREGATOR,
    contract.Pattern.PLAN,
    contract.Pattern.VOTE,
)
"""The patterns whose runs add rows to the correlation table. Not the dead-letter queue: a
parked entry waits for a person, for days, and adds none."""


async def correlation_running(client: Client, correlation_id: str) -> bool:
    """Whether a chain, saga, aggregator, plan or vote of the correlation still runs: read from
    the server's visibility, which follows the runs by a second or so."""
    patterns = " OR ".join(contract.pattern_clause(pattern) for pattern in PUBLISHING)
    query = (
        f"{contract.CORRELATION_ID.name} = '{correlation_id}' AND "
        f"ExecutionStatus = 'Running' AND ({patterns})"
    )
    return (await client.count_workflows(query)).count > 0
