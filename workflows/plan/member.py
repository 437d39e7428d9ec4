"""The `TeamMember` workflow: a plan's long-lived team member, an entity with a mailbox.

One state structure (`MemberStart`, which the workflow also continues as new with), typed
inputs checked where they enter (the start input and the `deliver` signal are decoded raw: a
malformed start fails the run `invalid_spec`; a malformed message, one for another member and a
signal the member has no handler for are parked as `invalid_input`, none ever failing a
workflow task), one message handled at a time in the
plan's order, and continue-as-new only between messages, once the handlers have finished and
the history is past its bound (`MemberModel.continue_due`). The rules are in
`coord.models.plan.member`."""

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from coord.models.mesh.agents import TeamMessage
    from coord.models.mesh.retry import RetryConfig
    from coord.models.plan.member import MemberModel, MemberSent, MemberStart
    from coord.models.plan.spec import DEFAULT_TASK_TIMEOUT, MemberRecord
    from coord.models.wire.contract import (
        CLOSE_SIGNAL,
        DELIVER_SIGNAL,
        HANDLER_TEXT,
        MEMBER_SENT_SIGNAL,
        STATE_QUERY,
        TEAM_MEMBER_WORKFLOW,
        FailureType,
        failure,
    )
    from coord.models.wire.versions import (
        MEMBER_PARKS_WHAT_IT_REFUSES_PATCH,
        MEMBER_PATCHES,
        MEMBER_PATCHES_AT_ONCE_PATCH,
    )
    from coord.workflows._runtime.agent_runs import RunSettings, start_agent_run
    from coord.workflows._runtime.arguments import SurplusStartArguments
    from coord.workflows._runtime.common import (
        NO_INPUT,
        InvalidInput,
        PlainInput,
        carried_by,
        decode_input,
        decode_start,
        signal_if_running,
        task_error,
    )
    from coord.workflows._runtime.patches import adopt_newest, in_force
    from coord.workflows._runtime.unknown_signals import ParksUnknownSignals

PATCH_BUNDLES = ((MEMBER_PATCHES_AT_ONCE_PATCH, MEMBER_PATCHES),)
"""The member's bundles of patches, newest first (`adopt_newest`)."""


@workflow.defn(name=TEAM_MEMBER_WORKFLOW, sandboxed=False)
class TeamMember(
    ParksUnknownSignals,
    kind="a team member",
    patch=MEMBER_PARKS_WHAT_IT_REFUSES_PATCH,
    metaclass=SurplusStartArguments,
):
    """Runs its agent on each message it is handed, until its plan closes it; its result is
    its record (what it handled, its memory)."""

    @workflow.init
    def __init__(self, raw_start: PlainInput = NO_INPUT) -> None:
        """Decodes the start input here, so the query answers from the first task on; one
        that does not decode fails the run `invalid_spec` (never its workflow task)."""
        adopt_newest(PATCH_BUNDLES, on=self)
        start, self._problem = decode_start(MemberStart, raw_start, "member start")
        self._model = None if start is None else MemberModel(start)

    @workflow.run
    async def run(self, raw_start: PlainInput = NO_INPUT) -> MemberRecord:
        model = self._model_or_fail()
        while True:
            await workflow.wait_condition(lambda: model.has_mail() or model.start.closing)
            if model.has_mail():
                await self._handle(model.next_message())
            elif model.done():
                await workflow.wait_condition(workflow.all_handlers_finished)
                return model.record
            info = workflow.info()
            due = model.continue_due(
                info.get_current_history_length(), info.is_continue_as_new_suggested()
            )
            if due:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(model.start)

    def _correlation(self) -> str | None:
        """The plan's correlation, which what the member parks is listed by."""
        return None if self._model is None else self._model.start.correlation_id

    def _model_or_fail(self) -> MemberModel:
        if self._model is None:
            raise failure(FailureType.INVALID_SPEC, self._problem or "", non_retryable=True)
        return self._model

    async def _handle(self, message: TeamMessage) -> None:
        """The member's agent on the oldest message; its outcome joins the memory."""
        model = self._model_or_fail()
        settings = RunSettings(
            summary=f"{model.start.member}: message {message.seq} from {message.sender}",
            retry=RetryConfig(),
            start_to_close=DEFAULT_TASK_TIMEOUT,
            agent_queue=model.start.agent_queue,
            activity_id=f"{model.start.member}/message/{message.seq}",
        )
        try:
            result = await start_agent_run(model.request(message), settings)
        except ActivityError as error:
            model.handled(None, task_error(error), workflow.now())
            return
        model.handled(result.data, None, workflow.now())
        if result.messages:
            await self._tell_plan(
                MemberSent(member=model.start.member, seq=message.seq, messages=result.messages)
            )

    async def _tell_plan(self, sent: MemberSent) -> None:
        """What the run asked to send goes to the plan, which checks and delivers it (a member
        started on its own, without a plan, has nobody to tell)."""
        parent = workflow.info().parent
        if parent is None:
            workflow.logger.warning("no plan to send messages through", extra={"seq": sent.seq})
            return
        await signal_if_running(
            parent.workflow_id, MEMBER_SENT_SIGNAL, sent.model_dump(mode="json")
        )

    @workflow.signal(name=DELIVER_SIGNAL, description=HANDLER_TEXT[DELIVER_SIGNAL])
    async def deliver(self, raw: PlainInput) -> None:
        """A message from the plan, in its order; a malformed one, or one for another member,
        is parked (`_refused`)."""
        try:
            message = decode_input(TeamMessage, raw, "message")
        except InvalidInput as error:
            await self._refused(str(error), carried_by(raw, "message"))
            return
        refused = self._model.receive(message) if self._model is not None else "no member"
        if refused is not None:
            await self._refused(refused, message.model_dump(mode="json"))

    async def _refused(self, reason: str, carried: Any) -> None:
        """Parked with what it carried (MEMBER_PARKS_WHAT_IT_REFUSES_PATCH); runs recorded
        before logged and dropped it."""
        if in_force(MEMBER_PARKS_WHAT_IT_REFUSES_PATCH, on=self):
            await self.park_refused(f"deliver: {reason}", carried)
        else:
            workflow.logger.warning("message refused", extra={"reason": reason})

    @workflow.signal(name=CLOSE_SIGNAL, description=HANDLER_TEXT[CLOSE_SIGNAL])
    def close(self) -> None:
        if self._model is not None:
            self._model.close()

    @workflow.query(name=STATE_QUERY, description=HANDLER_TEXT[STATE_QUERY])
    def state(self) -> MemberStart:
        return self._model_or_fail().start
