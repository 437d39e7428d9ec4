"""A plan's team messages, the Temporal side (the rules are `coord.models.plan.team`).

After each run of a team member's task, what it asked to `send` is checked and recorded in the
plan's record (`PlanState.messages`). Each accepted message is published into the plan's
correlation as a `TeamMessage` event (its chain's log, when a chain runs; the record has it
either way), and a long-lived recipient's entity workflow (`TeamMember`, a child of the plan)
is handed it, in the plan's order. A per-task recipient gets it in its next run's request
(`TaskRequests.agent_request`). When the plan ends, its long-lived members are closed: each
handles what its mailbox holds, and its record joins the plan's (`PlanState.members`)."""

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from coord.models.mesh.agents import AgentResult, OutgoingMessage, TeamMessage
    from coord.models.plan.member import MemberSent, MemberStart
    from coord.models.plan.model import PlanModel
    from coord.models.plan.spec import Dispatch, MemberRecord, PlanTask
    from coord.models.plan.team import message_event
    from coord.models.wire.contract import (
        CLOSE_SIGNAL,
        DELIVER_SIGNAL,
        EVENT_SIGNAL,
        TEAM_MEMBER_WORKFLOW,
        member_workflow_id,
    )
    from coord.models.wire.versions import PLAN_PARKS_REFUSED_MESSAGES_PATCH, TEAM_MESSAGES_PATCH
    from coord.workflows._runtime.common import (
        InvalidInput,
        PlainInput,
        carried_by,
        decode_input,
        signal_chain,
    )
    from coord.workflows._runtime.patches import in_force, patched

MemberHandle = workflow.ChildWorkflowHandle[object, MemberRecord]


class TeamRoom:
    """The plan's team: its long-lived members' workflows, and the messages on their way."""

    def __init__(self, model: PlanModel) -> None:
        self._model = model
        self._members: dict[str, MemberHandle] = {}
        self._handing: dict[str, asyncio.Task[None]] = {}
        """Per long-lived member, the latest hand-over: each waits for the one before, so a
        member gets its messages in the plan's order."""
        self._publishing: asyncio.Task[None] | None = None
        """The latest publication: each waits for the one before, so the correlation's log
        has the messages in the plan's order."""
        self._chain_reachable = True

    async def start_members(self) -> None:
        """Starts each long-lived member's workflow, on the plan's own queue (a plan without
        any starts nothing)."""
        spec = self._model.spec
        for name in spec.long_lived_members():
            member = spec.team[name]
            start = MemberStart(
                plan_id=spec.plan_id,
                member=name,
                agent=member.agent,
                role=member.role,
                correlation_id=spec.correlation_id,
                memory=member.memory,
                config=spec.agents.get(member.agent),
                agent_queue=spec.dispatch == Dispatch.AGENT_QUEUES,
                scratchpad=spec.shared_scratchpad(),
            )
            self._members[name] = await workflow.start_child_workflow(
                TEAM_MEMBER_WORKFLOW,
                start,
                id=member_workflow_id(spec.plan_id, name),
                result_type=MemberRecord,
                static_summary=f"team member {name} ({member.agent})",
            )

    def ran(self, task: PlanTask, result: AgentResult) -> None:
        """A run of `task` succeeded: what it asked to send, checked, recorded and sent on."""
        if result.messages and patched(TEAM_MESSAGES_PATCH):
            self._post(task.member, task.id, result.messages)

    def member_sent(self, raw: PlainInput) -> tuple[str, Any] | None:
        """What a long-lived member's run asked to send, from its workflow: checked as any
        member's. Anything else (malformed, from no member of this plan) is refused: why, and
        what it carried, for the plan to park."""
        try:
            sent = decode_input(MemberSent, raw, "member_sent")
        except InvalidInput as error:
            return str(error), error.raw
        if sent.member not in self._members:
            reason = f"member_sent: {sent.member!r} is no long-lived member of this plan"
            return reason, sent.model_dump(mode="json")
        self._post(sent.member, sent.task, sent.messages)
        return None

    def _post(self, sender: str | None, task: str, messages: list[OutgoingMessage]) -> None:
        spec = self._model.spec
        post = self._model.state.messages
        posted = post.post(spec.message_limits(), sender, task, messages, workflow.now())
        for message in posted.sent:
            self._publish(message)
            if message.to in self._members:
                self._hand_over(message.to)
        for refused in posted.refused:
            workflow.logger.warning(
                "team message refused", extra={"task": refused.task, "reason": refused.reason}
            )

    def _publish(self, message: TeamMessage) -> None:
        """Into the correlation's chain, in the background; once no chain answers, the plan's
        record alone keeps the messages."""
        spec = self._model.spec
        event = message_event(spec.plan_id, spec.correlation_id, message)
        raw = event.model_dump(mode="json")
        self._publishing = asyncio.create_task(self._signal_chain(self._publishing, raw))

    async def _signal_chain(self, before: asyncio.Task[None] | None, raw: dict[str, Any]) -> None:
        if before is not None:
            await before
        if self._chain_reachable:
            reached = await signal_chain(self._model.spec.correlation_id, EVENT_SIGNAL, raw)
            self._chain_reachable = reached

    def _hand_over(self, member: str) -> None:
        messages = self._model.state.messages.deliver(member)
        before = self._handing.get(member)
        self._handing[member] = asyncio.create_task(self._signal(member, before, messages))

    async def _signal(
        self, member: str, before: asyncio.Task[None] | None, messages: list[TeamMessage]
    ) -> None:
        if before is not None:
            await before
        for message in messages:
            try:
                await self._members[member].signal(DELIVER_SIGNAL, message)
            except ApplicationError:
                workflow.logger.warning("member ended", extra={"member": member})
                return

    def busy(self) -> bool:
        """Whether the team has anything to close: long-lived members, messages on their way
        (a plan without either awaits nothing, so it ends in the steps it always did)."""
        return bool(self._members or self._publishing is not None or self._handing)

    async def close(self) -> None:
        """The plan has ended: every message published and handed over, then each long-lived
        member closed and its record kept in the plan's."""
        publishing = [self._publishing] if self._publishing is not None else []
        await asyncio.gather(*publishing, *self._handing.values())
        for handle in self._members.values():
            await handle.signal(CLOSE_SIGNAL)
        for name, handle in self._members.items():
            self._model.state.members[name] = await handle
        await asyncio.gather(*self._handing.values())


def refused_member_message(team: TeamRoom | None, raw: PlainInput) -> tuple[str, Any] | None:
    """`member_sent` taken by the plan's team (`TeamRoom.member_sent`), or refused before the
    plan has one: why, and what it carried, for a run that parks it
    (PLAN_PARKS_REFUSED_MESSAGES_PATCH); a run recorded before logs it."""
    if team is not None:
        refused = team.member_sent(raw)
    else:
        refused = "member_sent: the plan has no team yet", carried_by(raw, "member_sent")
    if refused is None or in_force(PLAN_PARKS_REFUSED_MESSAGES_PATCH):
        return refused
    workflow.logger.warning("member_sent refused", extra={"reason": refused[0]})
    return None
