"""What a user imports: `coord` for scripts, `coord.agents` for agent authors (both cheap, neither
loading the worker), the one base of every error, and the extras: a feature whose extra is not
installed is refused in one line naming it, checked by hiding the extra's module (a shadowing
module that is not found, as pip leaves things without the extra), never by uninstalling."""

import asyncio
import importlib
import inspect
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import coord
import coord.agents
import coord.testing
from coord._lazy import typing_imports
from coord.infra.extras import EXTRAS, PROJECT
from coord.models.mesh import agents as sdk
from coord.models.wire.contract import FailureType, failure
from coord.starter.exits import ExitCode, failure_exit
from coord.testing import Coordination
from tests.conftest import ROOT
from tests.workers import COORD, run

HEAVY = ("coord.worker", "coord.activities", "temporalio.worker", "temporalio.testing", "openai")


def loaded_after(statement: str) -> list[str]:
    probe = (
        f"import sys, json\n{statement}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'coord' or m.startswith(("
        f"{(*HEAVY, 'coord.')!r})))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_importing_coord_loads_nothing_until_a_name_is_used() -> None:
    assert loaded_after("import coord") == ["coord", "coord._lazy"]


def test_every_name_of_coord_loads_no_worker_agent_code_or_temporal_worker() -> None:
    loaded = loaded_after("import coord\nfor name in coord.__all__: getattr(coord, name)")
    assert not [module for module in loaded if module.startswith(HEAVY)]


def test_coord_agents_loads_no_worker() -> None:
    loaded = loaded_after("import coord.agents")
    assert not [module for module in loaded if module.startswith(HEAVY)]


@pytest.mark.parametrize(
    "facade",
    [coord, coord.testing, coord.agents, importlib.import_module("coord.starter.api")],
    ids=lambda module: module.__name__,
)
def test_a_facade_serves_the_names_it_tells_type_checkers(facade: ModuleType) -> None:
    """`coord`, `coord.testing`, `coord.agents` and the Python API load their names on first use
    from the one list type checkers read (their `if TYPE_CHECKING:` imports, `X as X` each, or a
    module's whole `__all__`): `__all__`, `dir()` and every name agree with it."""
    imports = typing_imports(Path(facade.__file__ or "").read_text())
    aliases = [(alias, node.module or "") for node in imports for alias in node.names]
    homes = {alias.name: module for alias, module in aliases if alias.name != "*"}
    assert all(alias.asname == alias.name for alias, _ in aliases if alias.name != "*")
    wholes = [module for alias, module in aliases if alias.name == "*"]
    whole = {n: m for m in wholes for n in importlib.import_module(m).__all__}
    assert facade.__all__ == sorted({*homes, *whole}) and set(facade.__all__) <= set(dir(facade))
    for name in facade.__all__:
        home = importlib.import_module(homes.get(name) or whole[name])
        assert getattr(facade, name) is getattr(home, name)
    with pytest.raises(AttributeError, match=f"module '{facade.__name__}' has no attribute 'no'"):
        _ = facade.no


def test_a_public_name_of_the_api_is_served_by_coord() -> None:
    """`coord` serves the Python API's whole `__all__`: a new API function needs no second line."""
    assert set(importlib.import_module("coord.starter.api").__all__) <= set(coord.__all__)


@pytest.mark.parametrize(
    "name", [n for n in coord.__all__ if inspect.isfunction(getattr(coord, n))]
)
def test_every_public_function_is_documented_and_typed(name: str) -> None:
    function = getattr(coord, name)
    assert inspect.getdoc(function), f"{name} has no docstring"
    signature = inspect.signature(function)
    untyped = [
        p for p, v in signature.parameters.items() if v.annotation is inspect.Parameter.empty
    ]
    assert not untyped, f"{name}: untyped {untyped}"
    assert signature.return_annotation is not inspect.Signature.empty, f"{name}: no return type"


ERRORS = [n for n in coord.__all__ if inspect.isclass(getattr(coord, n))]
ERRORS = [n for n in ERRORS if issubclass(getattr(coord, n), BaseException)]


@pytest.mark.parametrize("name", ERRORS)
def test_every_error_a_script_meets_is_a_coord_error(name: str) -> None:
    assert issubclass(getattr(coord, name), coord.CoordError)


def test_the_errors_keep_their_builtin_bases() -> None:
    """`except ValueError` around a spec, `except RuntimeError` around a start, still work."""
    assert issubclass(coord.SpecError, ValueError)
    assert issubclass(coord.Conflict, RuntimeError) and issubclass(coord.NotFound, RuntimeError)
    assert set(ERRORS) >= {"SpecError", "Conflict", "NotFound", "NoWorker", "Undeliverable"}


def test_coord_agents_is_the_agent_sdk() -> None:
    for name in ("AgentContext", "AgentFn", "AgentResult", "AgentRegistry", "ProgressReporter"):
        assert getattr(coord.agents, name) is getattr(sdk, name)
    assert coord.agents.failure is failure and coord.agents.FailureType is FailureType
    assert set(coord.agents.__all__) <= set(dir(coord.agents))


def hide(directory: Path, module: str) -> dict[str, str]:
    """An environment in which `import module` fails as it does when its extra is missing."""
    (directory / module).mkdir()
    (directory / module / "__init__.py").write_text(
        f"raise ModuleNotFoundError({f'No module named {module!r}'!r}, name={module!r})\n"
    )
    return {"PYTHONPATH": str(directory), "COORD_DEMO_AGENTS": ""}


async def test_an_llm_agent_without_the_llm_extra_is_refused_naming_it(tmp_path: Path) -> None:
    agents = tmp_path / "agents.yaml"
    agents.write_text(
        "worker: {secrets: [KEY]}\n"
        "agents:\n  reviewer: {kind: llm, base_url: 'http://127.0.0.1:1/v1', model: m,\n"
        "    api_key_env: KEY, prompt: 'Review $title'}\n"
    )
    env = hide(tmp_path, "openai")
    code, out, err = await run(COORD, "worker", "--agents", str(agents), env=env)
    assert (code, out) == (ExitCode.REFUSED, ""), err
    assert err == (
        f"error: {agents}: agents.reviewer: agent 'reviewer' (kind llm) needs the llm extra, "
        "which is not installed: pip install 'event-coordinator[llm]'\n"
    )


async def test_the_s3_store_without_the_s3_extra_is_refused_naming_it(tmp_path: Path) -> None:
    env = {**hide(tmp_path, "aioboto3"), "COORD_PAYLOAD_STORE": "s3://payloads"}
    code, out, err = await run(COORD, "saga", "state", "any", env=env)
    assert (code, out) == (ExitCode.REFUSED, ""), err
    assert err == (
        "error: COORD_PAYLOAD_STORE: 's3://payloads': the S3 payload store needs the s3 extra, "
        "which is not installed: pip install 'event-coordinator[s3]'\n"
    )


def test_the_extras_the_guard_names_are_declared_and_dev_pulls_them() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(EXTRAS) <= set(extras)
    assert f"{PROJECT}[{','.join(sorted({*EXTRAS, 'testing'}))}]" in extras["dev"]


def guide_example(guide: Path, section: str) -> str:
    """The first Python block after `section` in a guide of docs/."""
    text = guide.read_text().split(section, 1)[1]
    return text.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.usefixtures("coord_worker")
async def test_the_api_guides_example_runs_as_written(coord: Coordination) -> None:
    script = guide_example(ROOT / "docs" / "api.md", "## An example")
    env = {
        "TEMPORAL_ADDRESS": coord.client.service_client.config.target_host,
        "COORD_TASK_QUEUE": coord.task_queue,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    assert out.decode().splitlines()[0].startswith("completed ['BuildArtifact', 'RunTests'")
    chain = await coord.chain_outcome("story-7")  # the event started it; it runs to its end
    assert chain.terminal_seen


def test_a_missing_extra_met_anywhere_is_one_line_and_exit_code_1() -> None:
    """Where no setting wraps it (the S3 listing of `coord gc`, say), it is still the line."""
    missing = coord.MissingExtra("the S3 payload store needs the s3 extra, ...")
    assert failure_exit(missing) == (ExitCode.REFUSED, str(missing))
