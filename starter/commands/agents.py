"""`coord agents`: which agents are served, by whom, and how far behind (agent health)."""

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from pydantic import RootModel
from rich.console import Group
from rich.text import Text
from temporalio.service import RPCError

from coord.infra.agent_health import agents_health
from coord.infra.ledgers import read_ledgers
from coord.infra.temporal import task_queue
from coord.models.mesh.declared import declared_agents
from coord.models.mesh.health import AgentHealth
from coord.models.mesh.ledger import WINDOW
from coord.models.wire.durations import format_duration
from coord.starter import render
from coord.starter.api.common import QUERY_PATIENCE
from coord.starter.commands.common import AsJson, connect, runs_async, show_record

app = typer.Typer()
WINDOW_TEXT = format_duration(WINDOW)


class AgentsReport(RootModel[list[AgentHealth]]):
    """What `--json` prints: one object per agent."""


@app.command()
@runs_async
async def agents(
    agents_file: Annotated[
        Path | None,
        typer.Option(
            "--agents", help="Also list the agents this file declares (also $COORD_AGENTS)"
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Each agent's health: `healthy` while a worker serving its task queue was seen (polling,
    or reporting itself) within 10 s, else `unreachable`; its workers and backlog. Lists the
    agents declared here (--agents, $COORD_AGENTS, $COORD_DEMO_AGENTS) and every agent queue a
    worker reports serving. Breakers and pools come from the agents' ledgers, which a worker
    answers for: without an answer within 5 s, a warning says so and the breakers and recent
    runs are left out (the breaker column shows `-`; --json has null for `breaker`, the other
    breaker fields and `runs`), and pools are as their workers report them."""
    registry = declared_agents(agents_file)
    client = await connect()
    rows = [
        row.model_copy(update={"capabilities": registry.catalogue.get(row.agent, [])})
        for row in await agents_health(client, registry.kinds, home=task_queue())
    ]
    try:
        reading = read_ledgers(client, [row.task_queue for row in rows])
        ledgers = await asyncio.wait_for(reading, QUERY_PATIENCE.total_seconds())
    except (TimeoutError, RPCError):
        typer.echo(
            "warning: the agents' ledgers did not answer (no worker serves them?): breakers "
            "and recent runs not shown, pools as their workers report them",
            err=True,
        )
    else:
        rows = [
            row.with_ledger(ledgers[row.task_queue], registry.max_concurrent(row.agent))
            for row in rows
        ]
    show_record(AgentsReport(rows), as_json, lambda report: agents_view(report.root))


def agents_view(rows: list[AgentHealth], now: datetime | None = None) -> Group:
    moment = now or datetime.now(UTC)
    table = render.table(
        "agent",
        "kind",
        "capabilities",
        "status",
        "workers (last seen)",
        "backlog",
        "queue",
        "pool",
        "success",
        "p50",
        "breaker",
    )
    for row in rows:
        table.add_row(
            row.agent,
            row.kind or "-",
            ", ".join(row.capabilities) or "-",
            render.status(row.status),
            _workers(row, moment),
            _backlog(row),
            row.task_queue,
            _pool(row),
            _success(row),
            f"{row.p50_ms:g} ms" if row.p50_ms is not None else "-",
            _breaker(row, moment),
        )
    note = (
        f"(success and p50: the last {WINDOW_TEXT} of runs; breaker: the share of the runs in "
        "its window failing in a way that counts against it)"
    )
    return Group(table, Text(note, style="dim"))


def _workers(row: AgentHealth, now: datetime) -> str:
    seen = []
    for worker in row.workers:
        last = worker.last_seen
        ago = f"{(now - last).total_seconds():.0f}s ago" if last else "never"
        stopped = f", {worker.state}" if worker.state in ("shutting_down", "shutdown") else ""
        seen.append(f"{worker.identity} ({ago}{stopped})")
    return "\n".join(seen) or "none"


def _pool(row: AgentHealth) -> str:
    """`2 in use, 0 free, 5 waiting`; `-` when no worker reports its slots."""
    pool = row.pool
    if pool is None:
        return "-"
    return f"{pool.in_use} in use, {pool.free} free, {pool.waiting} waiting"


def _success(row: AgentHealth) -> str:
    """`98% of 50`; `-` without runs in the window."""
    if row.success_rate is None:
        return "-"
    return f"{row.success_rate:.0%} of {row.runs}"


def _breaker(row: AgentHealth, now: datetime) -> Text:
    """`closed (10% of 40 failed)`, `open (12s left)` or `half_open (1 of 3 probes ok)`;
    `-` when its ledger was not read."""
    if row.breaker is None:
        return Text("-")
    if row.breaker == "open" and row.open_until is not None:
        left = max((row.open_until - now).total_seconds(), 0)
        return render.status("open", f"open ({left:.0f}s left)")
    if row.breaker == "half_open" and row.probes:
        return render.status(
            "half_open", f"half_open ({row.probes_succeeded} of {row.probes} probes ok)"
        )
    if row.breaker == "closed" and row.breaker_failure_rate is not None:
        rate = f"{row.breaker_failure_rate:.0%} of {row.breaker_calls} failed"
        return render.status("closed", f"closed ({rate})")
    return render.status(row.breaker)


def _backlog(row: AgentHealth) -> str:
    if row.backlog_age_s is None:
        return str(row.backlog)
    return f"{row.backlog} (oldest {row.backlog_age_s:.0f}s)"
