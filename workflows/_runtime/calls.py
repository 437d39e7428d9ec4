"""Calling an activity by its typed reference (coord.models.calls): the name and result type come
from the reference, the options (timeouts, retries, summary) from the caller. A run's large event
payloads go as arguments of their own (coord.models.mesh.apart), which the payload store keeps
once however many runs share them."""

from datetime import timedelta
from typing import Any, TypeVar, cast

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.calls import ActivityRef
    from coord.models.mesh.apart import sent_apart

LOCAL_RETRY_THRESHOLD = timedelta(microseconds=1)
"""A local activity's every retry waits on a workflow timer and runs as a new local activity,
never inside its worker (whose threshold is a minute by default). The worker's own retries keep
each earlier attempt's start-to-close timer running: one that fires later times out the attempt
then running, or, once the worker is shut down, panics the SDK's core in a process that lives
on. (Zero reads as unset to the SDK: the smallest duration it sends is taken instead.)"""

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


async def execute(ref: ActivityRef[ArgT, ResultT], argument: ArgT, **options: Any) -> ResultT:
    """Run the activity and wait for its result (the SDK's `execute_activity` is the same
    awaited start)."""
    return await start(ref, argument, **options)


async def execute_local(ref: ActivityRef[ArgT, ResultT], argument: ArgT, **options: Any) -> ResultT:
    """Run the activity as a local activity (on the workflow's own worker)."""
    return await start(ref, argument, local=True, **options)


def start(
    ref: ActivityRef[ArgT, ResultT], argument: ArgT, *, local: bool = False, **options: Any
) -> workflow.ActivityHandle[ResultT]:
    """Start the activity (`local`: as a local activity); its handle resolves to the result. An
    argument carrying large event payloads sends them apart (`sent_apart`): only what the
    activity is sent changes, not the command, which a replay matches by its type and id."""
    begin = workflow.start_local_activity if local else workflow.start_activity
    if local:
        options = {"local_retry_threshold": LOCAL_RETRY_THRESHOLD, **options}
    handle = begin(ref.name, args=sent_apart(argument), result_type=ref.result, **options)
    return cast(workflow.ActivityHandle[ResultT], handle)
