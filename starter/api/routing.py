"""Where an event goes: one workflow, or its correlation's chain and aggregators."""

from temporalio.client import (
    Client,
)

from models.aggregator import AggregatorSpec
from models.chain import (
    ChainSpec,
)
from models.envelope import EventEnvelope
from starter.api.aggregators import publish_to_aggregator, running_aggregators
from starter.api.chains import publish
from starter.api.common import Undeliverable, signal_event


async def deliver(
    client: Client,
    envelope: EventEnvelope,
    *,
    spec: ChainSpec | AggregatorSpec | None = None,
    to: str | None = None,
    queue: str | None = None,
) -> list[str]:
    """Deliver an event where it belongs: to one workflow (`to`), or to its correlation's chain
    and every running aggregator scoped to that correlation. An aggregator spec starts that
    aggregator with the event (signal-with-start)."""
    if isinstance(spec, AggregatorSpec):
        return [await publish_to_aggregator(client, envelope, spec, queue=queue)]
    if to is not None:
        await signal_event(client, to, envelope)
        return [to]
    correlation_id = envelope.event.correlation_id or ""
    targets = [wid for wid in await running_aggregators(client, correlation_id)]
    for workflow_id in targets:
        await signal_event(client, workflow_id, envelope)
    try:
        targets.append(await publish(client, envelope, spec=spec, queue=queue))
    except Undeliverable:
        if not targets:
            raise
    return targets
