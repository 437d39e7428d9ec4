"""How the project's processes end: `coord.run`, a script ends as `asyncio.run` would end it
(docs/api.md), only without the interpreter's teardown; a dev server the process started ends
with it, even when it is killed. Each case is a script of its own, since it ends its process."""

import asyncio
import sys

import pytest

from tests.helpers import eventually
from tests.outages import free_port, listening
from tests.workers import run

SCRIPT = """\
import coord

async def main():
    {body}

coord.run(main())
"""


@pytest.mark.parametrize(
    ("body", "code", "err"),
    [
        ("return None", 0, ""),
        ("return 42", 0, ""),
        ("return True", 0, ""),
        ("raise SystemExit(3)", 3, ""),
        ("raise SystemExit(None)", 0, ""),
        ("raise SystemExit('bye')", 1, "bye\n"),
    ],
)
async def test_a_script_exits_as_python_would(body: str, code: int, err: str) -> None:
    exited, out, printed = await run(sys.executable, "-c", SCRIPT.format(body=body))
    assert (exited, out, printed) == (code, "", err)


async def test_a_bench_exits_with_the_code_its_main_returns() -> None:
    """The benches end through `exit_without_teardown` with their own code: a failed round's
    1 must not become 0, as it did while `coord.run`'s rule (a return is no code) was its."""
    script = (
        "from coord.infra.process import exit_without_teardown\nexit_without_teardown(lambda: 3)"
    )
    assert await run(sys.executable, "-c", script) == (3, "", "")


async def test_a_dev_server_ends_with_the_process_that_started_it_even_killed() -> None:
    """`start_dev_server` (the tests', the benches', the pytest plugin's): a run killed with
    SIGKILL left its servers running, holding their ports."""
    port = free_port()
    script = (
        "import asyncio, sys\n"
        "from coord.infra.devserver import start_dev_server\n"
        "async def main():\n"
        f"    server = await start_dev_server(port={port})  # kept: a dropped one stops\n"
        "    print('up', flush=True)\n"
        "    await asyncio.Event().wait()\n"
        "asyncio.run(main())\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        while (line := await asyncio.wait_for(process.stdout.readline(), 60)) != b"up\n":
            assert line, "the script ended before its server was up"  # the server's banner
        assert await listening(port)
    finally:
        process.kill()
        await process.wait()

    async def gone() -> bool:
        return not await listening(port)

    await eventually(gone, 15)
