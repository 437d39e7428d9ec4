"""The worker interceptor folding a signal's, update's or run's surplus arguments into the
handler's last one (`arguments.fitted`), and calling a declared signal's handler bound once per
run; the worker installs it (last, so innermost), the workflows never import it."""

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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

from coord.workflows._runtime.arguments import fitted, positional

SDK_INBOUND = "_WorkflowInboundImpl"
"""The SDK's last inbound step, which calls the handlers: only right before it does
`SurplusArguments` call them itself (behind another interceptor, it leaves that to the SDK)."""


class SurplusArguments(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _SurplusArgumentsInbound


@dataclass(frozen=True)
class _SignalHandler:
    """A declared signal's handler as the SDK binds it to the run's instance, with what the
    SDK asks of it at every signal: how many arguments it takes, and whether to await it."""

    call: Callable[..., Any]
    takes: int
    awaited: bool


class _SurplusArgumentsInbound(WorkflowInboundInterceptor):
    """One per run. Innermost (the worker's last interceptor), it calls a declared signal's
    handler itself, bound once per run and name: the SDK's own last step binds it anew and
    asks twice whether it is a coroutine function at every signal, which in the sandbox cost
    more than many a handler (a flood is thousands of signals)."""

    def __init__(self, next: WorkflowInboundInterceptor) -> None:
        super().__init__(next)
        self._direct = type(next).__name__ == SDK_INBOUND
        self._handlers: dict[str, _SignalHandler] = {}

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        input.args = fitted(input.args, positional(input.run_fn) - 1)  # unbound: less self
        return await super().execute_workflow(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        handler = self._handlers.get(input.signal) or self._bound(input.signal)
        if handler is None:
            await super().handle_signal(input)
            return
        if len(input.args) > handler.takes:
            input.args = fitted(input.args, handler.takes)
        if not self._direct:
            await super().handle_signal(input)
        elif handler.awaited:
            await handler.call(*input.args)
        else:
            handler.call(*input.args)

    def _bound(self, signal: str) -> _SignalHandler | None:
        """The declared handler of `signal`, kept (the names are the class's, so few); None
        when the class declares none under that name (its dynamic handler takes the signal,
        called by the SDK with the name) or declares it on a method named otherwise (the SDK
        calls it with every argument sent, as it always did)."""
        takes = _signal_takes(_class_name(workflow.instance()), signal)
        call = workflow.get_signal_handler(signal)
        if takes is None or call is None:
            return None
        handler = _SignalHandler(call, takes, inspect.iscoroutinefunction(call))
        self._handlers[signal] = handler
        return handler

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        input.args = _raw_update_args(input.update, input.args)
        super().handle_update_validator(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        input.args = _raw_update_args(input.update, input.args)
        return await super().handle_update_handler(input)


@functools.lru_cache(maxsize=1024)
def _signal_takes(workflow_class: str, signal: str) -> int | None:
    """How many arguments the running workflow's handler of `signal` takes (None: it declares
    none of that name): the method itself, not the SDK's handler (async ones are wrapped as
    `*args`); our handlers are named after their signals. Asked once per class and name
    (handlers are declared on the class), not at every signal, where the SDK's look-up cost
    more than many a handler; bounded, since senders name the signals."""
    method = getattr(workflow.instance(), signal, None)
    if not callable(method) or workflow.get_signal_handler(signal) is None:
        return None
    function = getattr(method, "__func__", None)
    return positional(method) if function is None else positional(function) - 1


def _class_name(instance: object) -> str:
    """The class by name: a sandboxed run (the project's workflows run outside the sandbox, but
    the benches replay hand-written ones in it through this interceptor) imports its module
    anew, so its class object differs from run to run while its name does not."""
    cls = type(instance)
    return f"{cls.__module__}.{cls.__qualname__}"


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
    return fitted(args, positional(function) - 1)
