"""Calling an activity by its typed reference (coord.models.calls): the name and result type come
from the reference, the options (timeouts, retries, summary) from the caller. A run's large event
payloads go as arguments of their own (coord.models.mesh.apart), which the payload store keeps
once however many runs share them."""

from typing import Any, TypeVar, cast

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.calls import ActivityRef
    from coord.models.mesh.apart import sent_apart

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
    handle = begin(ref.name, args=sent_apart(argument), result_type=ref.result, **options)
    return cast(workflow.ActivityHandle[ResultT], handle)
