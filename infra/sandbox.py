"""The workflow sandbox the project's workers run workflows in: the SDK's, its own code compiled
once for the process.

The SDK's sandbox enters a workflow's sandbox by `exec` of a short source text: to create the
instance, for every activation, and, on the event loop, for every payload of an activation or
a completion (twice for each command's: the payload's serialization context, and its context
for the payload store). `exec` of a text compiles it every time, about 20 µs each: some seventy
times for a saga of five local agents, more than a millisecond of its worker's CPU spent
compiling the same few texts. Handing `exec` the code compiled once does the same work without
that. The texts are the SDK's own (a handful, and one import per workflow class), so the cache
is small and bounded.

A payload's contexts are not worth an entry at all: each is a read of the instance's state
(its info, the command's pending activity, child or signal) that imports nothing, for which
the SDK still swaps in the sandbox's importer and `exec`s, on the worker's event loop, some
seventy times for a saga of five local agents, where the saga's caller and its local
activities wait their turn. The project's instances answer them from the instance directly:
the same answer, without the entries."""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any, cast

from temporalio import workflow
from temporalio.converter import SerializationContext, StorageDriverStoreContext
from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    WorkflowInstance,
    WorkflowInstanceDetails,
)
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._in_sandbox import InSandbox
from temporalio.worker.workflow_sandbox._runner import _Instance

MAX_TEXTS = 256
"""Distinct texts kept compiled: the SDK's few, and one per workflow class a worker runs."""


@functools.lru_cache(maxsize=MAX_TEXTS)
def compiled(text: str) -> CodeType:
    """`text` compiled, once for the process (compiling is pure: any thread may share it)."""
    return compile(text, "<workflow sandbox>", "exec")


class _CompiledOnce(_Instance):
    def _run_code(self, code: str, **extra_globals: Any) -> None:
        """The SDK's own, which hands `code` to `exec`: given the compiled text instead."""
        super()._run_code(compiled(code), **extra_globals)  # type: ignore[arg-type]

    def _in_sandbox(self) -> InSandbox:
        """The instance inside the sandbox, which the SDK's entries call."""
        return cast(InSandbox, self.globals_and_locals["__temporal_in_sandbox"])

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        """A payload's serialization context, read from the instance without entering it."""
        return self._in_sandbox().get_serialization_context(command_info)

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        """A payload's context for the payload store, read from the instance without entering
        it."""
        return self._in_sandbox().get_external_store_context(command_info)


InstanceCreated = Callable[[workflow.Info], None]
"""Told of each workflow instance a worker creates, before the instance is built, on the
worker's event loop: what it starts there (a read of the server) runs while the instance is
built and its first activation runs. It must not block, nor fail."""


@dataclass(frozen=True)
class CompiledSandboxRunner(SandboxedWorkflowRunner):
    """The SDK's sandbox (its restrictions and runner unchanged), entered by code compiled
    once; `created`, when given, is told of each instance first (`InstanceCreated`)."""

    created: InstanceCreated | None = None

    def prepare_workflow(self, defn: workflow._Definition) -> None:
        """The SDK validates a workflow class as each worker is built, by importing its module
        into a new sandbox: once per class and restrictions for the process is enough (the
        module is the same), and each import into a new sandbox can fail on its own on Python
        before 3.12, when a finalizer imports while the import lock is held (`_VALIDATED`)."""
        key = (defn.cls, id(self.restrictions))
        if key not in _VALIDATED:
            super().prepare_workflow(defn)
            _VALIDATED.add(key)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        if self.created is not None:
            self.created(det.info)
        return _CompiledOnce(det, self.runner_class, self.restrictions)


_VALIDATED: set[tuple[type, int]] = set()
"""The workflow classes validated in this process, with the id of the restrictions they were
validated under. CPython before 3.12 (bug 91351) raises `KeyError: <thread id>` from an import
into a sandbox when a garbage-collected coroutine's finalizer imports during it, which fails
building the worker (`Failed validating workflow`, temporalio/sdk-python#585); a validation
done once leaves one such import per class, not one per worker built."""


class UnsandboxedRunner(UnsandboxedWorkflowRunner):
    """The SDK's runner of the workflows declared `sandboxed=False`, telling `created` of each
    instance first, as `CompiledSandboxRunner` does."""

    def __init__(self, created: InstanceCreated) -> None:
        super().__init__()
        self._created = created

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        self._created(det.info)
        return super().create_instance(det)
