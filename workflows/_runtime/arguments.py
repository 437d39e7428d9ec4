"""Starts, signals and updates that carry more arguments than their handler takes.

The SDK calls a handler with every argument sent, so `temporal workflow signal --input a --input
b` on a one-argument handler would raise a TypeError and fail the workflow task, over and over.
A worker interceptor (`interceptor.SurplusArguments`) folds the surplus into the handler's one
argument, which `decode_input` then refuses naming the count, so the signal is rejected and parked
like any other bad input. A workflow with `@workflow.init` is built from its start arguments
before any interceptor runs: `SurplusStartArguments`, its metaclass, folds them the same way
(a `ChainRun`, whose start comes with its large payloads sent apart, joins them back from there:
`decode_joined`).

This module is what the workflow classes import, so it imports no worker code: a client that
names a workflow class (the Python API) loads no `temporalio.worker`."""

import inspect
from collections.abc import Callable, Sequence
from types import MethodType
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from coord.models.wire.contract import ARGUMENT_COUNT_METADATA


class SurplusStartArguments(type):
    """Metaclass of the workflows whose `@workflow.init` takes the start input: the SDK calls
    the class with every argument sent, so a start with two inputs used to fail every workflow
    task with a TypeError. The surplus is folded into the one argument, which the workflow then
    refuses naming the count (and the interceptor folds `run`'s arguments alike)."""

    def __call__(cls, *args: Any) -> Any:
        return super().__call__(*fitted(args, positional(cls.__init__) - 1))  # type: ignore[misc]


def positional(fn: Callable[..., Any]) -> int:
    """How many arguments `fn` takes by position (less a bound method's `self`). Read from its
    code object, which costs next to nothing (`inspect.signature` cost more than the rest of a
    signal's handling), and never cached: a sandboxed run (a hand-written workflow the benches
    replay through the interceptor) has functions of its own, and a cache keyed by them would
    keep every such run's modules alive for the process's lifetime."""
    function = fn.__func__ if isinstance(fn, MethodType) else fn
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None:
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return sum(p.kind in kinds for p in inspect.signature(fn).parameters.values())
    return int(code.co_argcount) - (function is not fn)


def fitted(args: Sequence[Any], takes: int) -> Sequence[Any]:
    """`args` cut to what a handler taking `takes` arguments accepts: the surplus is folded into
    its last one (marked with the count sent); a handler that takes none ignores them."""
    if len(args) <= takes:
        return args
    if takes == 0:
        return []
    folded = workflow.payload_converter().to_payload(list(args[takes - 1 :]))
    folded.metadata[ARGUMENT_COUNT_METADATA] = str(len(args)).encode()
    return [*args[: takes - 1], RawValue(folded)]
