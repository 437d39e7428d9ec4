"""The workflow sandbox the project's workers run workflows in: the SDK's, its own code compiled
once for the process.

The SDK's sandbox enters a workflow's sandbox by `exec` of a short source text: to create the
instance, for every activation, and, on the event loop, for every payload of an activation or
a completion (twice for each command's: the payload's serialization context, and its context
for the payload store). `exec` of a text compiles it every time, about 20 µs each: some seventy
times for a saga of five local agents, more than a millisecond of its worker's CPU spent
compiling the same few texts. Handing `exec` the code compiled once does the same work without
that. The texts are the SDK's own (a handful, and one import per workflow class), so the cache
is small and bounded."""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

from temporalio import workflow
from temporalio.converter import (
    SerializationContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
    WorkflowSerializationContext,
)
from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    WorkflowInstance,
    WorkflowInstanceDetails,
)
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _Instance

MAX_TEXTS = 256
"""Distinct texts kept compiled: the SDK's few, and one per workflow class a worker runs."""


@functools.lru_cache(maxsize=MAX_TEXTS)
def compiled(text: str) -> CodeType:
    """`text` compiled, once for the process (compiling is pure: any thread may share it)."""
    return compile(text, "<workflow sandbox>", "exec")


@dataclass(frozen=True)
class RunContexts:
    """The contexts of a payload that belongs to no command, as the SDK's workflow instance
    gives them (`get_serialization_context`, `get_external_store_context` of None): the run's
    own, the same for every such payload of the run."""

    serialization: WorkflowSerializationContext
    store: StorageDriverStoreContext

    @classmethod
    def of(cls, info: workflow.Info) -> "RunContexts":
        run = StorageDriverWorkflowInfo(
            id=info.workflow_id,
            run_id=info.run_id,
            type=info.workflow_type,
            namespace=info.namespace,
        )
        serialization = WorkflowSerializationContext(
            namespace=info.namespace, workflow_id=info.workflow_id
        )
        return cls(serialization, StorageDriverStoreContext(target=run))


class _CompiledOnce(_Instance):
    def _run_code(self, code: str, **extra_globals: Any) -> None:
        """The SDK's own, which hands `code` to `exec`: given the compiled text instead."""
        super()._run_code(compiled(code), **extra_globals)  # type: ignore[arg-type]

    @functools.cached_property
    def _run_contexts(self) -> RunContexts | None:
        """The run's own contexts where the instance in the sandbox is the SDK's (whose answer
        they are); None for another runner's, which is asked in its sandbox."""
        if self.runner_class is not UnsandboxedWorkflowRunner:
            return None
        return RunContexts.of(self.instance_details.info)

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        """A payload of no command: the run's context, without entering the sandbox."""
        if command_info is None and self._run_contexts is not None:
            return self._run_contexts.serialization
        return super().get_serialization_context(command_info)

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        """A payload of no command: stored for the run itself, without entering the sandbox."""
        if command_info is None and self._run_contexts is not None:
            return self._run_contexts.store
        return super().get_external_store_context(command_info)


InstanceCreated = Callable[[workflow.Info], None]
"""Told of each workflow instance a worker creates, before the instance is built, on the
worker's event loop: what it starts there (a read of the server) runs while the instance is
built and its first activation runs. It must not block, nor fail."""


@dataclass(frozen=True)
class CompiledSandboxRunner(SandboxedWorkflowRunner):
    """The SDK's sandbox (its restrictions and runner unchanged), entered by code compiled
    once; `created`, when given, is told of each instance first (`InstanceCreated`)."""

    created: InstanceCreated | None = None

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        if self.created is not None:
            self.created(det.info)
        return _CompiledOnce(det, self.runner_class, self.restrictions)


class UnsandboxedRunner(UnsandboxedWorkflowRunner):
    """The SDK's runner of the workflows declared `sandboxed=False`, telling `created` of each
    instance first, as `CompiledSandboxRunner` does."""

    def __init__(self, created: InstanceCreated) -> None:
        super().__init__()
        self._created = created

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        self._created(det.info)
        return super().create_instance(det)
