"""Starts, signals and updates that carry more arguments than their handler takes.

The SDK calls a handler with every argument sent, so `temporal workflow signal --input a --input
b` on a one-argument handler would raise a TypeError and fail the workflow task, over and over.
This worker interceptor folds the surplus into the handler's one argument, which `decode_input`
then refuses naming the count, so the signal is rejected and parked like any other bad input.
A workflow with `@workflow.init` is built from its start arguments before any interceptor runs:
`SurplusStartArguments`, its metaclass, folds them the same way."""

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

with workflow.unsafe.imports_passed_through():
    from coord.models.wire.contract import ARGUMENT_COUNT_METADATA


class SurplusArguments(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _SurplusArgumentsInbound


class _SurplusArgumentsInbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        input.args = _fitted(input.args, _positional(input.run_fn) - 1)  # unbound: less self
        return await super().execute_workflow(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        # The method itself, not the SDK's handler (async ones are wrapped as `*args`); our
        # handlers are named after their signals.
        method = getattr(workflow.instance(), input.signal, None)
        if workflow.get_signal_handler(input.signal) is not None and callable(method):
            function = getattr(method, "__func__", None)
            takes = _positional(method) if function is None else _positional(function) - 1
            input.args = _fitted(input.args, takes)
        await super().handle_signal(input)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        input.args = _raw_update_args(input.update, input.args)
        super().handle_update_validator(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        input.args = _raw_update_args(input.update, input.args)
        return await super().handle_update_handler(input)


def _raw_update_args(update: str, args: Sequence[Any]) -> Sequence[Any]:
    """Updates whose handler takes its input raw (a plan's `approve`, named after its update)
    are folded like signals, so their validator refuses the count instead of raising a
    TypeError; typed handlers (the dead-letter entry's) are left as the SDK calls them."""
    function = getattr(getattr(workflow.instance(), update, None), "__func__", None)
    if function is None:
        return args
    parameters = list(inspect.signature(function).parameters.values())[1:]  # less self
    if not parameters or parameters[-1].annotation is not RawValue:
        return args
    return _fitted(args, _positional(function) - 1)


class SurplusStartArguments(type):
    """Metaclass of the workflows whose `@workflow.init` takes the start input: the SDK calls
    the class with every argument sent, so a start with two inputs used to fail every workflow
    task with a TypeError. The surplus is folded into the one argument, which the workflow then
    refuses naming the count (and `execute_workflow` above folds `run`'s arguments alike)."""

    def __call__(cls, *args: Any) -> Any:
        return super().__call__(*_fitted(args, _positional(cls.__init__) - 1))  # type: ignore[misc]


@functools.cache
def _positional(fn: Callable[..., Any]) -> int:
    """Cached: `inspect.signature` costs more than the rest of a signal's handling, and a flood
    delivers thousands of signals in one activation."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in inspect.signature(fn).parameters.values())


def _fitted(args: Sequence[Any], takes: int) -> Sequence[Any]:
    """`args` cut to what a handler taking `takes` arguments accepts: the surplus is folded into
    its last one (marked with the count sent); a handler that takes none ignores them."""
    if len(args) <= takes:
        return args
    if takes == 0:
        return []
    folded = workflow.payload_converter().to_payload(list(args[takes - 1 :]))
    folded.metadata[ARGUMENT_COUNT_METADATA] = str(len(args)).encode()
    return [*args[: takes - 1], RawValue(folded)]
