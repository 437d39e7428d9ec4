"""Calling an activity by its typed reference (coord.models.calls): the name and result type come
from the reference, the options (timeouts, retries, summary) from the caller."""

from typing import Any, TypeVar, cast

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coord.models.calls import ActivityRef

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


async def execute(ref: ActivityRef[ArgT, ResultT], argument: ArgT, **options: Any) -> ResultT:
    """Run the activity and wait for its result."""
    result = await workflow.execute_activity(ref.name, argument, result_type=ref.result, **options)
    return cast(ResultT, result)


def start(
    ref: ActivityRef[ArgT, ResultT], argument: ArgT, **options: Any
) -> workflow.ActivityHandle[ResultT]:
    """Start the activity; its handle resolves to the result."""
    handle = workflow.start_activity(ref.name, argument, result_type=ref.result, **options)
    return cast(workflow.ActivityHandle[ResultT], handle)


async def execute_local(ref: ActivityRef[ArgT, ResultT], argument: ArgT, **options: Any) -> ResultT:
    """Run the activity as a local activity (on the workflow's own worker)."""
    result = await workflow.execute_local_activity(
        ref.name, argument, result_type=ref.result, **options
    )
    return cast(ResultT, result)


def start_local(
    ref: ActivityRef[ArgT, ResultT], argument: ArgT, **options: Any
) -> workflow.ActivityHandle[ResultT]:
    """Start the activity as a local activity; its handle resolves to the result."""
    handle = workflow.start_local_activity(ref.name, argument, result_type=ref.result, **options)
    return cast(workflow.ActivityHandle[ResultT], handle)
