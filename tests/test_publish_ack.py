"""An acknowledged publish (`publish_acked`, `coord publish --ack`): the chain's `publish`
update answers at once whether the event was accepted (its timeline number), a duplicate (the
number it had) or refused (the intake's reason; nothing recorded or parked), whether the chain
was already running or is started by the publish (update-with-start)."""

import asyncio
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from coord.models.dlq.letter import DlqSelection
from coord.models.events.envelope import EventEnvelope
from coord.models.wire.contract import PUBLISH_UPDATE, FailureType, PublishAnswer
from coord.starter import api
from coord.starter.exits import ExitCode
from coord.testing import Coordination, unique
from tests.helpers import approved, parked, user_story
from tests.workers import COORD, run, server_env

WITH_WORKER = pytest.mark.usefixtures("coord_worker")


def note(correlation_id: str, caused_by: EventEnvelope | None = None) -> EventEnvelope:
    """An event no subscription listens to: it is recorded and nothing else happens."""
    cause = caused_by.event.id if caused_by else None
    return EventEnvelope.new("Note", "/test", correlation_id=correlation_id, causation_id=cause)


@WITH_WORKER
async def test_the_publish_starts_the_chain_and_answers_accepted_then_duplicate(
    coord: Coordination,
) -> None:
    correlation_id = unique("acked")
    event = note(correlation_id)  # runs nothing: the chain is still running when it comes again
    spec = user_story()
    first = await api.publish_acked(coord.client, event, spec=spec, queue=coord.task_queue)
    assert (first.verdict, first.seq, first.event_id) == ("accepted", 1, event.event.id)
    assert first.workflow_id == f"chain-{correlation_id}"
    again = await api.publish_acked(coord.client, event, spec=spec, queue=coord.task_queue)
    assert (again.verdict, again.seq) == ("duplicate", 1)
    await api.publish_acked(coord.client, approved(correlation_id), queue=coord.task_queue)
    state = await coord.chain_outcome(correlation_id)
    assert (state.status.value, state.duplicates, state.rejected_count) == ("completed", 1, 0)


@WITH_WORKER
async def test_a_running_chain_numbers_acked_events_in_order(coord: Coordination) -> None:
    correlation_id = await coord.start_chain(user_story(max_causation_depth=1))
    answers = [await api.publish_acked(coord.client, note(correlation_id)) for _ in range(3)]
    assert [(a.verdict, a.seq) for a in answers] == [("accepted", n) for n in (1, 2, 3)]
    timeline = await api.chain_timeline(coord.client, correlation_id)
    assert [entry.event_id for entry in timeline] == [a.event_id for a in answers]


@WITH_WORKER
async def test_an_event_the_intake_would_reject_is_refused_with_its_reason(
    coord: Coordination,
) -> None:
    correlation_id = await coord.start_chain(user_story(max_causation_depth=1))
    root = note(correlation_id)
    child = note(correlation_id, caused_by=root)
    for event in (root, child):
        assert (await api.publish_acked(coord.client, event)).verdict == "accepted"
    looping = note(correlation_id, caused_by=child)
    refused = await api.publish_acked(coord.client, looping)
    assert (refused.verdict, refused.failure_type) == ("refused", FailureType.CAUSATION_LOOP)
    assert refused.reason and "causation depth 2 exceeds 1" in refused.reason
    assert refused.describe().startswith(f"refused {looping.event.id} by chain-{correlation_id}")
    state = await api.chain_state(coord.client, correlation_id)
    assert (state.events_seen, state.rejected_count, state.dead_lettered) == (2, 0, 0)


@WITH_WORKER
@pytest.mark.parametrize(
    ("header", "named"),
    [({"id": "e-1", "type": "Note"}, "source"), ({"type": "Note", "source": "/x"}, "event.id")],
)
async def test_an_envelope_that_does_not_validate_is_refused_naming_the_field(
    coord: Coordination, header: dict[str, str], named: str
) -> None:
    """What another client sends raw is refused by the validator, and the run goes on; an
    acknowledged publish must name its event's id."""
    correlation_id = await coord.start_chain(user_story())
    handle = api.chain_handle(coord.client, correlation_id)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(PUBLISH_UPDATE, {"event": header}, result_type=PublishAnswer)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == FailureType.INVALID_ENVELOPE
    assert named in cause.message
    assert await api.chain_running(coord.client, correlation_id)


@WITH_WORKER
async def test_coord_publish_ack_prints_each_answer_and_exits_13_on_a_refusal(
    coord: Coordination, tmp_path: Path
) -> None:
    spec_file = tmp_path / "chain.json"
    spec_file.write_text(user_story(max_causation_depth=1).model_dump_json())
    correlation_id = unique("cli-acked")
    chain = f"chain-{correlation_id}"

    async def publish(event_id: str, *extra: str) -> tuple[int, str, str]:
        return await run(
            COORD, "publish", "--ack", "--type", "Note", "--source", "/t",
            "--correlation-id", correlation_id, "--id", event_id, *extra,
            env=server_env(coord.env, coord.task_queue),
        )  # fmt: skip

    assert await publish("e1", "--spec", str(spec_file)) == (
        0,
        f"accepted e1 as seq 1 by {chain}\n",
        "",
    )
    assert await publish("e1") == (0, f"duplicate e1 (it had seq 1) at {chain}\n", "")
    assert (await publish("e2", "--caused-by", "e1"))[0] == 0
    code, out, _ = await publish("e3", "--caused-by", "e2")
    assert code == ExitCode.EVENT_REFUSED
    assert out.startswith(
        f"refused e3 by {chain} (causation_loop): event e3 (Note): causation depth 2"
    )


@WITH_WORKER
async def test_coord_publish_ack_to_an_ended_chain_is_refused_and_nothing_is_parked(
    coord: Coordination, tmp_path: Path
) -> None:
    """The publisher has the answer, so nothing is parked, with or without --spec (whose
    update-with-start would not start the ended chain again)."""
    spec_file = tmp_path / "chain.json"
    spec_file.write_text(user_story().model_dump_json())
    correlation_id = await coord.start_chain(user_story())
    await api.close_chain(coord.client, correlation_id)
    await coord.chain_outcome(correlation_id)
    chain = f"chain-{correlation_id}"
    for event_id, extra in (("late-1", ()), ("late-2", ("--spec", str(spec_file)))):
        code, out, err = await run(
            COORD, "publish", "--ack", "--type", "Note2", "--source", "/ps",
            "--correlation-id", correlation_id, "--id", event_id, *extra,
            env=server_env(coord.env, coord.task_queue),
        )  # fmt: skip
        assert (code, err) == (ExitCode.EVENT_REFUSED, ""), (out, err)
        assert out == (
            f"refused {event_id} by {chain} (chain_ended): the chain has ended (completed); "
            "nothing was recorded or parked\n"
        )
    code, _, err = await run(
        COORD, "publish", "--type", "Note2", "--source", "/ps", "--correlation-id", correlation_id,
        "--id", "plain-1", env=server_env(coord.env, coord.task_queue),
    )  # fmt: skip
    assert code == ExitCode.REFUSED and "parked as dead letter dlq-" in err, "as documented"
    selection = DlqSelection(correlation_id=correlation_id)
    await asyncio.sleep(1)  # the visibility store is eventually consistent: let any other come
    [entry] = await parked(coord.client, coord.task_queue, 1, selection)
    assert "plain-1" in (await api.dlq_entry(coord.client, entry.entry_id)).message
