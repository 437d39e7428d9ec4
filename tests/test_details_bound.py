"""A run's current details stay readable however large its spec: the UI and `temporal workflow
metadata` show the first lines and how many more there are, never a payload-store reference."""

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from coord.models.wire.sizes import DETAILS_CHARS, bounded_details
from coord.starter import api
from coord.worker import build_worker
from tests.helpers import eventually, phase1


def test_details_within_the_bound_are_kept_whole() -> None:
    text = "**Status:** waiting\n" + "- slot\n" * 100
    assert bounded_details(text) == text


def test_long_details_keep_their_first_lines_and_count_the_rest() -> None:
    lines = [f"- waiting for T{n} from /{'x' * 200}" for n in range(1000)]
    shown = bounded_details("\n".join(lines))
    kept = shown.splitlines()
    assert len(shown) <= DETAILS_CHARS
    assert kept[:-1] == lines[: len(kept) - 1]
    left = 1000 - (len(kept) - 1)
    assert kept[-1] == f"… {left} more lines not shown: the run's state has them all"


def test_one_overlong_line_is_cut() -> None:
    shown = bounded_details("x" * (3 * DETAILS_CHARS))
    assert len(shown) <= DETAILS_CHARS and shown.startswith("x" * 1000)


async def test_an_aggregator_waiting_for_a_thousand_events_shows_bounded_details(
    client: Client, task_queue: str
) -> None:
    slots = [{"type": f"T{n}", "source": "/" + "s" * 200} for n in range(1000)]
    spec = phase1(wait_for=slots)
    async with build_worker(client, task_queue):
        handle = await api.start_aggregator(client, spec, queue=task_queue)

        async def shown() -> bool:
            metadata = await handle.query(
                "__temporal_workflow_metadata", result_type=WorkflowMetadata
            )
            return bool(metadata.current_details)

        await eventually(shown)
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        await handle.cancel()
    details = metadata.current_details
    assert len(details) <= DETAILS_CHARS
    assert details.endswith("more lines not shown: the run's state has them all")
