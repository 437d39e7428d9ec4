"""Reading and reporting to agents' ledgers (the `AgentLedger` entity workflows) from outside a
workflow: `read_ledgers` for `coord agents`, routing and the health monitor; `LedgerClient` for
the workers that report runs. An agent without a running ledger reads as closed, with no runs."""

import asyncio
import contextlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowQueryRejectedError
from temporalio.common import QueryRejectCondition, WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from coord.models.mesh.breaker import Verdict
from coord.models.mesh.ledger import (
    AgentLedgerState,
    BreakerConfig,
    LedgerStart,
    OutcomeReport,
    PermitGrant,
    PermitRequest,
    ProbeClaim,
    ProbeGrant,
    RunStats,
    StatsReport,
)
from coord.models.wire import contract

R = TypeVar("R", bound=BaseModel)


async def read_ledger(client: Client, agent_queue: str) -> AgentLedgerState:
    """The ledger of one agent queue as of now; closed with no runs when it has none running."""
    handle = client.get_workflow_handle(contract.agent_ledger_workflow_id(agent_queue))
    try:
        state: AgentLedgerState = await handle.query(
            contract.LEDGER_QUERY,
            result_type=AgentLedgerState,
            reject_condition=QueryRejectCondition.NOT_OPEN,
        )
    except WorkflowQueryRejectedError:
        return AgentLedgerState(agent_queue=agent_queue)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return AgentLedgerState(agent_queue=agent_queue)
        raise
    return state.at(datetime.now(UTC))


async def read_ledgers(client: Client, queues: Iterable[str]) -> dict[str, AgentLedgerState]:
    """The ledgers of several agent queues, read at once, by queue."""
    wanted = list(dict.fromkeys(queues))
    states = await asyncio.gather(*(read_ledger(client, queue) for queue in wanted))
    return dict(zip(wanted, states, strict=True))


class LedgerClient:
    """A worker's messages to one agent queue's ledger, starting it when it does not run
    (update-with-start, on the ledger queue of the deployment whose coordinator queue is
    `home`; a ledger started before it had one runs on `home`, where it stays)."""

    def __init__(
        self, client: Client, agent_queue: str, home: str, config: BreakerConfig, worker: str
    ) -> None:
        self._client = client
        self.agent_queue = agent_queue
        self._home = home
        self._config = config
        self._worker = worker

    async def read(self) -> AgentLedgerState:
        return await read_ledger(self._client, self.agent_queue)

    async def claim_probe(self, run: str) -> ProbeGrant:
        """Whether `run` (a run attempt) may probe the half-open breaker."""
        claim = ProbeClaim(worker=self._worker, config=self._config, run=run)
        return await self._update(contract.CLAIM_PROBE_UPDATE, claim, ProbeGrant)

    async def probe_ended(self, run: str, verdict: Verdict) -> AgentLedgerState:
        """How the probe `run` ended: succeeded, failed (counted or not), or abandoned."""
        report = OutcomeReport(
            worker=self._worker,
            config=self._config,
            run=run,
            succeeded=verdict.ended == "succeeded",
            counted=verdict.counted,
            reason=verdict.reason,
            probe=True,
            abandoned=verdict.ended == "abandoned",
        )
        return await self._update(contract.REPORT_OUTCOME_UPDATE, report, AgentLedgerState)

    async def stats(self, stats: RunStats) -> AgentLedgerState:
        report = StatsReport(worker=self._worker, config=self._config, stats=stats)
        return await self._update(contract.REPORT_STATS_UPDATE, report, AgentLedgerState)

    async def acquire_permit(self, run: str, size: int, lease_s: float) -> PermitGrant:
        """One of the pool's permits for `run`, or not granted after waiting its turn up to
        POOL_WAIT (ask again to keep the turn)."""
        request = PermitRequest(run=run, worker=self._worker, size=size, lease_s=lease_s)
        return await self._update(contract.ACQUIRE_PERMIT_UPDATE, request, PermitGrant)

    async def release_permit(self, run: str) -> PermitGrant:
        """Gives `run`'s permit back, or its place in the line; answers the pool after."""
        request = PermitRequest(run=run, worker=self._worker)
        return await self._update(contract.RELEASE_PERMIT_UPDATE, request, PermitGrant)

    async def _update(self, update: str, arg: Any, result_type: type[R]) -> R:
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            contract.AGENT_LEDGER_WORKFLOW,
            LedgerStart(agent_queue=self.agent_queue, config=self._config),
            id=contract.agent_ledger_workflow_id(self.agent_queue),
            task_queue=contract.ledger_task_queue(self._home),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"ledger of {self.agent_queue}",
        )
        try:
            result: R = await self._client.execute_update_with_start_workflow(
                update, arg, start_workflow_operation=start, result_type=result_type
            )
        except BaseException:
            # The SDK hands a failed start to the operation too; reading it there keeps asyncio
            # from reporting it as never retrieved (it is done by now: no wait).
            with contextlib.suppress(BaseException):
                await start.workflow_handle()
            raise
        return result
