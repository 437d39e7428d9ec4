"""The worker's sandbox answers a payload's contexts by reading the workflow instance without
entering the sandbox (`coord.infra.sandbox`): the answer must be the one the SDK's own entry
gives. Held here against the SDK's answer, asked in the sandbox, for every payload of the
replays of recorded runs (commands' and signals' alike): a new SDK whose answer needed the
sandbox would fail this test, not the payload store's references."""

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import SerializationContext, StorageDriverStoreContext
from temporalio.worker import Replayer, Worker, WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _Instance

from coord.infra import sandbox
from coord.infra.payload_store import data_converter
from coord.infra.sandbox import CompiledSandboxRunner, _CompiledOnce
from coord.worker import SANDBOX, WORKFLOWS
from coord.workflows._runtime.interceptor import SurplusArguments
from tests.conftest import HISTORIES

Answers = list[tuple[object, object]]


class _Compared(_CompiledOnce):
    """The project's sandbox instance, which also asks the SDK's for every payload and keeps
    both answers."""

    answers: Answers

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        ours = super().get_serialization_context(command_info)
        self.answers.append((ours, _Instance.get_serialization_context(self, command_info)))
        return ours

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        ours = super().get_external_store_context(command_info)
        self.answers.append((ours, _Instance.get_external_store_context(self, command_info)))
        return ours


@dataclass(frozen=True)
class ComparingRunner(CompiledSandboxRunner):
    answers: Answers = field(default_factory=list)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        instance = _Compared(det, self.runner_class, self.restrictions)
        instance.answers = self.answers
        return instance


def recorded(folder: str) -> list[WorkflowHistory]:
    paths = sorted((HISTORIES / folder).glob("*.json"))
    return [WorkflowHistory.from_json(Path(p).stem, p.read_text()) for p in paths]


async def test_a_payload_s_contexts_are_the_sdk_s_answer() -> None:
    """Every payload of the recorded runs of the workflows that run in the sandbox, the
    aggregator's and the agent monitor's (their commands' and signals' alike): each context
    read outside the sandbox equals the one the SDK's instance gives in it. The saga, the
    vote, the chain and the plan run outside it."""
    runner = ComparingRunner()
    replayer = Replayer(
        workflows=list(WORKFLOWS),
        data_converter=data_converter(),
        workflow_runner=runner,
        interceptors=[SurplusArguments()],
    )
    for folder in ("Aggregator", "AgentMonitor"):
        for history in recorded(folder):
            await replayer.replay_workflow(history)
    assert len(runner.answers) > 20, f"only {len(runner.answers)} payloads compared"
    assert all(ours == sdks for ours, sdks in runner.answers)


async def test_a_process_validates_each_sandboxed_workflow_once(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers built in one process: the SDK's validation (an import of the workflow's
    module into a new sandbox) runs once for each sandboxed workflow class, not once per worker."""
    validated: list[str] = []
    prepare = SandboxedWorkflowRunner.prepare_workflow

    def counting(self: SandboxedWorkflowRunner, defn: workflow._Definition) -> None:
        validated.append(defn.name or "")
        prepare(self, defn)

    monkeypatch.setattr(sandbox, "_VALIDATED", set())
    monkeypatch.setattr(SandboxedWorkflowRunner, "prepare_workflow", counting)
    for _ in range(2):
        async with Worker(
            client, task_queue=task_queue, workflows=list(WORKFLOWS), workflow_runner=SANDBOX
        ):
            pass
    definitions = map(workflow._Definition.must_from_class, WORKFLOWS)
    sandboxed = [defn.name or "" for defn in definitions if defn.sandboxed]
    assert sorted(validated) == sorted(sandboxed), validated
