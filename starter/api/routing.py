"""Where an event goes, all in one place: one workflow (`to`), its correlation's chain and every
running aggregator scoped to that correlation, or every running chain. Each target is signalled
on its own, and the `Delivery` says which were reached and why each other was skipped."""

from temporalio.client import Client
from temporalio.service import RPCError

from coord.infra.signals import running, signal_each
from coord.models.aggregator.spec import AggregatorSpec
from coord.models.chain.spec import ChainSpec
from coord.models.events.delivery import Delivery
from coord.models.events.envelope import EventEnvelope
from coord.models.wire import contract
from coord.starter.api.aggregators import publish_to_aggregator
from coord.starter.api.chains import publish
from coord.starter.api.common import Undeliverable, api_call, undeliverable


@api_call
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
    correlation_id = envelope.event.correlation_id or ""
    aggregators = await running(client, contract.Pattern.AGGREGATOR, correlation_id)
    delivery = await signal_each(client, aggregators, envelope.model_dump(mode="json"))
    try:
        delivery.reached.append(await publish(client, envelope, spec=spec, queue=queue))
    except Undeliverable as error:
        if not delivery.reached:
            raise
        delivery.skipped.append(str(error))
    return delivery


@api_call
async def broadcast(client: Client, envelope: EventEnvelope) -> Delivery:
    """Deliver a topic-wide event (an alert, say) to every running chain; each takes it as its
    own correlation's. A chain that has ended since it was listed is skipped and reported; only
    an event that reached no chain fails."""
    event = envelope.model_dump(mode="json")
    event["event"]["correlation_id"] = None
    chains = await running(client, contract.Pattern.CHAIN)
    delivery = await signal_each(client, chains, event)
    if not delivery.reached:
        skipped = f" ({'; '.join(delivery.skipped)})" if delivery.skipped else ""
        raise Undeliverable(f"no running chain took event {envelope.event.id}{skipped}")
    return delivery


async def signal_event(client: Client, workflow_id: str, envelope: EventEnvelope) -> None:
    try:
        await client.get_workflow_handle(workflow_id).signal(
            contract.EVENT_SIGNAL, envelope.model_dump(mode="json")
        )
    except RPCError as error:
        raise await undeliverable(
            client, workflow_id, envelope, error, f"no workflow {workflow_id!r}"
        ) from None
