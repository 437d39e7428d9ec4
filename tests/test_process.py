"""`coord.run`: a script ends as `asyncio.run` would end it (docs/api.md), only without the
interpreter's teardown. Each case is a script of its own, since it ends its process."""

import sys

import pytest

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
