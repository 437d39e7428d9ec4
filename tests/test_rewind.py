"""Rewind and compare on the real dev server: `coord diff` beside two runs of one story."""

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord import testing
from coord.activities.kinds.demo import register_demo_agents
from coord.infra.event_log import DirectorySegments, segment_store
from coord.models.chain.intake import TIMELINE_WINDOW
from coord.models.chain.spec import ChainSpec
from coord.models.events.envelope import EventEnvelope
from coord.models.events.log import SEGMENT_ROWS
from coord.models.mesh.agents import AgentContext, AgentRegistry
from coord.models.mesh.config import AgentsFile, WorkerSettings
from coord.models.plan.spec import PlanSpec, PlanStatus
from coord.models.rewind.diff import RowStatus
from coord.models.rewind.plan import PatternCopy, RewindPlan, RewindRefused
from coord.models.saga.spec import SagaStatus
from coord.models.wire import contract
from coord.models.wire.specs import read_document
from coord.starter import api
from coord.starter.api.common import NotFound
from coord.starter.api.rewind_patterns import listed_runs
from coord.starter.commands.rewind import rewound_lines
from coord.starter.exits import ExitCode
from coord.worker import build_worker
from tests.conftest import feature_deployment
from tests.helpers import eventually
from tests.test_cli import USER_STORY
from tests.workers import COORD, run, server_env

BROKEN_PYTHON_PRO = {"fail": ["python-pro"], "error_type": "invalid_payload"}


def approved(
    correlation_id: str, event_type: str = "UserStoryApproved", **payload: Any
) -> EventEnvelope:
    return EventEnvelope.new(
        event_type,
        "/product-strategist",
        payload={"story": "reset password", **payload},
        correlation_id=correlation_id,
        topic="project.tasks",
    )


async def story(client: Client, queue: str, correlation_id: str, **payload: Any) -> None:
    spec = ChainSpec.model_validate(read_document(USER_STORY))
    await api.start_chain(client, spec, correlation_id, queue=queue)
    await api.publish(client, approved(correlation_id, **payload))


async def test_coord_diff_aligns_two_runs_of_a_story_by_causation(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    env = server_env(dev_env, task_queue)
    broken, fixed = f"broken-{task_queue}", f"fixed-{task_queue}"
    async with build_worker(client, task_queue):
        await story(client, task_queue, broken, inject=BROKEN_PYTHON_PRO)
        await story(client, task_queue, fixed)
        await asyncio.wait_for(api.chain_handle(client, fixed).result(), 60)

        async def backend_failed() -> bool:
            rows = await api.correlation_events(client, broken)
            return any(row.event == "BackendImplementationFailed" for row in rows)

        await eventually(backend_failed)
        code, out, err = await run(COORD, "diff", broken, fixed, "--json", env=env)
        assert code == ExitCode.DIFFERS, err
        compared = json.loads(out)
        code, table, _ = await run(COORD, "diff", fixed, fixed, env=env)
        refused = await run(COORD, "rewind", fixed, "--to", "nope", "--as", broken, env=env)
    assert refused == (
        ExitCode.REFUSED,
        "",
        f"error: --to: 'nope' is neither an event id nor an event type in the log of {fixed!r}\n",
    )
    counts = table.splitlines()[-1]
    assert code == ExitCode.OK
    assert counts.endswith(f"same, 0 changed, 0 only in {fixed}, 0 only in {fixed}")
    rows = {(row["event"], row["status"]) for row in compared["rows"]}
    assert ("UserStoryApproved", RowStatus.CHANGED) in rows  # its payload carries the injection
    assert ("APIDesignStarted", RowStatus.SAME) in rows
    changed = {row["event"]: row["changed"] for row in compared["rows"] if row["changed"]}
    assert "payload.inject" in changed["APIDesignCompleted"]  # the demo agents carry it on
    assert ("BackendImplementationFailed", RowStatus.ONLY_LEFT) in rows
    assert ("BackendImplementationCompleted", RowStatus.ONLY_RIGHT) in rows
    assert ("TestingCompleted", RowStatus.ONLY_RIGHT) in rows


async def test_a_rewind_onto_a_correlation_that_has_runs_is_a_conflict_naming_it(
    dev_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """A copy is a new correlation: `--as` the correlation of an ended saga was accepted and
    mixed the copy's chain into the saga's table, and `--as` that of a running saga let the
    saga's later events land in the copy's chain. Both exit 4 (`conflict`) naming the run."""
    env = server_env(dev_env, task_queue)
    original = f"told-{task_queue}"
    ended = feature_deployment()
    running = feature_deployment()
    async with build_worker(client, task_queue):
        await story(client, task_queue, original)
        await asyncio.wait_for(api.chain_handle(client, original).result(), 60)
        await api.saga_outcome(await api.start_saga(client, ended, queue=task_queue))
    await api.start_saga(client, running, queue=f"{task_queue}-idle")  # no worker: it stays

    async def both_listed() -> bool:
        sagas = [await listed_runs(client, s.saga_id) for s in (ended, running)]
        return [[run.status for run in runs] for runs in sagas] == [["completed"], ["in_progress"]]

    await eventually(both_listed)
    refusals = [
        await run(COORD, "rewind", original, "--to", "UserStoryApproved", "--as", taken, env=env)
        for taken in (ended.saga_id, running.saga_id)
    ]
    await api.saga_handle(client, running.saga_id).terminate()
    assert refusals == [
        (
            ExitCode.CONFLICT,
            "",
            f"error: the copy's correlation {saga.saga_id!r} is taken: it already has "
            f"saga-{saga.saga_id} ({status}); a copy needs a correlation id of its own\n",
        )
        for saga, status in ((ended, "completed"), (running, "in_progress"))
    ]
    with pytest.raises(NotFound):
        await api.chain_running(client, ended.saga_id)  # no copy was started


BROKEN = {"kind": "shell", "argv": ["sh", "-c", "exit 3"]}
FIXED = {"kind": "shell", "argv": ["sh", "-c", "echo {}"]}
EARLIER_AGENTS_EVENTS = ("APIDesign", "Wireframe", "TestPlan")
"""The events of the agents that ran before the rewind point: never made again by the copy."""


def story_with(python_pro: Mapping[str, object]) -> ChainSpec:
    """The user-story chain with its `python-pro` declared inline, not retried."""
    document = read_document(USER_STORY)
    document["agents"] = {"python-pro": python_pro}
    for subscription in document["subscriptions"]:
        if subscription["agent"] == "python-pro":
            subscription["retry"] = {"max_retries": 0}
    return ChainSpec.model_validate(document)


async def test_a_story_rewound_past_a_bad_agent_reaches_its_end_on_a_copy(
    client: Client, task_queue: str
) -> None:
    original, copy = f"bad-{task_queue}", f"fixed-{task_queue}"
    allowing = register_demo_agents(AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    async with build_worker(client, task_queue, allowing):
        await api.start_chain(client, story_with(BROKEN), original, queue=task_queue)
        await api.publish(client, approved(original))

        async def backend_failed_and_parked() -> bool:
            events = {r.event for r in await api.chain_timeline(client, original)}
            return {"BackendImplementationFailed", "EventDeadLettered"} <= events

        await eventually(backend_failed_and_parked)
        before = await api.chain_timeline(client, original)
        point = next(r.event_id for r in before if r.event == "APIDesignCompleted")
        fixed = AgentsFile.model_validate({"agents": {"python-pro": FIXED}}).agents
        plan = await api.rewind_chain(
            client, original, to=point, copy_id=copy, agents=fixed, queue=task_queue
        )
        ended = await asyncio.wait_for(api.chain_handle(client, copy).result(), 60)
        rewound = await api.chain_timeline(client, copy)
        after = await api.chain_timeline(client, original)
        described = await api.chain_handle(client, copy).describe()
        compared = await api.diff_correlations(client, original, copy)
    assert ended.status == "completed" and rewound[-1].event == "TestingCompleted"
    assert ended.rewind_of == f"{original}@{point}", "the copy's record, and its runs, say so"
    assert [r.event_id for r in rewound[: len(plan.recorded)]] == [
        r.event_id for r in plan.recorded
    ]
    original_ids = {r.event_id for r in before}
    earlier = [r for r in rewound if r.event.startswith(EARLIER_AGENTS_EVENTS)]
    assert earlier and all(r.event_id in original_ids for r in earlier), "no earlier agent re-ran"
    assert after == before, "the original is untouched"
    assert described.typed_search_attributes.get(contract.REWIND_OF) == f"{original}@{point}"
    rows = {(r.event, r.status) for r in compared.rows}
    assert ("BackendImplementationFailed", RowStatus.ONLY_LEFT) in rows
    assert ("BackendImplementationCompleted", RowStatus.ONLY_RIGHT) in rows
    assert ("TestingCompleted", RowStatus.ONLY_RIGHT) in rows
    assert ("APIDesignCompleted", RowStatus.SAME) in rows


NOISE = 4 * TIMELINE_WINDOW + 1
"""Rows enough that, once the chain has taken them all, its window has trimmed itself past the
first segment whenever it continued as new: a run carries only its newest rows (and those not
written yet), so a continue-as-new within the first 400 rows drops row 1 while the window still
holds some of the first segment's rows, and the window trims again only past 2 * TIMELINE_WINDOW
rows."""


async def test_a_rewind_over_a_log_that_lost_its_beginning_is_refused(
    client: Client, task_queue: str
) -> None:
    """The whole log is kept in segments, the chain's window holding the newest rows; a lost
    segment (a store emptied by hand, a bucket's object removed) of rows the window no longer
    holds leaves the past before the point incomplete, and a copy built on part of the past
    would start from a state the original never had."""
    original = f"lost-{task_queue}"
    async with build_worker(client, task_queue):
        await api.start_chain(client, story_with(FIXED), original, queue=task_queue)
        noise = [approved(original, "Noise", n=n) for n in range(NOISE)]
        for start in range(0, len(noise), 50):
            await asyncio.gather(*(api.publish(client, e) for e in noise[start : start + 50]))
        store = segment_store()

        async def the_window_forgot_the_first_segment() -> bool:
            """Until then a reader finds some of its rows in the window, and a smaller gap."""
            return (await api.chain_timeline(client, original))[0].seq > SEGMENT_ROWS

        await eventually(the_window_forgot_the_first_segment, timeout=120)
        first = min(await store.names(original))  # the store lists them in any order
        assert isinstance(store, DirectorySegments)
        (store.root / original / first).unlink()
        last = [row async for row in api.read_log(client, original)][-1]
        with pytest.raises(
            RewindRefused, match="it lacks events 1-200 \\(its first, before sequence number"
        ):
            await api.rewind_chain(client, original, to=last.event_id, copy_id=f"copy-{task_queue}")
        with pytest.raises(NotFound):
            await api.chain_running(client, f"copy-{task_queue}")  # no copy was started


def counting(log: Path) -> dict[str, object]:
    """A shell agent that appends its step's name to `log` each time it runs."""
    return {"kind": "shell", "argv": ["sh", "-c", f'echo "$STEP" >> {log}; echo {{}}']}


async def test_a_saga_rewound_to_step_4_reuses_steps_1_to_3_and_completes_with_a_fixed_agent(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.log"
    first_three = ["BuildArtifact", "RunTests", "DeployToStaging"]
    agents = {name: {**counting(runs), "env": {"STEP": name}} for name in first_three}
    failing = {"inject": {"fail": ["DeployToProduction"], "error_type": "invalid_payload"}}
    spec = feature_deployment(input=failing, agents=agents)
    copy_id = f"{spec.saga_id}-fixed"
    fixed = AgentsFile.model_validate({"agents": {"DeployToProduction": FIXED}}).agents
    allowing = register_demo_agents(AgentRegistry(WorkerSettings(inline_agents=["shell"])))
    async with build_worker(client, task_queue, allowing):
        original = await api.saga_outcome(await api.start_saga(client, spec, queue=task_queue))
        handle = await api.rewind_saga(
            client, spec.saga_id, to_step=4, copy_id=copy_id, agents=fixed, queue=task_queue
        )
        copy = await api.saga_outcome(handle)
        described = await handle.describe()
        with pytest.raises(RewindRefused, match="--to-step: 6 is not a step after the first"):
            await api.rewind_saga(client, spec.saga_id, to_step=6, copy_id=f"{copy_id}-2")
    assert original.status == SagaStatus.COMPENSATED
    assert copy.status == SagaStatus.COMPLETED
    assert runs.read_text().split() == first_three, "steps 1-3 ran once, in the original"
    assert copy.completed_steps[:3] == original.completed_steps[:3]
    assert [e.event for e in copy.events][3:] == ["E2EPassed", "ProductionDeployed"]
    assert described.typed_search_attributes.get(contract.REWIND_OF) == (
        f"{spec.saga_id}@step 4 RunE2ETests"
    )


async def witness(event: EventEnvelope, context: AgentContext) -> Mapping[str, Any]:
    """A fixed agent that says whether it runs in a rewound copy, and of what."""
    return {"rewind_of": context.rewind_of}


def counted_plan(runs: Path) -> PlanSpec:
    """research -> build -> ship, their agents inline shell agents: research and ship count
    their runs in `runs`, build fails for good (exit 3, not retried)."""
    never_again = {"max_retries": 0}
    return PlanSpec.model_validate(
        {
            "plan_id": testing.unique("rewound-plan"),
            "agents": {
                "researcher": {**counting(runs), "env": {"STEP": "research"}},
                "builder": BROKEN,
                "shipper": {**counting(runs), "env": {"STEP": "ship"}},
            },
            "tasks": [
                {"id": "research", "agent": "researcher"},
                {
                    "id": "build",
                    "agent": "builder",
                    "depends_on": ["research"],
                    "retry": never_again,
                },
                {"id": "ship", "agent": "shipper", "depends_on": ["build"]},
            ],
        }
    )


async def test_a_plan_rewound_to_its_failed_task_reuses_what_succeeded_and_completes(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.log"
    spec = counted_plan(runs)
    copy_id = f"{spec.plan_id}-fixed"
    witnessing = {"kind": "python", "callable": f"{__name__}:witness"}
    fixed = AgentsFile.model_validate({"agents": {"builder": witnessing}}).agents
    inline = WorkerSettings(inline_agents=["shell", "python"])
    allowing = register_demo_agents(AgentRegistry(inline))
    async with build_worker(client, task_queue, allowing):
        original = await api.plan_outcome(await api.start_plan(client, spec, queue=task_queue))
        handle = await api.rewind_plan(
            client, spec.plan_id, copy_id=copy_id, to_task="build", agents=fixed, queue=task_queue
        )
        copy = await api.plan_outcome(handle)
        described = await handle.describe()
        with pytest.raises(RewindRefused, match="--to-task: 'nope' is no task"):
            await api.rewind_plan(client, spec.plan_id, copy_id=f"{copy_id}-2", to_task="nope")
    states = {task.id: task.state for task in original.tasks}
    assert states == {"research": "succeeded", "build": "error", "ship": "skipped"}
    assert copy.status == PlanStatus.COMPLETED
    assert runs.read_text().split() == ["research", "ship"], "research ran once, in the original"
    research = next(task for task in copy.tasks if task.id == "research")
    assert research.result == next(t for t in original.tasks if t.id == "research").result
    assert described.typed_search_attributes.get(contract.REWIND_OF) == f"{spec.plan_id}@build"
    build = next(task for task in copy.tasks if task.id == "build")
    assert build.result == {"rewind_of": f"{spec.plan_id}@build"}, "the agent knows it is a copy"


def test_rewind_prints_what_came_into_the_copy_and_each_pattern_copied() -> None:
    """`coord rewind`'s lines for people (its --json prints the plan itself)."""
    plan = RewindPlan(
        original="story-1",
        copy_id="story-2",
        point="evt-9",
        point_seq=3,
        regenerated=["evt-10", "evt-11"],
        copies=[
            PatternCopy(pattern="aggregator", original="agg-1", copy_id="agg-2", taken=2),
            PatternCopy(pattern="vote", original="vote-1", copy_id="vote-2", taken=1),
            PatternCopy(pattern="saga", original="s-1", copy_id="s-2", taken=2),
            PatternCopy(pattern="plan", original="p-1", copy_id="p-2", taken=3),
        ],
    )
    assert list(rewound_lines(plan)) == [
        "rewound story-1 at evt-9 onto story-2: 0 events taken as recorded, 0 sent again, "
        "2 to be made anew",
        "  aggregator agg-1 -> agg-2 (2 slots)",
        "  vote vote-1 -> vote-2 (1 ballots)",
        "  saga s-1 -> s-2 (2 steps)",
        "  plan p-1 -> p-2 (3 tasks)",
    ]
