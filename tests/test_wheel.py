"""The built package runs: the wheel, installed with its dependencies into a fresh virtualenv
(as `pip install .` in the Dockerfile does), works from outside the checkout, inside a user's
project that has `models` and `workflows` packages of its own."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.workers import stop_process_group

SHIPPED = ("models", "workflows", "activities", "starter", "infra")
"""The top-level folders the wheel ships as `coord.*` (bench and tests stay in the checkout)."""

USER_PACKAGES = ("models", "workflows")
"""What a user's own Temporal project typically has, as Temporal's samples teach."""

LOCAL_STATE = (".venv", ".git", ".temporal", "build", "*.egg-info", "__pycache__", "*_cache")

pytestmark = pytest.mark.slow


def shipped_modules() -> list[str]:
    """Every module of the shipped packages, found in the checkout, so a package that
    discovery missed fails the import (`__main__` modules run `coord`: --help covers them)."""
    modules = ["coord", "coord.worker", "coord.agents", "coord.testing"]
    modules += [
        f"coord.testing.{path.stem}" for path in (ROOT / "coord" / "testing").glob("[!_]*.py")
    ]
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__main__.py":
                continue
            parts = ("coord", *path.relative_to(ROOT).with_suffix("").parts)
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def example_files() -> list[str]:
    """The checkout's examples, each a path inside `examples/`."""
    examples = ROOT / "examples"
    files = (p for p in examples.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return sorted(p.relative_to(examples).as_posix() for p in files)


def make_user_project(directory: Path) -> None:
    for package in USER_PACKAGES:
        (directory / package).mkdir()
        (directory / package / "__init__.py").write_text(f"OWNER = 'user {package}'\n")


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_listening(port: int, process: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server exited"
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port}")


@contextmanager
def background(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    log = (cwd / f"{Path(argv[0]).name}-{argv[1]}.log").open("wb")
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=log, stderr=log, start_new_session=True
    )
    try:
        yield process
    finally:
        stop_process_group(process)
        log.close()


def test_the_wheel_installs_and_runs_a_saga_outside_the_checkout(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    make_user_project(outside)
    # A clean environment (no TEMPORAL_* or COORD_*), but pip's own settings, as a user has.
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME") or k.startswith("PIP_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")  # the default store, not the user's own
    # A copy, since setuptools builds in the source tree (build/, *.egg-info).
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LOCAL_STATE))
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        outside,
        env,
    )
    (wheel,) = tmp_path.glob("event_coordinator-*.whl")  # with its extras: every module imports
    # The venv without a pip of its own (3 s of ensurepip): this pip installs into it
    # (`--python`), without compiling the bytecode of every module it installs (5 s), which
    # Python compiles as it imports them.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], outside, env)
    bin_dir = venv / "bin"
    run(
        [
            *(sys.executable, "-m", "pip", "--python", str(bin_dir / "python")),
            *("install", "-q", "--disable-pip-version-check", "--no-compile"),
            f"{wheel}[llm,s3,testing]",
        ],
        outside,
        env,
        timeout=600,
    )

    script = (
        "import importlib, json, pathlib, sys\n"
        "import models, workflows\n"
        "from coord.starter.demo import EXAMPLES\n"
        "found = {m: importlib.import_module(m).__file__ for m in sys.argv[1:]}\n"
        "from importlib.metadata import entry_points\n"
        "root = pathlib.Path(found['coord']).parent\n"
        "print(json.dumps({'files': found, 'users': [models.OWNER, workflows.OWNER],\n"
        "  'typed': (root / 'py.typed').exists(),\n"
        "  'schemas': sorted(p.name for p in (root / 'schemas').glob('*.json')),\n"
        "  'plugin': [e.value for e in entry_points(group='pytest11') if e.name == 'coord'],\n"
        "  'examples': sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob('*')\n"
        "    if p.is_file() and '__pycache__' not in p.parts)}))\n"
    )
    imported = json.loads(
        run([str(bin_dir / "python"), "-c", script, *shipped_modules()], outside, env)
    )
    assert imported["typed"]
    assert imported["users"] == ["user models", "user workflows"]
    assert all(str(venv) in file for file in imported["files"].values())
    assert imported["examples"] == example_files()  # what the docs' commands read
    assert imported["plugin"] == ["coord.testing.plugin"]
    kinds = ["agents", "aggregator", "chain", "plan", "saga", "vote"]
    assert imported["schemas"] == [f"{kind}.json" for kind in kinds]

    coord = str(bin_dir / "coord")
    assert "Usage: coord" in run([coord, "--help"], outside, env)
    assert run([coord, "--version"], outside, env).startswith("coord 0.1.0")
    shipped = Path(imported["files"]["coord"]).parent
    assert (
        run([coord, "schema", "saga"], outside, env) == (shipped / "schemas/saga.json").read_text()
    )

    port, ui_port = free_port(), free_port()
    server_env = {**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}", "COORD_DEMO_AGENTS": "1"}
    spec = outside / "saga.yaml"
    spec.write_text(
        "saga_id: wheel\n"
        "steps:\n"
        "  - {name: DeployToStaging, compensation: RemoveFromStaging}\n"
        "  - {name: RunE2ETests}\n"
    )
    server = [coord, "server", "--port", str(port), "--ui-port", str(ui_port)]
    with background([*server, "--db-file", str(outside / "coord.db")], outside, env) as process:
        wait_listening(port, process, time.monotonic() + 60)
        with background([coord, "worker"], outside, server_env):
            out = run([coord, "saga", "start", str(spec), "--wait"], outside, server_env, 120)
    assert json.loads(out.split("\n", 1)[1])["status"] == "completed"
