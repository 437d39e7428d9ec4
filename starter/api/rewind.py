"""Compare two correlations (`coord diff`): each one's log read in its logical order, then
aligned row by row by causation (`coord.models.rewind.diff`)."""

from temporalio.client import Client

from coord.models.events.timeline import TimelineEntry
from coord.models.rewind.diff import CorrelationDiff, diff_logs
from coord.starter.api.sagas import correlation_events


async def diff_correlations(client: Client, left: str, right: str) -> CorrelationDiff:
    """The correlations `left` and `right` side by side (a rewound copy beside its original)."""
    return diff_logs(left, await _in_order(client, left), right, await _in_order(client, right))


async def _in_order(client: Client, correlation_id: str) -> list[TimelineEntry]:
    """The correlation table numbered in its own order: the chain's rows and those of the
    patterns beside it share one sequence."""
    rows = await correlation_events(client, correlation_id)
    return [row.model_copy(update={"seq": n}) for n, row in enumerate(rows, start=1)]
