"""A user's tests of their own chain (bug-triage.yaml) and agents (triage_agents.py), on the
Event Coordinator's pytest plugin alone: no conftest, no server to start, nothing to import but
`coord.testing`. `make test` runs them (pyproject.toml, `testpaths`)."""

from pathlib import Path

import pytest

from coord.testing import Coordination, assert_caused, assert_parked, assert_timeline

HERE = Path(__file__).parent
CHAIN = HERE / "bug-triage.yaml"

pytestmark = pytest.mark.usefixtures("coord_worker")


@pytest.fixture
def coord_agents() -> Path:
    """The worker of each test serves the agents declared beside this file."""
    return HERE / "agents.yaml"


async def test_a_critical_bug_is_triaged_then_pages_the_on_call(coord: Coordination) -> None:
    correlation_id = await coord.start_chain(CHAIN)
    await coord.publish(
        correlation_id, "BugReported", {"title": "Checkout crashes on submit", "body": "500s"}
    )
    state = await coord.chain_outcome(correlation_id)  # OnCallPaged ends it
    timeline = await coord.timeline(correlation_id)
    assert state.terminal_seen
    assert_timeline(timeline, "BugReported", "BugTriaged", "OnCallPaged")
    assert_caused(timeline, "OnCallPaged", by="BugTriaged")
    triaged = next(entry for entry in timeline if entry.event == "BugTriaged")
    assert triaged.payload == {"title": "Checkout crashes on submit", "severity": "critical"}


async def test_a_minor_bug_is_triaged_and_pages_nobody(coord: Coordination) -> None:
    correlation_id = await coord.start_chain(CHAIN)
    await coord.publish(correlation_id, "BugReported", {"title": "Typo on the about page"})
    state = await coord.close_chain(correlation_id)  # it waits for the work the event caused
    timeline = await coord.timeline(correlation_id)
    assert_timeline(timeline, "BugReported", "BugTriaged")
    assert "OnCallPaged" not in [entry.event for entry in timeline]
    assert not state.terminal_seen


async def test_a_report_without_a_title_is_parked_for_a_person(coord: Coordination) -> None:
    correlation_id = await coord.start_chain(CHAIN)
    await coord.publish(correlation_id, "BugReported", {"body": "it is broken"})
    letters = await coord.dead_letters(count=1)
    assert_parked(letters, 1, failure_type="invalid_payload", event_type="BugReported")
    await coord.close_chain(correlation_id)
    assert_caused(await coord.timeline(correlation_id), "TriageFailed", by="BugReported")
