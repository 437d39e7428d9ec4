"""Rewind many on the real dev server: twenty stories, half of them stuck on a failing
`python-pro`, rewound past it with a fixed one, some first (`--where`), the rest by a second
run that skips the copies the first made; then `coord diff --summary` counts what changed.
Each run takes more stories than it rewinds at once (its `--concurrency`, 8)."""

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.activities.kinds.demo import register_demo_agents
from coord.models.events.timeline import TimelineEntry
from coord.models.mesh.agents import AgentRegistry
from coord.models.mesh.config import WorkerSettings
from coord.starter import api
from coord.starter.api.rewind_batch import unmatched
from coord.starter.exits import ExitCode
from coord.worker import build_worker
from tests.helpers import eventually
from tests.test_rewind import BROKEN, FIXED, approved, story_with
from tests.workers import COORD, run, server_env

STORIES = 20
FIRST = 10
"""The stories the first, filtered batch takes (`payload.n < 10`)."""


async def stories(client: Client, queue: str) -> list[str]:
    """STORIES user stories, the odd ones with a `python-pro` that fails; one more chain that
    never gets an event (nothing to rewind: refused on its line)."""
    ids = [f"story{n}-{queue}" for n in range(STORIES)]
    for n, correlation in enumerate(ids):
        spec = story_with(BROKEN if n % 2 else FIXED)
        await api.start_chain(client, spec, correlation, queue=queue)
        await api.publish(client, approved(correlation, n=n))
    await api.start_chain(client, story_with(FIXED), f"empty-{queue}", queue=queue)
    return ids


async def settled(client: Client, correlation: str) -> bool:
    """Completed, or stuck with its failure parked."""
    state = await api.chain_state(client, correlation)
    return state.terminal_seen or state.dead_lettered > 0


async def test_twenty_stories_rewound_in_two_runs_and_the_changed_outcomes_counted(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = server_env(dev_env, task_queue)
    agents = tmp_path / "agents.yaml"
    agents.write_text(json.dumps({"agents": {"python-pro": FIXED}}))
    since = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    window = ["--since", since, "--suffix", "-fixed"]
    batch = [COORD, "rewind", "--all", *window, "--to-type", "APIDesignCompleted"]
    allowing = register_demo_agents(AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    async with build_worker(client, task_queue, allowing):
        ids = await stories(client, task_queue)

        async def all_settled() -> bool:
            return all(await asyncio.gather(*(settled(client, c) for c in ids)))

        await eventually(all_settled, timeout=180, interval=0.5)
        code, first, err = await run(
            *batch, "--agents", str(agents), "--where", "payload.n < 10", "--json", env=env
        )
        assert code == ExitCode.OK, err
        code, second, err = await run(*batch, "--agents", str(agents), env=env)
        assert code == ExitCode.OK, err
        copies = [api.chain_handle(client, f"{c}-fixed").result() for c in ids]
        ended = await asyncio.wait_for(asyncio.gather(*copies), 180)
        code, out, err = await run(COORD, "diff", "--summary", *window, "--json", env=env)
        assert code == ExitCode.OK, err
        code, counts, _ = await run(COORD, "diff", "--summary", *window, env=env)
    lines = json.loads(first)["lines"]
    rewound = {line["original"] for line in lines if line["status"] == "rewound"}
    assert rewound == set(ids[:FIRST]), "--where took the stories whose first event has n < 10"
    assert sum(line["status"] == "filtered" for line in lines) == STORIES - FIRST
    second_lines = second.splitlines()
    assert second_lines[-1] == f"{STORIES - FIRST} rewound, {FIRST} skipped, 0 filtered, 1 refused"
    assert f"empty-{task_queue}: refused: its log holds no event yet" in second_lines
    assert all(state.status == "completed" for state in ended)
    summary = json.loads(out)
    assert summary["compared"] == STORIES
    assert summary["outcomes_changed"] == {"failed -> completed": STORIES // 2}
    assert summary["without_copy"] == [f"empty-{task_queue}"]
    changed = {pair["original"] for pair in summary["pairs"] if pair["change"]}
    assert changed == set(ids[1::2]), "the stories with the failing python-pro"
    assert counts.splitlines()[:3] == [
        f"{STORIES} pairs compared",
        f"{STORIES // 2} outcomes changed",
        f"  failed -> completed: {STORIES // 2}",
    ]


async def test_a_batch_is_checked_before_the_server_is_asked() -> None:
    """Each wrong option is one line naming it (exit 1), with no server to reach."""
    nowhere = {"TEMPORAL_ADDRESS": "127.0.0.1:9"}
    cases = [
        (["rewind", "--all", "--suffix", "-x"], "error: --since: give the earliest start time"),
        (["rewind", "--all", "--since", "2h"], "error: --suffix: give the suffix"),
        (["rewind", "--all", "--since", "soon", "--suffix", "-x"], "error: --since: 'soon' is"),
        (["rewind", "story-1"], "error: rewind: give C --to EVENT --as C2, or --all"),
        (
            ["diff", "--summary", "--since", "1h", "--until", "2h", "--suffix", "-x"],
            "error: --until: ",
        ),
        (["diff", "story-1"], "error: diff: give two correlation ids, or --summary"),
    ]
    for argv, message in cases:
        code, _, err = await run(COORD, *argv, env=nowhere)
        assert (code, err.startswith(message)) == (ExitCode.REFUSED, True), (argv, err)


def test_a_where_that_cannot_be_evaluated_on_the_first_event_filters_it_out() -> None:
    entry = TimelineEntry.recording(approved("story-1", n=3), seq=1, correlation_id="story-1")
    assert unmatched("payload.n < 10", entry) is None
    assert unmatched("story=reset password", entry) is None, (
        "the short forms of subscriptions' filters"
    )
    assert unmatched("payload.n > 10", entry) == "--where: no match"
    assert (unmatched("payload.missing > 1", entry) or "").startswith("--where: ")
