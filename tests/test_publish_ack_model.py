"""An acknowledged publish in the chain's model (no server): what the validator refuses without
changing anything, the answer the handler gives, and the run overdue to continue as new."""

from coord.models.chain.intake import TIMELINE_WINDOW
from coord.models.wire.contract import FailureType
from tests.chain_models import WORKFLOW_ID, FixedRun, event, new_model


def test_an_accepted_event_is_answered_with_its_timeline_number() -> None:
    model = new_model(terminal_event=None)
    first, second = event("Unrelated"), event("Unrelated")
    answers = [model.take_acked(e, WORKFLOW_ID) for e in (first, second)]
    assert [(a.verdict, a.seq) for a in answers] == [("accepted", 1), ("accepted", 2)]
    assert answers[0].describe() == f"accepted {first.event.id} as seq 1 by {WORKFLOW_ID}"


def test_a_duplicate_is_answered_with_the_number_it_had_while_the_timeline_keeps_it() -> None:
    model = new_model(terminal_event=None)
    first = event("Unrelated")
    model.take_acked(first, WORKFLOW_ID)
    assert model.refusal(first) is None
    again = model.take_acked(first, WORKFLOW_ID)
    assert (again.verdict, again.seq, model.record.state.duplicates) == ("duplicate", 1, 1)
    for _ in range(2 * TIMELINE_WINDOW + 1):
        model.take_acked(event("Unrelated"), WORKFLOW_ID)
    aged = model.take_acked(first, WORKFLOW_ID)
    assert (aged.verdict, aged.seq) == ("duplicate", None)
    assert "a seq no longer kept" in aged.describe()


def test_what_the_intake_would_reject_is_refused_and_nothing_changes() -> None:
    model = new_model(terminal_event=None, max_causation_depth=1)
    root = event("Unrelated")
    child = event("Unrelated", cause=root.event.id)
    for each in (root, child):
        model.take_acked(each, WORKFLOW_ID)
    before = model.record.model_dump()
    loop = model.refusal(event("Unrelated", cause=child.event.id))
    foreign = model.refusal(event("Unrelated", correlation_id="c2"))
    assert loop is not None and loop.kind == FailureType.CAUSATION_LOOP
    assert foreign is not None and foreign.kind == FailureType.FOREIGN_CORRELATION
    assert model.record.model_dump() == before


def test_a_closing_or_ended_chain_refuses_and_an_overdue_run_is_busy() -> None:
    model = new_model(terminal_event=None)
    model.record.closing = True
    closing = model.refusal(event("Unrelated"))
    assert closing is not None and closing.kind == FailureType.CHAIN_CLOSING
    model.end()
    ended = model.refusal(event("Unrelated"))
    assert ended is not None and ended.kind == FailureType.CHAIN_ENDED
    overdue = new_model(FixedRun(length=10_000), terminal_event=None)
    busy = overdue.busy(event("Unrelated"))
    assert busy is not None and busy.kind == FailureType.CHAIN_BUSY
    assert new_model(terminal_event=None).busy(event("Unrelated")) is None
