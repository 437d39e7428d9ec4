"""The README's first command: the seed's Feature Deployment saga, to success and to rollback."""

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from infra.devserver import local_temporal
from infra.temporal import workflow_link
from models.saga import SagaSpec
from models.specs import load_spec
from starter import api
from worker import build_worker

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "feature-deployment.yaml"
RUNS: dict[str, dict[str, Any]] = {
    "success": {},
    "rollback": {"inject": {"fail": ["DeployToProduction"]}},
}


def _variant(spec: SagaSpec, run: str, stamp: str) -> SagaSpec:
    return spec.model_copy(
        update={"saga_id": f"{spec.saga_id}-{stamp}-{run}", "input": {**spec.input, **RUNS[run]}}
    )


async def run_demo(*, keep_serving: bool) -> None:
    spec = load_spec(SagaSpec, EXAMPLE)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    async with local_temporal() as (client, where):
        typer.echo(f"Temporal: {where}")
        async with build_worker(client):
            for run in RUNS:
                saga = _variant(spec, run, stamp)
                handle = await api.start_saga(client, saga)
                typer.secho(f"\n▶ {handle.id} ({run})", bold=True)
                state = await api.saga_outcome(handle)
                typer.echo(state.model_dump_json(indent=2))
                typer.echo(f"  status: {state.status.value}  UI: {workflow_link(handle.id)}")
            typer.echo(
                f"\nAll sagas: {workflow_link('').rstrip('/')}?query=CoordPattern%3D%22saga%22"
            )
            if keep_serving:
                typer.echo("Serving the Temporal UI at http://localhost:8233; Ctrl-C to stop.")
                await asyncio.Event().wait()
