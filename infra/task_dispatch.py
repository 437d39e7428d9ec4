"""What the server in use does with a run's task priority and fairness key (models/
task_priority.py), said once when a worker starts. Whether a server applies fairness is a
dynamic-config setting no API reports, so this says what its version does by default and what
it needs otherwise; where the server does not apply them, runs of one agent queue start in
arrival order (a chain still starts its own waiting runs by priority)."""

import re

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

PRIORITY_BY_DEFAULT_SINCE = (1, 32)
"""The first server release found to order a queue's tasks by priority key unconfigured (its
new matcher on by default); older ones need `matching.useNewMatcher=true`."""


def release(version: str) -> tuple[int, int] | None:
    found = re.match(r"v?(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def dispatch_order(version: str) -> str:
    """The line a worker logs about the server at `version` (as GetSystemInfo reports it)."""
    fairness = (
        "by correlation only with matching.enableFairness=true (`coord server`, the compose "
        "stack and the tests' dev server set it), else in arrival order within a priority"
    )
    found = release(version)
    if found is not None and found >= PRIORITY_BY_DEFAULT_SINCE:
        return f"server {version} starts agent runs by priority, and takes turns {fairness}"
    return (
        f"server {version or '(version unknown)'} starts agent runs by priority only with "
        f"matching.useNewMatcher=true, and takes turns {fairness}"
    )


async def server_dispatch_order(client: Client) -> str:
    info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
    return dispatch_order(info.server_version)
