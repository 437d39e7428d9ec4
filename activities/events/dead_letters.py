"""Deliveries that need a client: parking dead letters (`infra.dead_letters`), reading again the
stored event an entry waits for, and replaying them to their targets."""

from collections.abc import Callable
from functools import cached_property
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError

from coord.infra.dead_letters import park_dead_letter
from coord.infra.payload_store import STORE_ENV, PayloadUnavailable, StoredPayloads
from coord.models import calls as refs
from coord.models.chain.spec import ChainInput
from coord.models.dlq.letter import (
    AgentLookup,
    DeadLetter,
    DeclaredAgent,
    Redelivery,
)
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.config import AgentConfig
from coord.models.saga.budget import TAKEN_BEFORE
from coord.models.saga.spec import SagaSpec
from coord.models.wire.contract import (
    AGGREGATOR_WORKFLOW,
    CHAIN_WORKFLOW,
    EVENT_SIGNAL,
    RERUN_SIGNAL,
    SAGA_WORKFLOW,
    FailureType,
    failure,
)
from coord.models.wire.specs import SpecError, parse_model

DECLARED_AGENTS: dict[str, Callable[[Any], dict[str, AgentConfig]]] = {
    SAGA_WORKFLOW: lambda raw: SagaSpec.model_validate(raw, context=TAKEN_BEFORE).agents,
    CHAIN_WORKFLOW: lambda raw: ChainInput.model_validate(raw).spec.agents,
}
"""Where each workflow type that runs agents keeps its inline declarations in its input."""

TAKERS = {EVENT_SIGNAL: {CHAIN_WORKFLOW, AGGREGATOR_WORKFLOW}, RERUN_SIGNAL: {CHAIN_WORKFLOW}}
"""The workflow types that take each signal a replay sends: any other would record the signal
and drop it, and the replay would say the event was delivered."""


class DeadLetterActivities:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=refs.PARK_DEAD_LETTER.name)
    async def park(self, letter: DeadLetter) -> str:
        """One park of the workflow that schedules it: the run and this activity's id name it,
        the same on every attempt (a retry finds the entry its first attempt started) and
        different for every other park of that workflow (an unreadable rejection arriving again
        is its own entry, so each is found and counted; `dead_letter_id`). Taken here rather
        than carried in the letter, so the workflow's commands and old runs' histories are
        unchanged."""
        info = activity.info()
        parking = f"{info.workflow_run_id}/{info.activity_id}"
        return await park_dead_letter(self._client, letter, info.task_queue, parking=parking)

    @cached_property
    def _payloads(self) -> StoredPayloads:
        """The worker's payload store, opened at first use."""
        return StoredPayloads()

    @activity.defn(name=refs.STORED_EVENT.name)
    async def stored_event(self, digest: str) -> EventEnvelope:
        """The event stored as `digest`, read from this worker's payload store for a replay of
        the entry that waits for it. One the store still cannot read is `payload_unavailable`,
        naming the object and the store; one that is no event is `invalid_envelope`."""
        try:
            payload = await self._payloads.get(digest)
        except PayloadUnavailable as missing:
            store = self._payloads.location
            where = "" if store in missing.reason else f" (payload store {store})"
            raise failure(
                FailureType.PAYLOAD_UNAVAILABLE,
                f"stored object {digest} cannot be read: {missing.reason}{where}; put it back in "
                "the worker's payload store, or point the worker at the store that holds it "
                f"({STORE_ENV}), then replay again",
                non_retryable=True,
            ) from None
        raw = self._client.data_converter.payload_converter.from_payload(payload)
        try:
            return parse_model(EventEnvelope, raw, f"stored object {digest}")
        except SpecError as error:
            raise failure(FailureType.INVALID_ENVELOPE, str(error), non_retryable=True) from None

    @activity.defn(name=refs.REDELIVER.name)
    async def redeliver(self, redelivery: Redelivery) -> None:
        """To a chain's agent (the chain runs it again and continues from there), or as an event
        to its workflow."""
        handle = self._client.get_workflow_handle(redelivery.target_workflow)
        event = redelivery.event.model_dump(mode="json")
        signal = RERUN_SIGNAL if redelivery.target_agent else EVENT_SIGNAL
        try:
            kind = (await handle.describe()).workflow_type
            if kind not in TAKERS[signal]:
                raise failure(
                    FailureType.TARGET_UNAVAILABLE,
                    f"{redelivery.target_workflow} is a {kind}, which takes no `{signal}` "
                    "signal: archive the entry",
                    non_retryable=True,
                )
            if redelivery.target_agent:
                rerun = {
                    "subscription": redelivery.target_agent,
                    "event": event,
                    "idempotency_key": redelivery.idempotency_key,
                    "inputs": redelivery.inputs,
                }
                await handle.signal(RERUN_SIGNAL, rerun)
            else:
                await handle.signal(EVENT_SIGNAL, event)
        except RPCError as error:
            raise failure(
                FailureType.TARGET_UNAVAILABLE,
                f"{redelivery.target_workflow} cannot take it: {error.message}",
                non_retryable=True,
            ) from None

    @activity.defn(name=refs.DECLARED_AGENT.name)
    async def declared_agent(self, lookup: AgentLookup) -> DeclaredAgent:
        """The agent's inline declaration in the target saga's or chain's spec, read from that
        workflow's own start event (which the server recorded, not whoever parked the entry).
        Nothing when the target is gone, of another kind, or does not declare the agent; the
        worker's rules for inline agents apply to what is found, as for the original run."""
        handle = self._client.get_workflow_handle(lookup.target_workflow)
        try:
            async for event in handle.fetch_history_events():
                started = event.workflow_execution_started_event_attributes
                agents_of = DECLARED_AGENTS.get(started.workflow_type.name)
                if agents_of is None:
                    return DeclaredAgent()
                [raw] = await self._client.data_converter.decode(started.input.payloads)
                return DeclaredAgent(config=agents_of(raw).get(lookup.agent))
        except (RPCError, ValueError):
            return DeclaredAgent()
        return DeclaredAgent()
