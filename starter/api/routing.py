"""Where an event goes: one workflow, or its correlation's chain and aggregators."""

from temporalio.client import (
    Client,
)

from coord.models.aggregator import AggregatorSpec
from coord.models.chain import (
    ChainSpec,
)
from coord.models.envelope import EventEnvelope
from coord.starter.api.aggregators import publish_to_aggregator, running_aggregators
from coord.starter.api.chains import publish
from coord.starter.api.common import Delivery, Undeliverable, signal_each, signal_event


async def deliver(
    client: Client,
    envelope: EventEnvelope,
    *,
    spec: ChainSpec | AggregatorSpec | None = None,
    to: str | None = None,
    queue: str | None = None,
) -> Delivery:
    """Deliver an event where it belongs: to one workflow (`to`), or to its correlation's chain
    and every running aggregator scoped to that correlation, each on its own: a target that has
    ended is skipped and reported, and only an event that reached nothing fails. An aggregator
    spec starts that aggregator with the event (signal-with-start)."""
    if isinstance(spec, AggregatorSpec):
        return Delivery(reached=[await publish_to_aggregator(client, envelope, spec, queue=queue)])
    if to is not None:
        await signal_event(client, to, envelope)
        return Delivery(reached=[to])
    aggregators = await running_aggregators(client, envelope.event.correlation_id or "")
    delivery = await signal_each(client, aggregators, envelope.model_dump(mode="json"))
    try:
        delivery.reached.append(await publish(client, envelope, spec=spec, queue=queue))
    except Undeliverable as error:
        if not delivery.reached:
            raise
        delivery.skipped.append(str(error))
    return delivery
