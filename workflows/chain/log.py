"""Writing the chain's log (`ChainLog`) through the `write_log_segment` activity, a segment at a
time. A write is retried until the store takes it: the rows stay in the chain's memory until
then, so a store that is away delays the chain's log (and, while it waits, the chain's turn),
never loses a row."""

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from coord.models import calls as refs
    from coord.models.chain.log import ChainLog
    from coord.workflows._runtime import calls

WRITE_TIMEOUT = timedelta(seconds=30)
WRITE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)


async def write_log(log: ChainLog, *, to_the_end: bool = False) -> None:
    """Writes every full segment waiting (`to_the_end`: every row waiting), oldest first."""
    while log.due() or (to_the_end and log.pending()):
        segment = log.next_segment()
        await calls.execute(
            refs.WRITE_LOG_SEGMENT,
            segment,
            start_to_close_timeout=WRITE_TIMEOUT,
            retry_policy=WRITE_RETRY,
            summary=f"log {segment.first}-{segment.last}",
        )
        log.written(segment)
