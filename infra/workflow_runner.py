"""The runner of the project's workflows: the SDK's, outside its sandbox (every workflow is
declared `sandboxed=False`), telling the worker of each instance it creates.

The sandbox imports a sandboxed workflow's module afresh for every run and enters it by `exec`
for every activation and payload: for short runs such as a saga's that was a quarter of a
worker's CPU. On Python before 3.12 each import into a sandbox can also fail on its own
(`KeyError: <thread id>` when a finalizer imports during it: temporalio/sdk-python#585). The
workflows' code touches only the workflow API and pure models; what keeps it deterministic is
the replay of their recorded histories (`tests/test_replay.py`)."""

from collections.abc import Callable

from temporalio import workflow
from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    WorkflowInstance,
    WorkflowInstanceDetails,
)

InstanceCreated = Callable[[workflow.Info], None]
"""Told of each workflow instance a worker creates, before the instance is built, on the
worker's event loop: what it starts there (a read of the server) runs while the instance is
built and its first activation runs. It must not block, nor fail."""


class UnsandboxedRunner(UnsandboxedWorkflowRunner):
    """The SDK's runner of the workflows declared `sandboxed=False`, telling `created` of each
    instance first."""

    def __init__(self, created: InstanceCreated) -> None:
        super().__init__()
        self._created = created

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        self._created(det.info)
        return super().create_instance(det)
