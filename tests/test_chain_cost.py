"""What a chain's workflow code does per event it takes in, counted (not timed) over the replay
of a recorded flood: 100 events signalled before a worker ran, into a chain whose every event
runs an agent and whose second subscription has a filter (`bench.chain_replay` recorded it)."""

from collections import Counter

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from coord.models.events.envelope import EventEnvelope
from coord.models.events.filters import compile_filter, evaluate
from tests.conftest import HISTORIES
from tests.test_aggregator_cost import calls_per_replay

FLOOD = HISTORIES / "ReactiveChain" / "chain-flood-of-a-hundred.json"


def flood() -> tuple[Counter[str], int]:
    """The functions one replay of the flood called, and its signals (its events)."""
    history = WorkflowHistory.from_json("flood", FLOOD.read_text())
    signals = sum(
        1
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    )
    assert signals == 101  # the hundred events and the close
    return calls_per_replay(history), signals


def test_a_filter_reads_only_the_parts_of_the_event_it_names() -> None:
    """The filter `payload.n % 1000 == 0` is handed the payload's bounded view alone (two
    calls of `bounded_view` an event: the payload and its one value), not the whole envelope's
    (fifteen an event, and CEL converting the header and the routing it never reads)."""
    calls, signals = flood()
    assert calls["filters.py:evaluate"] == 100
    assert calls["filters.py:bounded_view"] <= 2 * signals


def test_an_event_s_payload_is_measured_once_for_the_task_s_share_and_the_timeline() -> None:
    """Its JSON bytes are told when the event is taken and reused for the timeline's bytes: three
    measures an event (that, the log's pending bytes and the agent's request), four before."""
    calls, signals = flood()
    assert calls["sizes.py:json_size"] <= 3 * signals + 10


def test_the_chain_records_its_metrics_once_a_turn_and_copies_no_state_for_its_details() -> None:
    """Counters are added once per label set a turn, the latency observed once an event (five
    records an event before: published, consumed, latency, queued, dispatched, each its own);
    the UI details, set every turn, are read from the record, not from a copy of its state
    (55 copies a replay before); the workflow code makes fewer than 1,350 calls an event
    (1,455 before)."""
    calls, signals = flood()
    assert calls["metrics.py:record"] <= 2 * signals
    assert calls["model.py:snapshot"] <= 2
    assert sum(calls.values()) / signals < 1350


def test_a_filter_evaluated_over_the_parts_it_reads_decides_as_over_the_whole_event() -> None:
    """Leaving out the parts a filter does not name changes no outcome: parts it names are
    there, and a name that is no part is as undefined as it was."""
    envelope = EventEnvelope.new("Ping", "/t", payload={"n": 3}, topic="alerts")
    event = envelope.model_dump(mode="json")
    assert compile_filter("payload.n == 3 && routing.topic == 'alerts'").reads == (
        "payload",
        "routing",
    )
    assert evaluate("event.type == 'Ping' && payload.n == 3", event).matched
    assert evaluate("routing.topic == 'alerts'", event).matched
    assert evaluate("[1, 3].exists(x, x == payload.n)", event).matched
    undefined = evaluate("nosuch.n == 3", event)
    assert not undefined.matched
    assert undefined.error is not None and "nosuch" in undefined.error
