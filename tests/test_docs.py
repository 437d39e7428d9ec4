"""The manual is held to the code like the code is to its tests.

- Every `$ ...` line of a ```console block in README.md and docs/*.md runs, in order, against
  the session's dev server and a worker serving the demo agents (a fresh task queue per
  document), and must exit 0, or the code the block shows with `$ echo $?` right after it.
  `$ export NAME=VALUE` sets a variable for the document's later lines, and
  `$ coord worker ... &` starts a worker process that serves until the document is done. Only
  `coord` and `temporal` commands may run (the Temporal CLI's `--task-queue coordinator` is the
  document's queue); illustrations that cannot run here go in ```text blocks.
  Each `coord` line runs the CLI's entry point in a process of its own, with the line's
  arguments and environment, as a shell would; the process is forked from one that has imported
  the CLI once, since the imports cost more than most commands (`ForkedCoord`).
- The generated parts (docs/cli.md, the tables of docs/events.md) are what docs/generate.py
  renders from the code.
- The layout table of docs/architecture.md names every package of the tree and its modules.
- Every link between the documents leads to a file and a heading that exist."""

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from coord.infra.devserver import installed_binary
from coord.models.wire import contract, versions
from coord.worker import build_worker
from coord.workflows import saga
from docs import generate
from tests.conftest import ROOT
from tests.workers import COORD, WorkerProcess

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WRITTEN_ELSEWHERE = {"api.md", "testing.md", "specs.md", "metrics.md", "dashboard.md", "tracing.md"}
"""Guides other branches add to docs/; links to them are allowed before they arrive."""
RUNNABLE = {"coord", "temporal"}
COMMAND_TIMEOUT = 120.0
FENCE = re.compile(r"^\s*```(\S*)")


@dataclass(frozen=True)
class Command:
    """One `$` line of a console block (its continuation lines joined), and where it is."""

    where: str
    text: str
    expected: int = 0


def fenced_blocks(text: str) -> Iterator[tuple[str, int, list[str]]]:
    """Each fenced block's language, the line number of its first line, and its lines, without
    the indentation of its fence (a block inside a list item)."""
    language: str | None = None
    start, indent, lines = 0, 0, list[str]()
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence and language is None:
            language, start, lines = str(fence[1]), number + 1, []
            indent = len(line) - len(line.lstrip())
        elif fence and language is not None:
            yield language, start, lines
            language = None
        elif language is not None:
            lines.append(line[indent:] if line[:indent].isspace() else line)


def block_commands(name: str, start: int, lines: list[str]) -> list[Command]:
    commands: list[Command] = []
    index = 0
    while index < len(lines):
        line, where = lines[index], f"{name}:{start + index}"
        index += 1
        if not line.startswith("$ "):
            continue
        text = line[2:]
        while text.endswith("\\") and index < len(lines):
            text, index = text[:-1].rstrip() + " " + lines[index].strip(), index + 1
        if text.strip() == "echo $?":
            commands[-1] = replace(commands[-1], expected=int(lines[index]))
        else:
            commands.append(Command(where, text.strip()))
    return commands


def document_commands(path: Path) -> list[Command]:
    name = str(path.relative_to(ROOT))
    return [
        command
        for language, start, lines in fenced_blocks(path.read_text())
        if language == "console"
        for command in block_commands(name, start, lines)
    ]


RUN_DOCUMENTS = [path for path in DOCUMENTS if document_commands(path)]


def command_env(dev_env: WorkflowEnvironment, task_queue: str) -> dict[str, str]:
    """What a reader's shell has: `coord` and `temporal` on the PATH, the server and queue."""
    path = [str(Path(COORD).parent), str(Path(installed_binary("temporal")).parent)]
    return {
        **os.environ,
        "PATH": os.pathsep.join([*path, os.environ.get("PATH", "")]),
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "COORD_TASK_QUEUE": task_queue,
    }


def program(text: str) -> str:
    """The command a line runs, past any `NAME=value` assignments before it."""
    words = shlex.split(text, comments=True)
    return next((word for word in words if "=" not in word), "")


FORK_SERVER = """
import json, os, sys
import coord.starter.cli
WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            for fd, path, flags in (
                (0, os.devnull, os.O_RDONLY), (1, request["out"], WRITE), (2, request["err"], WRITE)
            ):
                os.dup2(os.open(path, flags, 0o644), fd)
            sys.argv = ["coord", *request["argv"]]
            coord.starter.cli.main()
        finally:
            os._exit(70)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""
"""Reads one command a line (JSON), runs it in a child forked for it, answers its exit code.
Importing the CLI starts no thread, so forking after it is safe."""


class ForkedCoord:
    """`coord` commands, each in a fresh process forked from a server that imported the CLI."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> "ForkedCoord":
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            FORK_SERVER,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        return cls(process)

    async def run(self, argv: list[str], env: dict[str, str], output: Path) -> tuple[int, str]:
        """Run `coord ARGV` with `env` from the checkout; its exit code and what it printed."""
        assert self.process.stdin is not None and self.process.stdout is not None
        out, err = output.with_suffix(".out"), output.with_suffix(".err")
        request = {"argv": argv, "env": env, "cwd": str(ROOT), "out": str(out), "err": str(err)}
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        await self.process.stdin.drain()
        try:
            answer = await asyncio.wait_for(self.process.stdout.readline(), COMMAND_TIMEOUT)
        except TimeoutError:
            self.stop()  # the command with it: the documents after this one fail fast
            late = f"`coord {shlex.join(argv)}` ran over {COMMAND_TIMEOUT}s"
            raise AssertionError(late) from None
        assert answer, "the coord fork server has stopped"
        return int(answer), f"stdout:\n{out.read_text()}\nstderr:\n{err.read_text()}"

    def stop(self) -> None:
        """End the server and any command still running (they share its process group)."""
        if self.process.returncode is None:
            os.killpg(self.process.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
async def forked_coord() -> AsyncIterator[ForkedCoord]:
    coord = await ForkedCoord.start()
    yield coord
    coord.stop()
    await coord.process.wait()


async def run_in_bash(text: str, env: dict[str, str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-o",
        "pipefail",
        "-c",
        text,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT)
    assert process.returncode is not None
    return process.returncode, f"stdout:\n{out.decode()}\nstderr:\n{err.decode()}"


async def run_line(command: Command, env: dict[str, str], coord: ForkedCoord, output: Path) -> None:
    """A `coord` line through the fork server (after its `NAME=value` assignments), a
    `temporal` line through bash, with the document's queue for the Temporal CLI's."""
    words = shlex.split(command.text, comments=True)
    if program(command.text) == "coord":
        start = words.index("coord")
        local = dict(word.split("=", 1) for word in words[:start])
        code, printed = await coord.run(words[start + 1 :], {**env, **local}, output)
    else:
        queue = f"--task-queue {env['COORD_TASK_QUEUE']}"
        code, printed = await run_in_bash(
            command.text.replace("--task-queue coordinator", queue), env
        )
    assert code == command.expected, (
        f"{command.where}: `{command.text}` exited {code}, the document says "
        f"{command.expected}\n{printed}"
    )


@asynccontextmanager
async def background_workers() -> AsyncIterator[list[WorkerProcess]]:
    """The `coord worker ... &` a document starts, stopped when it is done."""
    workers: list[WorkerProcess] = []
    try:
        yield workers
    finally:
        for worker in workers:
            worker.stop()


async def start_worker(
    command: Command, env: dict[str, str], client: Client, task_queue: str
) -> WorkerProcess:
    argv = shlex.split(command.text, comments=True)[:-1]
    assert argv[:2] == ["coord", "worker"], f"{command.where}: only `coord worker` runs with &"
    process = subprocess.Popen(
        [COORD, *argv[1:]],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    worker = WorkerProcess(process, client, task_queue, workflows="--no-workflows" not in argv)
    try:
        await worker.wait_polling(client, polled_queue(argv, task_queue))
    except BaseException:  # never polled in time: no document holds it to stop it later
        worker.stop()
        raise
    return worker


def polled_queue(argv: list[str], task_queue: str) -> str:
    """The queue a started worker is known by once it polls: the coordinator queue, or, for one
    serving agents only (`--no-workflows`), its first `--only` agent's."""
    if "--no-workflows" not in argv:
        return task_queue
    return contract.agent_task_queue(argv[argv.index("--only") + 1].split(",")[0], task_queue)


@pytest.mark.parametrize("document", RUN_DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
async def test_console_blocks_run(
    document: Path,
    dev_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    forked_coord: ForkedCoord,
    tmp_path: Path,
) -> None:
    env = command_env(dev_env, task_queue)
    async with build_worker(client, task_queue), background_workers() as workers:
        for number, command in enumerate(document_commands(document)):
            assert program(command.text) in RUNNABLE | {"export"}, (
                f"{command.where}: `{command.text}` is not a coord or temporal command; "
                "show it in a ```text block"
            )
            words = shlex.split(command.text, comments=True)
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                env[name] = value
            elif words[-1] == "&":
                workers.append(await start_worker(command, env, client, task_queue))
            else:
                await run_line(command, env, forked_coord, tmp_path / f"command-{number}")


def test_console_blocks_are_parsed_as_written() -> None:
    """Continuation lines join their command, `echo $?` sets the code the command before it
    must exit with, output lines are not commands, and a block inside a list item counts."""
    text = "- item\n\n  ```console\n  $ coord plan start x.yaml \\\n      --wait\n  Task | State\n"
    text += "  $ echo $?\n  10\n  ```\n"
    [(language, start, lines)] = fenced_blocks(text)
    assert (language, start) == ("console", 4)
    assert block_commands("doc.md", start, lines) == [
        Command("doc.md:4", "coord plan start x.yaml --wait", expected=10)
    ]


def test_generated_documents_are_current() -> None:
    assert generate.stale() == [], "run `make docs` (python -m docs.generate) and commit"


LAYOUT_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|([^|]*)\|")
CODE_FOLDERS = ("models", "workflows", "activities", "infra", "starter")


def layout_table() -> dict[str, set[str]]:
    """The rows of docs/architecture.md's layout table: a path, and the modules it names."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        row = LAYOUT_ROW.match(line)
        if row:
            rows[row[1]] = set(re.findall(r"`([^`]+\.py)`", row[2]))
    return rows


def tree_packages() -> dict[str, set[str]]:
    """Every package of the code's folders, with its modules (`__init__.py` aside)."""
    packages = {}
    for folder in CODE_FOLDERS:
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            package = init.parent
            name = f"{package.relative_to(ROOT)}/"
            packages[name] = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    return packages


def test_the_sagas_version_in_the_manual_is_the_codes() -> None:
    """docs/sagas.md names the saga runtime version starters write, and the bundle a run
    without it asks: both move with every new version."""
    text = (ROOT / "docs" / "sagas.md").read_text()
    assert f"the saga runtime version (`{versions.SAGA_VERSION}`)" in text
    assert f"(`{saga.SAGA_PATCH_BUNDLES[0][0]}`)" in text


def test_layout_table_matches_the_tree() -> None:
    table, tree = layout_table(), tree_packages()
    missing = sorted(set(tree) - set(table))
    assert not missing, f"docs/architecture.md's layout table lacks rows for {missing}"
    for package, modules in tree.items():
        assert table[package] == modules, (
            f"docs/architecture.md, layout row {package}: add {sorted(modules - table[package])}, "
            f"remove {sorted(table[package] - modules)}"
        )
    gone = sorted(path for path in table if not (ROOT / path).exists())
    assert not gone, f"docs/architecture.md's layout table names paths that do not exist: {gone}"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text outside fenced blocks, where links are links."""
    inside, kept = False, []
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub makes for a document."""
    headings = re.findall(r"^#+ (.+)$", prose(path.read_text()), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def broken_links(document: Path) -> Iterator[str]:
    for target in LINK.findall(prose(document.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (document.parent / file).resolve() if file else document
        if path.name in WRITTEN_ELSEWHERE and path.parent == ROOT / "docs":
            continue
        if not path.exists():
            yield f"{target} (no such file)"
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            yield f"{target} (no such heading)"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_lead_somewhere(document: Path) -> None:
    assert list(broken_links(document)) == []
