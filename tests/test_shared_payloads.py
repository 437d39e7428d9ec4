"""A large payload fanned out to many runs is stored once, on the real dev server: a 1.5 MB proposal
put to twelve voters, and a 1.5 MB event twelve chain subscriptions take (as activity tasks, as
local runs, and handed to `ChainRun`s of their own). Each run's `run_agent`, and each `ChainRun`'s
start, carries the payload apart from its request (coord.models.mesh.apart), every one referring
to the same object of the payload store, which then holds the payload in as many objects as one
run would leave (before: one more per run, 82 MB for a vote of fifty voters; one more per
`ChainRun`). And, without a server, how payloads go apart and join back."""

import asyncio
import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic_core
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from coord.models.chain.run import ChainRunInput, started_apart
from coord.models.chain.spec import Subscription
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentContext, AgentRegistry, AgentRequest
from coord.models.mesh.apart import APART_BYTES, Places, joined, sent_apart
from coord.models.mesh.config import PythonAgent
from coord.models.vote.spec import VoteSpec, VoteStatus
from coord.models.wire import contract
from coord.models.wire.contract import CHAIN_RUN_WORKFLOW, RUN_AGENT_ACTIVITY, FailureType
from coord.models.wire.sizes import json_size
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import run_chain, task_failures
from tests.test_fan_out import wide_chain
from tests.test_hostile_input import closed_with

WIDTH = 12
SIZE = 3 * 512 * 1024
"""1.5 MB: past the payload store's threshold, so each copy the runs carry is an object."""
REQUEST_BYTES = 8 * 1024
"""A request sent apart from its payload is well under this (it travels inline)."""


def stored_with(store: str, marker: str) -> dict[str, int]:
    """The payload store's objects holding `marker`, by digest, with their sizes."""
    return {
        path.name: path.stat().st_size
        for path in Path(store).rglob("*")
        if contract.STORED_OBJECT_NAME.fullmatch(path.name) and marker.encode() in path.read_bytes()
    }


def reference(payload: Payload) -> str | None:
    """The digest a payload refers to in the payload store; None when it travels inline."""
    if not payload.external_payloads:
        return None
    claim: str = json.loads(payload.data)["claimData"]["sha256"]
    return claim


async def run_agent_inputs(handle: WorkflowHandle[Any, Any]) -> list[list[Payload]]:
    """The arguments of each `run_agent` the workflow scheduled as an activity task."""
    inputs = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == RUN_AGENT_ACTIVITY:
                inputs.append(list(scheduled.input.payloads))
    return inputs


def one_shared_payload(inputs: list[list[Payload]], runs: int) -> str:
    """Every run sent its request inline and its payload apart, by reference to one object: its
    digest."""
    assert len(inputs) == runs
    assert {len(arguments) for arguments in inputs} == {3}, "request, places, payload"
    assert all(reference(request) is None for request, _, _ in inputs)
    assert max(request.ByteSize() for request, _, _ in inputs) < REQUEST_BYTES
    [shared] = {reference(payload) for _, _, payload in inputs}
    assert shared is not None
    return shared


async def test_a_proposal_put_to_twelve_voters_is_stored_once(
    client: Client, task_queue: str, coord_payload_store: str
) -> None:
    marker = uuid.uuid4().hex
    voters = [f"voter-{i}" for i in range(WIDTH)]
    registry = AgentRegistry()

    async def approve(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {"approve": True, "reason": f"read {len(event.payload['blob'])} bytes"}

    for voter in voters:
        registry.register(voter)(approve)
    spec = VoteSpec.model_validate(
        {
            "vote_id": f"shared-{marker[:8]}",
            "proposal": {"marker": marker, "blob": "p" * SIZE},
            "voters": voters,
            "at_least": WIDTH,
        }
    )
    async with build_worker(client, task_queue, registry, only=voters):
        handle = await api.start_vote(client, spec, queue=task_queue)
        state = await asyncio.wait_for(api.vote_outcome(handle), 120)
    assert state.status == VoteStatus.DECIDED, state.summary
    assert {ballot.reason for ballot in state.ballots} == {f"read {SIZE} bytes"}
    shared = one_shared_payload(await run_agent_inputs(handle), WIDTH)
    stored = stored_with(coord_payload_store, marker)
    assert shared in stored
    assert len(stored) == 3, f"its start input, the proposal once, its record: {stored}"
    assert await task_failures(handle) == []


def chain_agents(seen: list[tuple[int, int]], *, remote: bool) -> AgentRegistry:
    """`worker` notes the payload sizes it was handed (its event's, and the same event's among
    its inputs); `remote`: declared `execution: remote`, so the chain runs it as activity
    tasks, else as local runs."""
    registry = AgentRegistry()
    declared = PythonAgent(kind="python", callable=f"{__name__}:chain_agents", execution="remote")

    @registry.register("worker", "python", declared if remote else None)
    async def worker(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        seen.append((len(event.payload["blob"]), len(context.inputs["Big"]["payload"]["blob"])))
        return {}

    return registry


@pytest.mark.parametrize("remote", [True, False], ids=["activity-tasks", "local-runs"])
async def test_an_event_twelve_subscriptions_take_is_stored_once(
    client: Client, task_queue: str, coord_payload_store: str, remote: bool
) -> None:
    marker = uuid.uuid4().hex
    spec = wide_chain("shared", WIDTH)
    seen: list[tuple[int, int]] = []
    big = EventEnvelope.new("Big", "/test", payload={"marker": marker, "blob": "e" * SIZE})
    async with build_worker(client, task_queue, chain_agents(seen, remote=remote), only=["worker"]):
        state, timeline = await run_chain(client, task_queue, spec, [big])
    assert [entry.event for entry in timeline].count("Done") == WIDTH
    assert seen == [(SIZE, SIZE)] * WIDTH
    handle = api.chain_handle(client, state.correlation_id)
    inputs = await run_agent_inputs(handle)
    stored = stored_with(coord_payload_store, marker)
    if remote:
        assert one_shared_payload(inputs, WIDTH) in stored
    else:
        assert inputs == [], "every run local"
    assert len(stored) <= 4, f"the signal, the payload once, the record, the timeline: {stored}"
    assert await task_failures(handle) == []


async def chain_run_inputs(client: Client, workflow_id: str) -> list[list[Payload]]:
    """The arguments of each `ChainRun` the chain started, in every run of it (a chain taking
    its votes' announcements continues as new)."""
    described = await client.get_workflow_handle(workflow_id).describe()
    run_id = described.raw_description.workflow_execution_info.first_run_id
    inputs = []
    while run_id:
        run, run_id = client.get_workflow_handle(workflow_id, run_id=run_id), ""
        async for event in run.fetch_history_events():
            if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
                started = event.start_child_workflow_execution_initiated_event_attributes
                if started.workflow_type.name == CHAIN_RUN_WORKFLOW:
                    inputs.append(list(started.input.payloads))
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                continued = event.workflow_execution_continued_as_new_event_attributes
                run_id = continued.new_execution_run_id
    return inputs


def approving(registry: AgentRegistry, voters: list[str]) -> AgentRegistry:
    """`registry` with `voters`, each approving once it has read the proposal's blob."""

    async def approve(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
        return {"approve": True, "reason": f"read {len(event.payload['blob'])} bytes"}

    for voter in voters:
        registry.register(voter)(approve)
    return registry


@pytest.mark.parametrize("kind", ["hand-over", "vote"])
async def test_an_event_twelve_chain_runs_take_is_stored_once(
    client: Client, task_queue: str, coord_payload_store: str, kind: str
) -> None:
    """Twelve subscriptions handing their runs to `ChainRun`s (`hand_over: true`, or each a
    vote, whose proposal is the event's payload) start each with the event's payload apart,
    all referring to one object of the store: before, each `ChainRun`'s input was one more."""
    marker = uuid.uuid4().hex
    seen: list[tuple[int, int]] = []
    voters = ["v1", "v2"]
    if kind == "vote":
        spec = wide_chain("voted", WIDTH, agent=None, vote={"voters": voters})
        registry, only = approving(AgentRegistry(), voters), voters
    else:
        spec = wide_chain("handed", WIDTH, hand_over=True)
        registry, only = chain_agents(seen, remote=True), ["worker"]
    big = EventEnvelope.new("Big", "/test", payload={"marker": marker, "blob": "e" * SIZE})
    async with build_worker(client, task_queue, registry, only=only):
        state, _ = await run_chain(client, task_queue, spec, [big])
    log = [row.event async for row in api.read_log(client, state.correlation_id)]
    assert log.count("Done") == WIDTH, "the whole log: a vote's announcements pass the window"
    handle = api.chain_handle(client, state.correlation_id)
    inputs = await chain_run_inputs(client, handle.id)
    assert one_shared_payload(inputs, WIDTH) in stored_with(coord_payload_store, marker)
    if kind == "hand-over":
        assert seen == [(SIZE, SIZE)] * WIDTH
        stored = stored_with(coord_payload_store, marker)
        assert len(stored) <= 4, f"the signal, the payload once, the record, the timeline: {stored}"
    assert await task_failures(handle) == []


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        (["chain", "run"], "expected one input, got 2, which do not join"),
        (
            [
                {"request": {"event": {"payload": {}}}},
                {"places": [[["request", "event", "payload"]]]},
                {},
            ],
            "chain_id: Field required",
        ),
    ],
    ids=["not-apart", "apart-but-invalid"],
)
async def test_a_chain_run_whose_arguments_do_not_make_its_input_fails_invalid_input(
    client: Client, task_queue: str, arguments: list[Any], why: str
) -> None:
    """Arguments that do not join, or join into no valid input, fail the run `invalid_input`
    saying so (never its workflow tasks)."""
    async with build_worker(client, task_queue, AgentRegistry(), only=[]):
        handle = await client.start_workflow(
            CHAIN_RUN_WORKFLOW,
            args=arguments,
            id=f"chain-run-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        failure = await closed_with(handle)
    assert failure.type == FailureType.INVALID_INPUT
    assert failure.message.startswith("chain run input"), failure.message
    assert why in failure.message


def request(payload: dict[str, Any], **inputs: Any) -> AgentRequest:
    event = EventEnvelope.new("Big", "/test", payload=payload, correlation_id="c")
    return AgentRequest(agent="worker", event=event, inputs=inputs)


def on_the_wire(arguments: list[Any]) -> list[Any]:
    """The arguments as the worker decodes them when sent apart: plain JSON."""
    return [json.loads(pydantic_core.to_json(argument)) for argument in arguments]


def test_large_event_payloads_go_apart_once_each_and_join_back() -> None:
    big = {"blob": "b" * APART_BYTES}
    other = {"blob": "o" * APART_BYTES}
    sent = request(
        big,
        Big={"type": "Big", "id": "e-1", "payload": dict(big)},
        Other={"type": "Other", "id": "e-2", "payload": other},
        Small={"type": "Small", "id": "e-3", "payload": {"n": 1}},
        steps={"build": {"ok": True}},
    )
    arguments = sent_apart(sent)
    assert arguments[1] == Places(
        places=[
            [["event", "payload"], ["inputs", "Big", "payload"]],
            [["inputs", "Other", "payload"]],
        ]
    )
    assert arguments[2:] == [big, other]
    assert pydantic_core.to_json(arguments[0]).count(b"b" * 100) == 0
    assert AgentRequest.model_validate(joined(on_the_wire(arguments))) == sent


def test_a_call_without_a_large_payload_goes_as_one_argument() -> None:
    small = request({"blob": "s" * (APART_BYTES - 100)})
    assert sent_apart(small) == [small]
    assert sent_apart("chain-x") == ["chain-x"]


@pytest.mark.parametrize(
    ("places", "payloads", "error"),
    [
        ([[["event", "payload"]]], [], "0 payloads sent apart for 1 places"),
        ([[["event", "nowhere"]]], [{}], "no payload at ['event', 'nowhere']"),
        ([[["agent"]]], [{}], "no payload at ['agent']: not an object"),
    ],
)
def test_arguments_that_do_not_join_say_why(
    places: list[Any], payloads: list[Any], error: str
) -> None:
    document = json.loads(request({}).model_dump_json())
    with pytest.raises(ValueError, match=error.replace("[", r"\[")):
        joined([document, {"places": places}, *payloads])


def chain_run_input(**kind: Any) -> ChainRunInput:
    subscription = Subscription.model_validate({"agent": "worker", "events": ["Big"]})
    return ChainRunInput(chain_id="chain-c", seq=3, subscription=subscription, summary="s", **kind)


def test_a_chain_runs_large_payloads_go_apart_and_join_back() -> None:
    big = {"blob": "b" * APART_BYTES}
    handed = chain_run_input(request=request(big, Big={"type": "Big", "payload": dict(big)}))
    arguments = started_apart(handed)
    assert arguments[1] == Places(
        places=[[["request", "event", "payload"], ["request", "inputs", "Big", "payload"]]]
    )
    assert arguments[2:] == [big]
    assert ChainRunInput.model_validate(joined(on_the_wire(arguments))) == handed
    vote = VoteSpec.model_validate({"vote_id": "v", "proposal": big, "voters": ["a"]})
    voting = chain_run_input(vote=vote)
    arguments = started_apart(voting)
    assert arguments[1:] == [Places(places=[[["vote", "proposal"]]]), big]
    assert ChainRunInput.model_validate(joined(on_the_wire(arguments))) == voting


def test_a_chain_run_without_a_large_payload_starts_as_it_did() -> None:
    """One argument, and the budget counts the same bytes the input's JSON dump did."""
    small = chain_run_input(request=request({"blob": "s" * (APART_BYTES - 500)}))
    assert started_apart(small) == [small]
    assert json_size(small) == json_size(small.model_dump(mode="json"))
