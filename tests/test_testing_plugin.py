"""The pytest plugin users test with (coord/testing.py): loaded once, by its entry point; its
helpers on the real servers (time skipping, aggregators, plans); its assertions' messages; and a
user's project outside this repository that has nothing but the plugin."""

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

import coord
from coord import testing
from coord.models.aggregator.spec import AggregatorStatus
from coord.models.dlq.letter import EntrySummary
from coord.models.events.timeline import TimelineEntry
from coord.models.plan.spec import PlanStatus
from coord.models.saga.spec import SagaSpec, SagaState, SagaStatus
from coord.models.wire.specs import SpecError
from coord.testing import (
    Coordination,
    assert_caused,
    assert_parked,
    assert_plan,
    assert_saga,
    assert_timeline,
    causation_path,
    plugin,
)
from coord.testing.harness import WAIT, dynamic_config_args, fresh, spec_of
from tests.helpers import PHASE1

WITH_WORKER = pytest.mark.usefixtures("coord_worker")


def test_the_plugin_is_registered_once_by_its_entry_point(pytestconfig: pytest.Config) -> None:
    manager = pytestconfig.pluginmanager
    assert manager.get_plugin("coord") is plugin
    assert [each for each in manager.get_plugins() if each is plugin] == [plugin]


def test_loading_the_plugin_costs_a_project_that_does_not_use_it_nothing() -> None:
    """pytest loads it in every project of the environment: it imports no Temporal, no worker."""
    probe = (
        "import sys, coord.testing.plugin; "
        "print(sorted(m for m in sys.modules if m.startswith(('coord', 'temporalio'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == (
        "['coord', 'coord._lazy', 'coord.testing', 'coord.testing.names', 'coord.testing.plugin']"
    )


@pytest.mark.coord_time_skipping
@WITH_WORKER
async def test_skip_moves_the_time_skipping_servers_clock_past_a_deadline(
    coord: Coordination,
) -> None:
    """The aggregator waits 2 hours for phase 1; skipping 3 hours times it out."""
    workflow_id = await coord.start_aggregator(PHASE1, correlation_id="story-1", lookback=False)
    assert (await coord.aggregator(workflow_id)).status == AggregatorStatus.WAITING
    await coord.skip(timedelta(hours=3))

    async def timed_out() -> bool:
        return (await coord.aggregator(workflow_id)).status == AggregatorStatus.TIMED_OUT

    await testing.eventually(timed_out)


async def test_skip_on_the_dev_server_says_which_mark_it_needs(coord: Coordination) -> None:
    with pytest.raises(RuntimeError, match=r"mark the test @pytest.mark.coord_time_skipping"):
        await coord.skip(timedelta(seconds=1))


@WITH_WORKER
async def test_a_plan_runs_from_its_fields_and_its_report_is_asserted(coord: Coordination) -> None:
    spec = {
        "plan_id": testing.unique("docs"),
        "tasks": [
            {"id": "write", "agent": "doc-writer"},
            {"id": "test", "agent": "doc-tester", "depends_on": ["write"]},
        ],
    }
    state = await coord.run_plan(spec)
    assert_plan(state, PlanStatus.COMPLETED, tasks={"write": "succeeded", "test": "succeeded"})
    with pytest.raises(AssertionError, match=r"expected tasks \{'test': 'error'\}"):
        assert_plan(state, PlanStatus.COMPLETED, tasks={"test": "error"})


async def test_a_run_that_does_not_end_says_where_it_stands_and_that_no_worker_polls(
    coord: Coordination,
) -> None:
    """No worker: the wait's TimeoutError names the saga, its status and the missing fixture."""
    spec = {"saga_id": testing.unique("stuck"), "steps": [{"name": "a", "agent": "BuildArtifact"}]}
    with pytest.raises(TimeoutError) as raised:
        await coord.run_saga(spec, timeout=1)
    message = str(raised.value)
    assert message.startswith(f"saga saga-{spec['saga_id']} did not end within 1s: it is running")
    assert f"no worker polls task queue {coord.task_queue!r}" in message
    assert "add @pytest.mark.usefixtures('coord_worker')" in message
    with pytest.raises(TimeoutError, match=r"2 dead letters .* not listed within 0.5s: 0 were"):
        await coord.dead_letters(count=2, timeout=0.5)


async def test_eventually_names_the_check_that_did_not_hold_and_waits_as_long_as_the_rest() -> None:
    async def never() -> bool:
        return False

    with pytest.raises(TimeoutError, match=r"never\(\) did not hold within 0.2s"):
        await testing.eventually(never, timeout=0.2)
    assert testing.eventually.__defaults__ == (WAIT, 0.05)


async def test_a_spec_naming_an_unknown_agent_is_refused_at_once(coord: Coordination) -> None:
    """As `coord saga start` refuses it, naming the field and the agent, not after a wait."""
    spec = {"saga_id": "s", "steps": [{"name": "a", "agent": "nobody"}]}
    with pytest.raises(SpecError, match=r"^SagaSpec: steps\[0\].agent: unknown agent 'nobody'"):
        await coord.start_saga(spec)
    plan = {"plan_id": "p", "tasks": [{"id": "t", "agent": "nobody"}]}
    with pytest.raises(SpecError, match=r"tasks\[0\].agent: unknown agent 'nobody'"):
        await coord.run_plan(plan)


def test_a_mapping_spec_with_a_typo_is_refused_in_one_line_naming_the_field() -> None:
    with pytest.raises(SpecError, match=r"^SagaSpec: steps\[0\].agnt: Extra inputs"):
        spec_of(SagaSpec, {"saga_id": "s", "steps": [{"name": "a", "agnt": "x"}]}, {})


def test_a_dynamic_config_value_that_is_not_key_value_names_the_setting() -> None:
    assert dynamic_config_args(["a.b=1"]) == ["--dynamic-config-value", "a.b=1"]
    for bad in ("limit.historyCount", "=1"):
        with pytest.raises(ValueError, match=rf"^coord_dynamic_config: '{bad}' is not KEY=VALUE"):
            dynamic_config_args([bad])


def test_assert_parked_says_which_expectation_failed() -> None:
    letter = EntrySummary.model_validate(
        {
            "entry_id": "dlq-1",
            "status": "parked",
            "failure_type": "agent_error",
            "message": "boom",
            "attempts": 1,
            "event_id": "e1",
            "event_type": "BugReported",
            "topic": None,
            "correlation_id": "c",
            "target_workflow": None,
            "target_agent": None,
            "parked_at": datetime(2026, 1, 1, tzinfo=UTC),
        }
    )
    with pytest.raises(AssertionError, match="expected failure_type 'invalid_payload', found"):
        assert_parked([letter], 1, failure_type="invalid_payload")
    with pytest.raises(AssertionError, match="expected event_type 'Other', found 'BugReported'"):
        assert_parked([letter], 1, event_type="Other")


def row(
    seq: int, event: str, cause: str | None = None, causes: list[str] | None = None
) -> TimelineEntry:
    return TimelineEntry(
        seq=seq,
        time=datetime(2026, 1, 1, tzinfo=UTC),
        event=event,
        agent="/test",
        correlation_id="c",
        event_id=f"e{seq}",
        causation_id=cause,
        causes=causes if causes is not None else [cause] if cause else [],
    )


TIMELINE = [row(1, "A"), row(2, "B", "e1"), row(3, "C"), row(4, "D", "e3", ["e2", "e3"])]


def test_the_timeline_assertions_say_what_happened_instead() -> None:
    assert_timeline(TIMELINE, "A", "C", "D")
    with pytest.raises(AssertionError, match=r"A is missing after what came before it.*B → C"):
        assert_timeline(TIMELINE, "B", "A")
    assert causation_path(TIMELINE, "D") == ["C", "D"]
    assert causation_path(TIMELINE, "B") == ["A", "B"]
    assert_caused(TIMELINE, "D", by="B")  # a join: every event it waited for is a cause
    with pytest.raises(AssertionError, match="D was caused by B, C, not A"):
        assert_caused(TIMELINE, "D", by="A")
    with pytest.raises(AssertionError, match="no E in the timeline: A, B, C, D"):
        causation_path(TIMELINE, "E")


def test_the_saga_assertion_shows_the_record() -> None:
    state = SagaState(saga_id="s", status=SagaStatus.COMPENSATED, failure_reason="boom")
    with pytest.raises(AssertionError, match=r"saga s: compensated, steps .*, failure: boom"):
        assert_saga(state, SagaStatus.COMPLETED)


def test_a_spec_file_gives_each_run_its_own_id_and_correlation(tmp_path: Path) -> None:
    """Its correlation, taken from its id, follows the new one: two runs of one file never
    share a chain or a timeline. A correlation the file names apart from its id stays."""
    step = {"name": "a", "agent": "BuildArtifact"}
    derived, named = tmp_path / "derived.yaml", tmp_path / "named.yaml"
    derived.write_text(yaml.safe_dump({"saga_id": "order", "steps": [step]}))
    named.write_text(
        yaml.safe_dump({"saga_id": "order", "correlation_id": "story", "steps": [step]})
    )
    runs = [fresh(spec_of(SagaSpec, derived, {}), derived, "saga_id", {}) for _ in range(2)]
    assert runs[0].saga_id != runs[1].saga_id
    assert [run.correlation_id for run in runs] == [run.saga_id for run in runs]
    kept = fresh(spec_of(SagaSpec, named, {}), named, "saga_id", {})
    assert kept.saga_id != "order" and kept.correlation_id == "story"


USER_TEST = """
import pytest
from coord.testing import Coordination, assert_timeline

@pytest.fixture
def coord_agents():
    return "agents.yaml"

@pytest.mark.usefixtures("coord_worker")
async def test_echo(coord: Coordination) -> None:
    correlation_id = await coord.start_chain("chain.yaml")
    await coord.publish(correlation_id, "Ping", {"n": 1})
    await coord.close_chain(correlation_id)
    assert_timeline(await coord.timeline(correlation_id), "Ping", "Pong")
"""


def user_project(directory: Path, loop_scope: str) -> None:
    (directory / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\n"
        'asyncio_mode = "auto"\n'
        'asyncio_default_fixture_loop_scope = "session"\n'
        f'asyncio_default_test_loop_scope = "{loop_scope}"\n'
    )
    (directory / "echo.py").write_text(
        "async def echo(event, context):\n    return dict(event.payload)\n"
    )
    (directory / "agents.yaml").write_text(
        "agents:\n  echo: {kind: python, callable: 'echo:echo'}\n"
    )
    (directory / "chain.yaml").write_text(
        "name: echo\ntriggers: [Ping]\n"
        "subscriptions: [{agent: echo, events: Ping, publishes: {on_success: Pong}}]\n"
    )
    (directory / "test_echo.py").write_text(USER_TEST)


def run_pytest(directory: Path) -> subprocess.CompletedProcess[str]:
    """pytest in a project of the user's: only the package under test (the `coord` this test
    imports, on a path of its own) and its entry point."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COORD_", "TEMPORAL_"))}
    site = directory.with_name(f"{directory.name}-site")
    site.mkdir(exist_ok=True)
    if not (site / "coord").exists():
        (site / "coord").symlink_to(Path(coord.__file__).parent)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(directory)],
        cwd=directory,
        env={**env, "PYTHONPATH": os.pathsep.join([str(directory), str(site)])},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_a_users_project_tests_its_chain_with_the_plugin_alone(tmp_path: Path) -> None:
    user_project(tmp_path, "session")
    done = run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_a_test_on_a_loop_of_its_own_is_stopped_saying_what_to_set(tmp_path: Path) -> None:
    """A test on its own event loop would wait forever on the session's clients."""
    user_project(tmp_path, "function")
    done = run_pytest(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'set asyncio_default_test_loop_scope = "session"' in done.stdout


def test_a_bad_dynamic_config_value_is_refused_naming_the_setting(tmp_path: Path) -> None:
    """Before any server starts, which would only exit with its reason in captured output."""
    user_project(tmp_path, "session")
    with (tmp_path / "pyproject.toml").open("a") as config:
        config.write('coord_dynamic_config = ["limit.historyCount"]\n')
    done = run_pytest(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "coord_dynamic_config: 'limit.historyCount' is not KEY=VALUE" in done.stdout


@pytest.mark.slow
def test_the_testing_example_copied_out_is_a_project_that_passes(tmp_path: Path) -> None:
    """`coord examples --copy` gives a user examples/testing with its own pytest configuration."""
    project = tmp_path / "testing"
    shutil.copytree(Path(coord.__file__).parent / "examples" / "testing", project)
    done = run_pytest(project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed in " in done.stdout and "skipped" not in done.stdout
