"""How a plan or a vote sends its lifecycle into its correlation's chain: each event in the
background (the pattern never waits for a send), in the order announced (signals a workflow
task starts go out in the order they were started), and all of them awaited before the run ends
(`flush`). A correlation without a running chain is never the pattern's failure: the first send
that finds none stops the rest, so a plan without a chain pays one failed signal."""

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.events.envelope import EventEnvelope
    from coord.models.wire.contract import EVENT_SIGNAL
    from coord.workflows._runtime.common import signal_chain, uncancellable


class ChainAnnouncements:
    """The sink a pattern's model announces to."""

    def __init__(self, correlation_id: str) -> None:
        self._correlation_id = correlation_id
        self._sending: list[asyncio.Task[None]] = []
        self._reachable = True

    def send(self, envelope: EventEnvelope) -> None:
        if self._reachable:
            self._sending.append(asyncio.create_task(self._signal(envelope)))

    async def _signal(self, envelope: EventEnvelope) -> None:
        raw = envelope.model_dump(mode="json")
        if self._reachable and not await signal_chain(self._correlation_id, EVENT_SIGNAL, raw):
            self._reachable = False

    async def flush(self) -> None:
        """Every send started has landed (shielded from a cancel: the run is ending)."""
        while self._sending:
            sending, self._sending = self._sending, []
            await uncancellable(asyncio.gather(*sending))
