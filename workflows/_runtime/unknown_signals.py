"""A signal none of a workflow's handlers takes (a misspelt name, one meant for another
workflow) is parked in the dead-letter queue with what it carried, never left unread.

Temporal records such a signal in the run's history, and the SDK keeps it for a handler that
never comes; nobody reads it. A workflow that takes `ParksUnknownSignals` as a base parks it
instead, as `invalid_input` naming the signal, once its run takes the workflow's patch. The
run must not end while a parking is under way: each waits for them before it ends
(`ParksUnknownSignals.parkings_landed`, or every handler)."""

from collections.abc import Sequence
from typing import Any, ClassVar

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from coord.models.wire.contract import HANDLER_TEXT, UNKNOWN_SIGNAL, FailureType
    from coord.workflows._runtime.common import park, uncancellable, unknown_signal
    from coord.workflows._runtime.patches import adopted, in_force, patched


class ParksUnknownSignals:
    """The dynamic signal handler of a workflow that parks what it has no handler for, named
    in its class line: `class Saga(ParksUnknownSignals, kind="a saga", patch=...)`.

    `patch`: the patch a run takes it by; `kind` names the workflow in the refusal. `asked`:
    whether the patch is asked when such a signal first comes (a workflow that runs no local
    activity, whose marker a patch asked mid-run could precede), or only in force from the
    run's bundle (`in_force`, the default)."""

    UNKNOWN_SIGNALS_PATCH: ClassVar[str]
    UNKNOWN_SIGNALS_ASKED: ClassVar[bool]
    WORKFLOW_KIND: ClassVar[str]

    def __init_subclass__(cls, *, kind: str, patch: str, asked: bool = False) -> None:
        super().__init_subclass__()
        cls.WORKFLOW_KIND, cls.UNKNOWN_SIGNALS_PATCH, cls.UNKNOWN_SIGNALS_ASKED = kind, patch, asked

    _parkings = 0
    """Unknown signals being handled (an instance's count once one comes), from the moment its
    handler starts: one that waits for its run's patches is counted already."""

    @workflow.signal(dynamic=True, description=HANDLER_TEXT[UNKNOWN_SIGNAL])
    async def unknown(self, name: str, args: Sequence[RawValue]) -> None:
        """A signal no handler takes: parked with what it carried (`unknown_signal`)."""
        self._parkings += 1
        try:
            if await self._parks_unknown():
                await self._park_letter(*unknown_signal(name, args, self.WORKFLOW_KIND))
        finally:
            self._parkings -= 1

    async def park_refused(self, reason: str, carried: Any) -> None:
        """Parks what a handler of the run refused (`invalid_input`, with what it carried): as
        an unknown signal, the run ends only once it is parked (`parkings_landed`)."""
        self._parkings += 1
        try:
            await self._park_letter(reason, carried)
        finally:
            self._parkings -= 1

    async def _parks_unknown(self) -> bool:
        patch = self.UNKNOWN_SIGNALS_PATCH
        if self.UNKNOWN_SIGNALS_ASKED:
            return patched(patch)
        await workflow.wait_condition(adopted)  # a saga adopts its patches as its run begins
        return in_force(patch)

    async def _park_letter(self, reason: str, carried: Any) -> None:
        workflow.logger.warning("signal parked: %s", reason)
        await park(
            FailureType.INVALID_INPUT,
            reason,
            raw=carried,
            correlation_id=self._correlation(),
            task_queue=self._parking_queue(),
        )

    def _correlation(self) -> str | None:
        """The run's correlation when its record names one (a saga's, a plan's or a vote's
        `state`), which its entry is then listed by; None for the others."""
        state = getattr(getattr(self, "_model", None), "state", None)
        correlation: str | None = getattr(state, "correlation_id", None) or None
        return correlation

    def _parking_queue(self) -> str | None:
        """Where the parking activity is served: the run's own queue (None) for every workflow
        whose worker runs the project's activities."""
        return None

    async def parkings_landed(self) -> None:
        """Waits, shielded from a cancel, until no parking is under way (at once when none is,
        which is every run that took no unknown signal): the run then ends with them parked."""
        if self._parkings:
            await uncancellable(workflow.wait_condition(lambda: not self._parkings))
