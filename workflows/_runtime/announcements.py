"""How a plan or a vote sends its lifecycle into its correlation's chain: in the background (the
pattern never waits for a send), all of them awaited before the run ends (`flush`). A
correlation without a running chain is never the pattern's failure: the first send that finds
none stops the rest, so a pattern without a chain pays one failed signal.

Signals sent in one workflow task may reach the chain in any order (the server delivers each on
its own), so the chain's timeline can hold an event before its cause; the correlation table
orders rows by causation. `in_order` sends one at a time instead, each after the one before has
landed: what a vote needs, since a chain that starts votes on `DecisionMade` is held to its
depth limit through the order of `VoteOpened` and `DecisionMade` (a few events a vote, so the
round trips cost little), where a plan's many events go out together.

A plan asks whether its chain runs with its first question to its worker, and holds its events
until the answer (`hold`, `chain_known`): a plan of local runs issues most of its events before
any signal's failure could come back, so without the answer a plan without a chain would pay a
failed signal for nearly every event. Unanswered, the first event goes alone and the rest wait
for it."""

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.events.envelope import EventEnvelope
    from coord.models.wire.contract import EVENT_SIGNAL
    from coord.workflows._runtime.common import signal_chain, uncancellable


class ChainAnnouncements:
    """The sink a pattern's model announces to."""

    def __init__(self, correlation_id: str, *, in_order: bool = False) -> None:
        self._correlation_id = correlation_id
        self._in_order = in_order
        self._queue: list[EventEnvelope] = []
        self._sending: list[asyncio.Task[None]] = []
        self._drainer: asyncio.Task[None] | None = None
        self._reachable = True
        self._held: list[EventEnvelope] | None = None
        """The events kept until `chain_known`; None when not holding."""
        self._first_alone = False
        self._first: asyncio.Task[None] | None = None

    def hold(self) -> None:
        """Keep every event until `chain_known` says whether the chain runs."""
        self._held = []

    def chain_known(self, runs: bool | None) -> None:
        """Release the events `hold` kept: none is sent when the chain does not run, all when
        it does; unknown (None), the first goes alone and the rest once it reached the chain."""
        held, self._held = self._held or [], None
        if runs is False:
            self._reachable = False
        self._first_alone = runs is None
        for envelope in held:
            self.send(envelope)

    def send(self, envelope: EventEnvelope) -> None:
        if not self._reachable:
            return
        if self._held is not None:
            self._held.append(envelope)
            return
        if not self._in_order:
            first = self._first if self._first_alone else None
            task = asyncio.create_task(self._signal(envelope, after=first))
            if self._first_alone and first is None:
                self._first = task
            self._sending.append(task)
            return
        self._queue.append(envelope)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
            self._sending.append(self._drainer)

    async def _drain(self) -> None:
        while self._queue and self._reachable:
            await self._signal(self._queue.pop(0))

    async def _signal(
        self, envelope: EventEnvelope, after: "asyncio.Task[None] | None" = None
    ) -> None:
        if after is not None:
            await workflow.wait([after])
        raw = envelope.model_dump(mode="json")
        if self._reachable and not await signal_chain(self._correlation_id, EVENT_SIGNAL, raw):
            self._reachable = False

    async def flush(self) -> None:
        """Every send started has landed (shielded from a cancel: the run is ending); events
        still held go as when the answer is unknown."""
        if self._held is not None:
            self.chain_known(None)
        while self._sending:
            sending, self._sending = self._sending, []
            await uncancellable(asyncio.gather(*sending))
