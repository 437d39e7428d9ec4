"""The hand-written consensus vote the vote bench measures the project against: the workflow
and its one activity in a module of their own, as temporalio/samples-python writes a small
workflow (the sandbox imports it afresh for every run, so it holds only them)."""

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

VOTERS = ("voter-a", "voter-b", "voter-c")
APPROVALS = 2
VOTER_TIMEOUT = timedelta(minutes=1)


def ballot(voter: str) -> dict[str, Any]:
    """What every voter answers, on both sides."""
    return {"approve": True, "reason": f"{voter}: the test suite passes"}


@activity.defn(name="baseline_voter")
async def baseline_voter(voter: str) -> dict[str, Any]:
    return ballot(voter)


@workflow.defn(name="BaselineVote")
class BaselineVote:
    """The proposal to every voter at once; decided at the second approval, the rest
    cancelled."""

    @workflow.run
    async def run(self, proposal: dict[str, Any]) -> bool:
        runs = [
            workflow.start_activity(baseline_voter, voter, start_to_close_timeout=VOTER_TIMEOUT)
            for voter in VOTERS
        ]
        approvals, pending = 0, list(runs)
        while pending and approvals < APPROVALS:
            done, pending = await workflow.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            approvals += sum(bool(run.result().get("approve")) for run in done)
        for run in runs:
            run.cancel()
        return approvals >= APPROVALS
