"""Teams that talk, without a server: who may send to whom, the bounds, the delivery order, the
spec's rules for members, and a long-lived member's mailbox and memory."""

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from coord.activities.kinds.llm import prompt_fields
from coord.activities.kinds.output import request_json
from coord.activities.mesh.run_agent import shared_scratchpad, with_outbox
from coord.models.mesh.agents import AgentContext, AgentResult, OutgoingMessage, TeamMessage
from coord.models.plan.member import MAX_MEMORY_RESULT, MemberModel, MemberStart
from coord.models.plan.model import PlanModel
from coord.models.plan.report import final_report_markdown, memo_record
from coord.models.plan.spec import PlanSpec
from coord.models.plan.team import (
    MAX_MESSAGE_CHARS,
    MAX_SENT_CHARS,
    MessageLimits,
    TeamPost,
    message_event,
)
from coord.models.wire.specs import SpecError, parse_model

NOW = datetime(2026, 11, 27, tzinfo=UTC)
TEAM = {"a": MessageLimits(), "b": MessageLimits(max_per_run=1, max_chars=5), "c": MessageLimits()}


def out(to: str, message: str = "hi") -> OutgoingMessage:
    return OutgoingMessage(to=to, message=message)


def test_a_member_messages_another_and_it_waits_in_the_recipients_inbox() -> None:
    post = TeamPost()
    posted = post.post(TEAM, "a", "t1", [out("c", "tango"), out("b", "x")], NOW)
    assert [(m.seq, m.sender, m.to, m.message, m.task) for m in posted.sent] == [
        (1, "a", "c", "tango", "t1"),
        (2, "a", "b", "x", "t1"),
    ]
    assert posted.refused == []
    assert [m.message for m in post.inbox("c")] == ["tango"]
    assert post.has_mail("b") and not post.has_mail("a")


def test_messages_are_delivered_once_oldest_first() -> None:
    post = TeamPost()
    post.post(TEAM, "a", "t1", [out("c", "one")], NOW)
    post.post(TEAM, "b", "t2", [out("c", "two")], NOW)
    assert [m.message for m in post.deliver("c")] == ["one", "two"]
    assert post.deliver("c") == []
    post.post(TEAM, "a", "t3", [out("c", "three")], NOW)
    assert [(m.seq, m.message) for m in post.deliver("c")] == [(3, "three")]


@pytest.mark.parametrize(
    ("sender", "outgoing", "reason"),
    [
        (None, [out("a")], "send: only a team member sends messages"),
        ("a", [out("zed")], "send.to: 'zed' is not a member of the team (a, b, c)"),
        ("a", [out("a")], "send.to: a is the sender; a member does not message itself"),
        ("b", [out("a", "too long")], "send.message: 8 characters, over b's limit of 5"),
        ("b", [out("a"), out("c")], "send: b may send at most 1 messages a run"),
    ],
)
def test_a_message_outside_the_rules_is_refused_with_its_reason(
    sender: str | None, outgoing: list[OutgoingMessage], reason: str
) -> None:
    post = TeamPost()
    posted = post.post(TEAM, sender, "t", outgoing, NOW)
    assert posted.refused[-1].reason.startswith(reason)
    assert post.refused == posted.refused
    assert len(post.sent) == len(outgoing) - 1


def test_the_record_keeps_only_the_latest_refusals() -> None:
    post = TeamPost()
    for _ in range(30):
        post.post(TEAM, "a", "t", [out("nobody"), out("nobody")], NOW)
    assert len(post.refused) == 50


def test_a_message_event_names_its_sender_and_correlation() -> None:
    message = TeamPost().post(TEAM, "a", "t1", [out("c", "tango")], NOW).sent[0]
    event = message_event("p", "corr", message)
    assert event.event.type == "TeamMessage"
    assert event.event.source == "/plan/p/team/a"
    assert event.event.correlation_id == "corr"
    assert event.payload == {"plan_id": "p", **message.model_dump(mode="json")}


def test_the_sdk_send_travels_in_the_result_and_reserves_the_send_key() -> None:
    context = AgentContext(agent="a", attempt=1, idempotency_key="k")
    context.send("c", "tango")
    output = with_outbox({"answer": 1, "send": [{"to": "b", "message": "x"}]}, context)
    result = AgentResult.from_output("a", output, 1.0, 1, may_publish=None)
    assert result.data == {"answer": 1}
    assert [(m.to, m.message) for m in result.messages] == [("b", "x"), ("c", "tango")]
    assert with_outbox(None, AgentContext(agent="a", attempt=1, idempotency_key="k")) is None


def team_spec(**task: object) -> dict[str, object]:
    return {
        "plan_id": "p",
        "team": {"a": {"agent": "x"}, "c": {"agent": "y"}, "l": {"agent": "z", "long_lived": True}},
        "tasks": [{"id": "t1", "member": "a"}, {"id": "t2", "member": "c", **task}],
    }


def test_a_members_next_run_is_handed_its_messages_in_its_request() -> None:
    model = PlanModel.begin(PlanSpec.model_validate(team_spec()), NOW)
    model.state.messages.post(model.spec.message_limits(), "a", "t1", [out("c", "tango")], NOW)
    request = model.requests.agent_request(model.task("t2"), 1, "plan-p")
    assert [(m.sender, m.message) for m in request.messages] == [("a", "tango")]
    assert model.requests.agent_request(model.task("t2"), 2, "plan-p").messages == []
    assert model.requests.agent_request(model.task("t1"), 1, "plan-p").messages == []


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (team_spec(member="l"), "tasks[1].member: 'l' is long-lived"),
        (
            {"plan_id": "p", "tasks": [{"id": "t", "agent": "x", "wait_for_message": "1s"}]},
            "tasks[0].wait_for_message: only a team member's task waits for a message",
        ),
        (
            {
                "plan_id": "p",
                "team": {"a b": {"agent": "x", "long_lived": True}},
                "tasks": [{"id": "t", "agent": "x"}],
            },
            "team: 'a b': a long-lived member's name is an identifier",
        ),
    ],
)
def test_the_spec_refuses_a_team_it_cannot_run(spec: dict[str, object], problem: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_model(PlanSpec, spec, "plan spec")
    assert problem in str(refused.value)


def member(memory: int = 2) -> MemberModel:
    return MemberModel(
        MemberStart(plan_id="p", member="l", agent="z", correlation_id="p", memory=memory)
    )


def message(seq: int, to: str = "l") -> TeamMessage:
    return TeamMessage(seq=seq, sender="a", to=to, message=f"m{seq}", task="t1", at=NOW)


def test_a_long_lived_member_takes_its_messages_in_order_once() -> None:
    entity = member()
    assert entity.receive(message(1)) is None
    assert entity.receive(message(2)) is None
    assert entity.receive(message(1)) is None  # a repeat: dropped
    assert entity.receive(message(3, to="b")) == "to: 'b' is not this member ('l')"
    assert [m.seq for m in entity.start.mailbox] == [1, 2]
    request = entity.request(entity.next_message())
    assert request.event.event.type == "TeamMessage"
    assert [m.message for m in request.messages] == ["m1"]
    assert request.idempotency_key == "member-p~l/1"
    assert request.inputs == {"memory": []}


def test_a_long_lived_member_remembers_its_latest_runs_within_bounds() -> None:
    entity = member(memory=2)
    for seq in (1, 2, 3):
        entity.receive(message(seq))
    entity.handled({"said": 1}, None, NOW)
    entity.handled({"big": "x" * MAX_MEMORY_RESULT}, None, NOW)
    assert [run["seq"] for run in entity.request(entity.next_message()).inputs["memory"]] == [1, 2]
    entity.handled({"said": 3}, None, NOW)
    assert entity.record.handled == 3
    assert [run.seq for run in entity.record.memory] == [2, 3]
    assert entity.record.memory[0].result is not None
    assert "not remembered" in entity.record.memory[0].result["note"]


def test_a_long_lived_member_carries_its_state_across_continue_as_new() -> None:
    entity = member()
    entity.receive(message(1))
    entity.receive(message(2))
    entity.handled({"said": 1}, None, NOW)
    entity.close()
    again = MemberModel(MemberStart.model_validate(entity.start.model_dump(mode="json")))
    assert [m.seq for m in again.start.mailbox] == [2]
    assert again.receive(message(1)) is None and [m.seq for m in again.start.mailbox] == [2]
    assert again.record.handled == 1 and not again.done()
    again.handled(None, None, NOW)
    assert again.done()
    assert again.continue_due(10, suggested=False) is False
    assert again.continue_due(2000, suggested=False) and again.continue_due(1, suggested=True)


def test_shell_http_and_llm_agents_are_given_their_messages() -> None:
    message = TeamPost().post(TEAM, "a", "t1", [out("c", "tango")], NOW).sent[0]
    context = AgentContext(agent="c", attempt=1, idempotency_key="k", messages=[message])
    event = message_event("p", "p", message)
    sent = json.loads(request_json(event, context))["messages"]
    assert sent == [message.model_dump(mode="json")]
    assert json.loads(prompt_fields({}, {}, [message])["messages"]) == sent
    assert "messages" not in prompt_fields({}, {})
    assert "messages" not in json.loads(request_json(event, replace(context, messages=())))


def test_the_shared_scratchpad_stays_under_the_workers_root(tmp_path: Path) -> None:
    assert shared_scratchpad(str(tmp_path), "pads/p") == tmp_path.resolve() / "pads" / "p"
    assert (tmp_path / "pads" / "p").is_dir()
    assert shared_scratchpad(None, "pads/p") is None
    assert shared_scratchpad(str(tmp_path), None) is None
    assert shared_scratchpad(str(tmp_path), "../out") is None
    assert shared_scratchpad(str(tmp_path), ".") is None


def test_the_plans_messages_are_bounded_in_all() -> None:
    post = TeamPost()
    wide = {"a": MessageLimits(max_chars=MAX_MESSAGE_CHARS), "c": MessageLimits()}
    for _ in range(MAX_SENT_CHARS // MAX_MESSAGE_CHARS):
        assert not post.post(wide, "a", "t", [out("c", "x" * MAX_MESSAGE_CHARS)], NOW).refused
    [refused] = post.post(wide, "a", "t", [out("c", "x")], NOW).refused
    assert (
        refused.reason == f"send: the plan's messages would pass {MAX_SENT_CHARS} characters in all"
    )
    assert post.summary() == f"{MAX_SENT_CHARS // MAX_MESSAGE_CHARS} sent, 1 refused"


def test_the_final_report_lists_the_messages_and_the_memo_leaves_them_out() -> None:
    model = PlanModel.begin(PlanSpec.model_validate(team_spec()), NOW)
    model.state.messages.post(
        model.spec.message_limits(), "a", "t1", [out("c", "tango"), out("zed")], NOW
    )
    report = final_report_markdown(model.state)
    assert "## Team messages" in report
    assert "- 1. a -> c (t1): tango" in report
    assert "- refused (t1): send.to: 'zed' is not a member of the team (a, c, l)" in report
    kept = memo_record(model.state)
    assert kept.messages.sent == [] and len(kept.messages.refused) == 1
    assert "Team messages" not in final_report_markdown(PlanModel.begin(model.spec, NOW).state)


def test_the_progress_view_names_the_tasks_waiting_for_a_message() -> None:
    model = PlanModel.begin(PlanSpec.model_validate(team_spec(wait_for_message="1m")), NOW)
    model.state.messages.waiting["t2"] = "c"
    assert model.view.waiting_for() == ["a message to c (task t2)"]
    assert model.view.progress(NOW).waiting_for == ["a message to c (task t2)"]
